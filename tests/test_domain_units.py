"""Every registered domain is one unit (issue 41, item 1): its seed harness is the harness API (the README's names,
self-tests and knobs: tests/test_harness_api.py) and passes its own self-tests, each of its catalogued defects
(``harness_repo/faults/<domain>/``) materializes onto its own seed and passes its own self-tests, its moves load, its
reference completion verifies and none of its null probes does, and no evaluator-only field of a task ever reaches
harness code (training's reward call and the run's harness view). The tests iterate ``DOMAINS``: a newly registered
domain is covered without a line here.

Run alone: ``python -m pytest -q tests/test_domain_units.py`` (seconds; nothing is trained)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evotrainer import config as C
from evotrainer.domains import DOMAINS, get_domain, register, spec
from evotrainer.domains.base import SPLITS
from evotrainer.domains.math import MathDomain
from evotrainer.harness import faults
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import seed_dir
from evotrainer.trainer.hooks import HarnessHooks
from sandbox import HarnessWorker, SandboxLimits, run_selftest
from tests.test_harness_api import check_seed_api

LIMITS = SandboxLimits(memory_mb=1024, cpu_s=60, call_timeout_s=20)


def _tasks(name: str, n: int = 6) -> list[dict]:
    return get_domain(name).splits(3, {"dev": n})["dev"]


@pytest.mark.parametrize("name", DOMAINS)
def test_the_seed_harness_is_the_harness_api_and_passes_its_own_tests(name: str):
    seed = seed_dir(spec(name).seed)
    check_seed_api(seed)
    read_knobs(seed)
    result = run_selftest(seed, limits=LIMITS)
    assert result["n"] > 0 and not result["failed"], result["failed"]


CATALOGUED = [(domain, fault) for domain in DOMAINS for fault in faults.names(domain)]


@pytest.mark.parametrize(("name", "fault"), CATALOGUED, ids=[f"{d}-{f}" for d, f in CATALOGUED])
def test_each_catalogued_defect_materializes_onto_its_own_seed_and_passes_its_own_tests(name, fault, tmp_path: Path):
    """The faulty seed is the domain's seed with the overlay over it: the harness API still, its knobs valid, its
    self-tests passing (as a user's flawed harness would), and no other domain's seed takes it."""
    harness = faults.materialize(name, fault, tmp_path / fault)
    check_seed_api(harness)
    read_knobs(harness)
    result = run_selftest(harness, limits=LIMITS)
    assert result["n"] > 0 and not result["failed"], result["failed"]
    for other in set(DOMAINS) - {name}:
        with pytest.raises(ValueError, match="not of"):
            faults.materialize(other, fault, tmp_path / other)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


@pytest.mark.parametrize(("name", "fault"), CATALOGUED, ids=[f"{d}-{f}" for d, f in CATALOGUED])
def test_each_catalogued_defect_differs_from_its_seed_exactly_in_its_overlay_and_names_no_defect(name, fault,
                                                                                                 tmp_path: Path):
    """The overlay is exactly where the faulty seed differs (no card left behind), and its files say nothing of what
    is wrong: the agents must find a defect by its mechanism."""
    import filecmp

    seed, built = seed_dir(spec(name).seed), faults.materialize(name, fault, tmp_path / fault)
    overlay = faults.overlay(fault)
    differ = {f for f in _files(built) if not (seed / f).is_file() or not filecmp.cmp(seed / f, built / f, False)}
    assert overlay and differ == set(overlay) and _files(built) == _files(seed) | differ and faults.CARD not in differ
    words = {"fault", "bug", "defect", "flaw", "hack", "broken", fault, fault.replace("_", " ")}
    for rel in overlay:
        text = (built / rel).read_text().lower()
        assert not [w for w in words if w in text], f"{fault}/{rel} names what is wrong"


@pytest.mark.parametrize("name", DOMAINS)
def test_the_domain_s_moves_load(name: str):
    """The Engineer's moves for the domain (generic, knob table, neutral forms, ``agents.domains.<name>``) load with
    unique names, and every failure mode they answer is a registered one (a diagnosis can name it)."""
    from agents.modes import MODES
    from agents.playbook import for_domain

    moves = for_domain(name)
    assert moves and len({m.name for m in moves}) == len(moves)
    assert not {mode for m in moves for mode in m.answers} - set(MODES)


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


LEAK_CHECKING_FILTERS = '''
def keep_rollout(rollout):
    assert "secret" not in rollout["task"], sorted(rollout["task"])
    return True


def keep_group(group):
    return all("secret" not in r["task"] for r in group)
'''


def test_replay_gives_harness_code_the_run_s_harness_view_and_fails_on_the_whole_task(tmp_path: Path):
    """Replay (the backtest's and the Diagnostician's evidence) in a real sandbox worker on the run's harness tasks:
    rewards and filters never see the hidden field. Handed the whole tasks instead, the same harness fails: the
    check can fail."""
    import shutil

    from evotrainer.judge.replay import replay
    from evotrainer.rundir import RunDir
    from sandbox import HarnessError
    from tests.conftest import FAST, rollouts

    register("math_secret", __name__, "_Secret", seed="math")
    rd = RunDir(tmp_path / "run")
    rd.init(C.apply_overrides(C.parse({"domain": "math_secret"}), FAST), log=lambda _: None)
    chosen = rd.harness_tasks()[:4]
    rows = rollouts([[(t["answer"], True), ("x", False)] for t in chosen])
    for row in rows:
        task = chosen[int(row["group_id"].rsplit("g", 1)[1])]
        row.update(task_id=task["id"], difficulty=str(task["difficulty"]))
    for leaky in ({"rewards.py": LEAK_CHECKING_REWARDS}, {"filters.py": LEAK_CHECKING_FILTERS}):
        harness = tmp_path / next(iter(leaky))
        shutil.copytree(seed_dir("math"), harness)
        for name, text in leaky.items():
            (harness / name).write_text(text)
        with HarnessWorker(harness, limits=LIMITS) as worker:
            out = replay(worker, harness, rows, {t["id"]: t for t in rd.harness_tasks()})
            assert len(out["rows"]) == len(rows) and all(r["kept"] for r in out["rows"])
            with pytest.raises(HarnessError):
                replay(worker, harness, rows, {t["id"]: t for t in rd.train_tasks()})
