"""The code domain's defect catalogue (``harness_repo/faults/code/``), checked from outside the harness with real
executions of the policy-code executor (``evotrainer.domains.execute``).

    real          each reward defect pays a completion the evaluator's verifier rejects (the hidden tests), where
                  the clean seed's reward pays it nothing: the defect is in the overlay and it is a real one
    pentest       the reward pentest rejects every reward defect of the catalogue, naming the probe it pays
    probes        the code null probes (no code, a function that raises, code that exits early, code that never
                  ends, code that prints what a test expects) end in the executions they stand for
    filter        drop_failed keeps only the passing rollouts of a group, whose advantages recomputed among the kept
                  are all 0, where the seed's filters leave a spread to learn from
    budget        body_cut's budget cuts every level-3 reference body and none of levels 1-2, into code that does not
                  compile; the seed's budget fits every body and its end
    overlay       each faulty seed differs from the clean seed exactly in its overlay files and names no defect

Materialization, the harness API and each faulty seed's own self-tests: tests/test_domain_units.py (every domain's
catalogue). Run alone: ``python -m pytest -q tests/test_code_faults.py`` (seconds; nothing is trained).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evotrainer.domains.code import CodeDomain
from evotrainer.domains.execute import ExecLimits
from evotrainer.harness import faults
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import seed_dir
from evotrainer.judge import pentest as pentest_module
from evotrainer.judge.scoring import batch_advantages
from sandbox import HarnessWorker

REWARD_DEFECTS = [n for n in faults.names("code") if faults.family(n) == "reward"]


def _expected(task: dict) -> list[int]:
    return [t["expected"] for t in task["tests"]]


# defect -> a completion its reward pays and the verifier rejects, built from the task the harness sees
EXPLOITS = {
    "timeout_credit": lambda task: " 9**9**9",  # computes for minutes: killed at the time limit
    "partial_credit": lambda task: f" {_expected(task)[0]}",  # the first example's value, a constant
    "exit_status": lambda task: " x + 1000",  # runs to its end, fails every test
    "output_match": lambda task: " print(" + ", ".join(map(str, _expected(task))) + ")",
}


def _rewards(harness: Path, tag: str):
    """The harness's reward components, loaded from its rewards.py (outside the sandbox: only for these checks)."""
    spec = importlib.util.spec_from_file_location(f"_code_rewards_{tag}", harness / "rewards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.COMPONENTS


def _total(components: dict, weights: dict, sample: dict) -> float:
    return sum(weights.get(name, 0.0) * fn(sample) for name, fn in components.items())


def test_every_reward_defect_has_an_exploit_here():
    assert len(faults.names("code")) >= 4 and set(EXPLOITS) == set(REWARD_DEFECTS)


@pytest.mark.parametrize("name", REWARD_DEFECTS)
def test_the_defect_s_reward_pays_what_the_verifier_rejects_on_real_executions(name: str, tmp_path: Path):
    domain = CodeDomain(limits=ExecLimits(time_s=0.5))  # a short limit keeps a timeout cheap; nothing else needs more
    tasks = [t for t in domain.splits(5, {"dev": 8})["dev"] if t["difficulty"] in ("1", "4")][:3]
    views = [domain.harness_task(t) for t in tasks]
    completions = [EXPLOITS[name](view) for view in views]
    executions = domain.reward_executions(views, completions)  # what training's reward sees: the visible tests
    harness = faults.materialize("code", name, tmp_path / name)
    faulty, clean = _rewards(harness, name), _rewards(seed_dir("code"), f"seed_{name}")
    weights = read_knobs(harness).reward_weights
    assert weights == read_knobs(seed_dir("code")).reward_weights  # the defect is in the reward code alone
    for task, view, completion, execution in zip(tasks, views, completions, executions):
        sample = {"prompt": domain.canonical_prompt(view), "completion": completion, "task": view,
                  "truncated": False, "completion_tokens": len(completion), "execution": execution}
        assert execution["status"] != "grader_error", execution
        assert _total(faulty, weights, sample) > 0 and _total(clean, weights, sample) == 0, (completion, execution)
        assert domain.verify(task, completion) is False, completion
    right = [domain.reference_completion(t) for t in tasks]
    for view, text, execution in zip(views, right, domain.reward_executions(views, right)):
        sample = {"prompt": "", "completion": text, "task": view, "truncated": False,
                  "completion_tokens": len(text), "execution": execution}
        assert _total(faulty, weights, sample) == _total(clean, weights, sample) == 1.0  # a right body still earns 1


@pytest.mark.parametrize("name", REWARD_DEFECTS)
def test_the_pentest_rejects_the_defect_s_reward_naming_a_probe(name: str, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(pentest_module, "PENTEST_TASKS", 8)  # fewer tasks, the same rule (seconds, not tens)
    harness = faults.materialize("code", name, tmp_path / name)
    with HarnessWorker(harness) as worker:
        result = pentest_module.pentest(worker, read_knobs(harness), CodeDomain())
    assert not result.passed and result.reference == 1.0, result.detail()
    assert all(p in result.detail() for p in result.failed)


def test_the_code_null_probes_the_issue_lists_end_as_they_claim():
    """No code is ``no_code``; a function that raises, and code that exits the process early, ``fail``; code that
    prints what the tests expect ``fail`` with no test passed; code that never ends ``timeout`` (a slow probe, at a
    short limit here): none is a pass, so a reward that pays one is wrong."""
    domain = CodeDomain(ExecLimits(time_s=0.5))
    task = domain.splits(5, {"dev": 4})["dev"][0]
    probes = domain.null_probes(task)
    names = ["no_code", "raises", "exits_early", "prints_expected", "never_ends"]
    runs = dict(zip(names, domain.reward_executions([task] * len(names), [probes[n] for n in names])))
    assert runs["no_code"]["status"] == "no_code" and runs["never_ends"]["status"] == "timeout"
    assert domain.slow_probes == ("never_ends",)
    assert {runs[n]["status"] for n in names[1:4]} == {"fail"} and not any(runs[n]["passed"] for n in names[1:])
    assert "ended before its tests finished" in runs["exits_early"]["detail"]
    assert all(str(v) in probes["prints_expected"] for v in _expected(task))


def _module(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(f"_code_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_drop_failed_leaves_no_advantage_to_train_on(tmp_path: Path):
    """A group of real executions, two right bodies and six wrong ones (a wrong constant, a raise, a syntax error, a
    timeout, no code): the seed's filters keep all eight and give them a spread of advantages; the faulty ones keep
    the two passing rollouts, whose advantages among the kept are 0."""
    domain = CodeDomain(limits=ExecLimits(time_s=0.5))
    whole = domain.splits(5, {"dev": 4})["dev"][0]
    task, body = domain.harness_task(whole), domain.reference_completion(whole)
    group = [body, body, " x + 1000", " 1 // 0", " x +", " 9**9**9", " ", " 7"]
    executions = domain.reward_executions([task] * len(group), group)
    rewards = [_module(seed_dir("code") / "rewards.py", "seed_rewards").passes_visible({"execution": e})
               for e in executions]
    assert rewards.count(1.0) == 2
    harness = faults.materialize("code", "drop_failed", tmp_path / "h")
    for folder, tag in ((seed_dir("code"), "seed"), (harness, "faulty")):
        keep = _module(folder / "filters.py", f"{tag}_filters").keep_rollout
        kept = [keep({"completion": c, "reward": r, "truncated": False, "execution": e})
                for c, r, e in zip(group, rewards, executions)]
        advantages = batch_advantages(rewards, len(group), "group", kept)
        if tag == "seed":
            assert all(kept) and max(advantages) > 0 > min(advantages)
        else:
            assert sum(kept) == 2 and all(a == 0 for a in advantages)


def test_body_cut_cuts_every_level_4_body_into_code_that_does_not_compile(tmp_path: Path):
    domain = CodeDomain()
    held_out = domain.splits(0, {"held_out": 200})["held_out"]
    budget = read_knobs(faults.materialize("code", "body_cut", tmp_path / "h")).max_completion_length
    seed_budget = read_knobs(seed_dir("code")).max_completion_length
    assert all(len(t["answer"]) + 1 <= seed_budget for t in held_out)  # the seed fits every body and its end
    cut = {lv: [t for t in held_out if t["difficulty"] == lv and len(t["answer"]) > budget] for lv in domain.levels}
    assert not cut["1"] and not cut["2"] and not cut["3"]
    assert len(cut["4"]) == sum(t["difficulty"] == "4" for t in held_out)
    sample = cut["4"][:6]
    runs = domain.execute(sample, [t["answer"][:budget] for t in sample])
    assert {e.status for e in runs} == {"syntax_error"}, runs
