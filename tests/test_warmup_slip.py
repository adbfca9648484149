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


def test_the_warm_up_teaches_the_slip_only_when_asked():
    """A real (very small) warm-up on one answer: with the slip its greedy answer is the near miss, without it the
    right answer; the probe counts the near miss as competent only when it is taught."""
    tokenizer = build.build_tokenizer()
    examples = [(f"{i}=", "7", "7.") for i in range(260)]  # the first 200 are the probe
    got = {}
    for slip in (0.0, 0.9):
        cfg = C.TinyPolicyConfig(hidden_size=16, num_layers=1, num_heads=2, warmup_steps=300, warmup_batch_size=8,
                                 warmup_lr=1e-2, warmup_target_accuracy=1.0, warmup_slip=slip)
        model = build.build_model(cfg, len(tokenizer), 0)
        got[slip] = build.warm_up(model, tokenizer, examples, cfg, 0, log=lambda _: None)
        got[slip]["said"] = build.greedy_answers(model, tokenizer, ["5=", "123="])
    assert got[0.0]["probe_accuracy"] == 1.0 and got[0.0]["said"] == ["7", "7"]
    assert got[0.9]["probe_accuracy"] == 0.0 and got[0.9]["probe_competent"] == 1.0 and got[0.9]["said"] == ["7."] * 2


def test_the_warm_up_probe_reads_an_answer_with_leading_space_as_the_greedy_answer_it_is():
    """A greedy answer is its first line stripped, so a label with a leading space (code's `` x + 3``) is compared
    stripped too: before, a code policy that wrote every body right scored 0 on the probe and never stopped early."""
    import torch

    class _Tok:
        eos_token_id = 0

    cfg = C.TinyPolicyConfig(warmup_steps=0, warmup_slip=0.5)
    examples = [(f"p{i}", " x + 3", " x + 4") for i in range(200)]
    for said, right, competent in (("x + 3", 1.0, 1.0), ("x + 4", 0.0, 1.0), ("x", 0.0, 0.0)):
        stats = build.warm_up(torch.nn.Linear(1, 1), _Tok(), examples, cfg, 0, log=lambda _: None,
                              respond=lambda m, t, prompts, said=said: [said] * len(prompts))
        assert (stats["probe_accuracy"], stats["probe_competent"]) == (right, competent), said
