"""The tiny policy's warm-up slip (``policy.tiny.warmup_slip``): what it teaches, what it leaves alone."""

from __future__ import annotations

import random
import runpy

from evotrainer import config as C
from evotrainer.domains.math import MathDomain
from evotrainer.policy import build
from tests.conftest import FAST, SEED


def test_maths_near_miss_is_the_right_value_in_a_form_the_verifier_and_the_seed_reward_reject():
    domain = MathDomain()
    tasks = domain.splits(3, {"dev": 40})["dev"]
    correct = runpy.run_path(str(SEED / "rewards.py"))["correct"]  # the seed harness's reward

    for task in tasks:
        miss = domain.near_miss(task)
        assert miss != task["answer"] and miss.rstrip(".") == task["answer"]
        assert not domain.verify(task, miss) and domain.verify(task, task["answer"])
        assert correct({"completion": miss, "task": task}) == 0.0


def _taught(slip: float, n: int = 4000) -> list[str]:
    """The labels the warm-up's selection gives ``n`` presentations of one example."""
    rng = random.Random(0)
    return [build.warmup_label("40", "40.", slip, rng) for _ in range(n)]


def test_the_slip_is_taught_in_its_share_of_presentations_and_never_at_zero():
    assert set(_taught(0.0)) == {"40"}
    share = _taught(0.6).count("40.") / 4000
    assert 0.57 < share < 0.63
    assert set(_taught(0.6, 50)) == {"40", "40."}
    assert build.warmup_label("40", None, 0.6, random.Random(0)) == "40"  # a domain without a near miss


def test_the_slip_draws_no_randomness_at_zero_so_earlier_policies_are_rebuilt_identically():
    rng, untouched = random.Random(1), random.Random(1)
    for _ in range(10):
        build.warmup_label("40", "40.", 0.0, rng)
    assert rng.random() == untouched.random()


def test_the_cached_policy_is_named_by_what_its_warm_up_teaches():
    cfg = C.apply_overrides(C.parse({}), list(FAST))
    tasks = MathDomain().splits(0, {"warmup": 8})["warmup"]
    other = lambda t: t["answer"] + "!"  # noqa: E731
    # at 0 the near miss is never taught: the name (and so every policy cached before the knob) stays
    assert build._cache_key(cfg, tasks) == build._cache_key(cfg, tasks, MathDomain().near_miss)
    slipped = C.apply_overrides(cfg, ["policy.tiny.warmup_slip=0.5"])
    assert build._cache_key(slipped, tasks, MathDomain().near_miss) != build._cache_key(slipped, tasks, other)
    assert build._cache_key(slipped, tasks, MathDomain().near_miss) != build._cache_key(cfg, tasks)
