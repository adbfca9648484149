"""Every registered domain is one unit (issue 41, item 1): its seed harness passes its own self-tests, its catalogued
defects materialize onto its own seed, its reference completion verifies and none of its null probes does, and no
evaluator-only field of a task ever reaches harness code (training's reward call and the run's harness view). The
tests iterate ``DOMAINS``: a newly registered domain is covered without a line here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evotrainer import config as C
from evotrainer.domains import DOMAINS, get_domain, register, spec
from evotrainer.domains.base import SPLITS
from evotrainer.domains.math import MathDomain
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import seed_dir
from evotrainer.trainer.hooks import HarnessHooks
from sandbox import HarnessWorker, SandboxLimits, run_selftest

LIMITS = SandboxLimits(memory_mb=1024, cpu_s=60, call_timeout_s=20)


def _tasks(name: str, n: int = 6) -> list[dict]:
    return get_domain(name).splits(3, {"dev": n})["dev"]


@pytest.mark.parametrize("name", DOMAINS)
def test_the_seed_harness_passes_its_own_tests(name: str):
    seed = seed_dir(spec(name).seed)
    read_knobs(seed)
    result = run_selftest(seed, limits=LIMITS)
    assert result["n"] > 0 and not result["failed"], result["failed"]


@pytest.mark.parametrize("name", DOMAINS)
def test_the_reference_completion_verifies_and_no_null_probe_does(name: str):
    domain = get_domain(name)
    for task in _tasks(name):
        assert domain.verify(task, domain.reference_completion(task)), task
        probes = domain.null_probes(task)
        assert {"empty", "prompt_echoed", "filler"} <= set(probes)
        assert not [p for p, text in probes.items() if domain.verify(task, text)], task


@pytest.mark.parametrize("name", DOMAINS)
def test_harness_task_drops_every_hidden_field(name: str):
    domain = get_domain(name)
    for task in _tasks(name):
        view = domain.harness_task(task)
        assert not set(domain.hidden_fields) & set(view)
        assert {k: task[k] for k in view} == view and {"id", "difficulty"} <= set(view)


def test_an_unregistered_domain_is_one_line_naming_the_registered_ones():
    with pytest.raises(C.ConfigError) as err:
        C.parse({"domain": "chess"})
    assert "unknown domain 'chess'" in str(err.value) and "math" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="registered twice"):
        register("math", "somewhere.else", "Other")


class _Secret(MathDomain):
    """Math with an evaluator-only field on every task."""

    hidden_fields = ("secret",)

    def splits(self, seed, sizes):
        return {k: [{**t, "secret": "hidden-" + t["id"]} for t in v] for k, v in super().splits(seed, sizes).items()}


# a reward that fails (an error in the sandbox, so the call raises) if its task carries the secret, else pays 1
LEAK_CHECKING_REWARDS = '''
def correct(sample):
    assert "secret" not in sample["task"], sorted(sample["task"])
    return 1.0


COMPONENTS = {"correct": correct}
'''


def test_training_s_reward_call_gives_harness_code_the_harness_view_and_the_verifier_the_whole_task(tmp_path: Path):
    """HarnessHooks (TRL's reward function) in a real sandbox worker: the harness's reward never sees the hidden
    field, the verifier still gets the whole task (its verdict is computed from it)."""
    import shutil

    harness = tmp_path / "harness"
    shutil.copytree(seed_dir("math"), harness)
    (harness / "rewards.py").write_text(LEAK_CHECKING_REWARDS)
    domain = _Secret()
    seen = []
    verify = domain.verify
    domain.verify = lambda task, completion: seen.append(task) or verify(task, completion)
    tasks = domain.splits(0, {"rl": 4})["rl"]
    with HarnessWorker(harness, limits=LIMITS) as worker:
        hooks = HarnessHooks(worker, read_knobs(harness), domain, phase=1, sha="0" * 40, eos_ids=[0])
        rewards = hooks(prompts=["p"] * 4, completions=[t["answer"] for t in tasks], completion_ids=[[5, 0]] * 4,
                        task_json=[json.dumps(t) for t in tasks])
    assert rewards == [1.0] * 4
    assert [t["secret"] for t in seen] == [t["secret"] for t in tasks]
    assert all("secret" not in s["task"] for s in hooks.take_batch())


def test_the_run_s_harness_tasks_drop_the_hidden_field(tmp_path: Path):
    """RunDir.harness_tasks (what replay, the backtest and the agents read) projects through the run's domain."""
    from evotrainer.rundir import RunDir
    from tests.conftest import FAST

    register("math_secret", __name__, "_Secret", seed="math")
    rd = RunDir(tmp_path / "run")
    rd.init(C.apply_overrides(C.parse({"domain": "math_secret"}), FAST), log=lambda _: None)
    assert all("secret" in t for t in rd.train_tasks())
    assert rd.harness_tasks() and not any("secret" in t for t in rd.harness_tasks())
    assert set(SPLITS) >= {"rl"}
