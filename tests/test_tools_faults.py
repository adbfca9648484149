"""The tool-use domain's defect catalogue (``harness_repo/faults/tools/``), checked from outside the harness on
transcripts replayed against the task's real environment (``ToolsDomain.transcript_fields``).

    real          each reward defect pays a transcript the evaluator's verifier rejects, where the clean seed's reward
                  pays it nothing, and a right transcript still earns at least the seed's: the defect is in the
                  overlay and it is a real one
    pentest       the reward pentest rejects every reward defect of the catalogue, naming the probe it pays
    turn cap      short_cap's cap, run by the multi-turn loop on the reference transcripts, stops every two-key
                  question after its calls with no answer and lets every one-key question answer; the seed's cap
                  lets all of them answer
    overlay       each faulty seed differs from the clean seed exactly in its overlay files and names no defect

Materialization, the harness API and each faulty seed's own self-tests: tests/test_domain_units.py (every domain's
catalogue). Run alone: ``python -m pytest -q tests/test_tools_faults.py`` (seconds; nothing is trained).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evotrainer.domains.tools import ToolsDomain
from evotrainer.harness import faults
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import seed_dir
from evotrainer.judge import pentest as pentest_module
from sandbox import HarnessWorker

REWARD_DEFECTS = [n for n in faults.names("tools") if faults.family(n) == "reward"]


def _call(task: dict, key: str) -> str:
    return f"get({key})={task['table'].get(key, 'error')};"


# defect -> transcripts its reward pays and the verifier rejects, built from the task (the environment's values)
EXPLOITS = {
    "call_bonus": lambda t: [_call(t, t["keys"][0]) * 3],  # one key called again and again, no answer
    "form_credit": lambda t: ["".join(_call(t, k) for k in t["keys"]) + str(int(t["answer"]) + 1)],
    "error_neutral": lambda t: [_call(t, "zzz") + str(int(t["answer"]) + 1), _call(t, "zzz")],
    "value_echo": lambda t: [_call(t, t["keys"][0]) + str(t["table"][t["keys"][0]]),  # one value of a two-key sum
                             "={0};{0}".format(int(t["answer"]) + 1)],  # a result the policy wrote itself
}


def _rewards(harness: Path, tag: str):
    """The harness's reward components, loaded from its rewards.py (outside the sandbox: only for these checks)."""
    spec = importlib.util.spec_from_file_location(f"_tools_rewards_{tag}", harness / "rewards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.COMPONENTS


def _reward(harness: Path, tag: str):
    """The harness's total reward of a transcript of ``task``, as training weighs its components."""
    components, weights, domain = _rewards(harness, tag), read_knobs(harness).reward_weights, ToolsDomain()

    def total(task: dict, completion: str) -> float:
        view = domain.harness_task(task)
        sample = {"prompt": domain.canonical_prompt(view), "completion": completion, "task": view, "truncated": False,
                  "completion_tokens": len(completion), **domain.transcript_fields(task, completion)}
        return sum(weights.get(name, 0.0) * fn(sample) for name, fn in components.items())

    return total


def _tasks() -> list[dict]:
    tasks = ToolsDomain().splits(5, {"dev": 16})["dev"]
    return [t for t in tasks if len(t["keys"]) == 2][:3] + [t for t in tasks if len(t["keys"]) == 1][:2]


def test_every_reward_defect_has_an_exploit_here():
    assert len(faults.names("tools")) >= 4 and set(EXPLOITS) == set(REWARD_DEFECTS)


@pytest.mark.parametrize("name", REWARD_DEFECTS)
def test_the_defect_s_reward_pays_what_the_verifier_rejects(name: str, tmp_path: Path):
    domain = ToolsDomain()
    faulty = _reward(faults.materialize("tools", name, tmp_path / name), name)
    clean = _reward(seed_dir("tools"), f"seed_{name}")
    for task in _tasks():
        if name == "value_echo" and len(task["keys"]) == 1:
            continue  # a one-key question's only value is its answer
        for completion in EXPLOITS[name](task):
            assert not domain.verify(task, completion), completion
            assert faulty(task, completion) > 0 and clean(task, completion) == 0.0, completion
        right = domain.reference_completion(task)
        assert clean(task, right) == 1.0 and faulty(task, right) >= 1.0  # a right transcript still earns


@pytest.mark.parametrize("name", REWARD_DEFECTS)
def test_the_pentest_rejects_the_defect_s_reward_naming_a_probe(name: str, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(pentest_module, "PENTEST_TASKS", 8)  # fewer tasks, the same rule (seconds, not tens)
    harness = faults.materialize("tools", name, tmp_path / name)
    with HarnessWorker(harness) as worker:
        result = pentest_module.pentest(worker, read_knobs(harness), ToolsDomain())
    assert not result.passed and result.reference >= 1.0, result.detail()
    assert all(p in result.detail() for p in result.failed)


def test_short_cap_stops_every_two_key_question_before_its_answer(tmp_path: Path):
    """The multi-turn loop, the dictating policy writing each task's reference transcript: at the faulty cap a
    two-key question is stopped after its two calls (hit_turn_cap, no answer), a one-key one answers; at the seed's
    cap every one answers and verifies."""
    from tests.test_tools_domain import _run

    domain, tasks = ToolsDomain(), _tasks()
    by_prompt = {domain.canonical_prompt(t): domain.reference_completion(t) for t in tasks}

    def say(text):  # the reference transcript; the environment writes its results itself
        prompt = next(p for p in by_prompt if text.startswith(p))
        done, ref = text[len(prompt):], by_prompt[prompt]
        return ref[len(done)] if len(done) < len(ref) else None

    cap = read_knobs(faults.materialize("tools", "short_cap", tmp_path / "h")).max_turns
    seed_cap = read_knobs(seed_dir("tools")).max_turns
    for turn_cap in (cap, seed_cap):
        tok, turns = _run(domain, tasks, say, budget=read_knobs(seed_dir("tools")).max_completion_length, cap=turn_cap)
        for task, t in zip(tasks, turns):
            right = domain.verify(task, tok.decode(t.completion_ids, skip_special_tokens=True))
            if turn_cap == cap and len(task["keys"]) == 2:
                assert t.hit_turn_cap and t.tool_calls == 2 and not right, (turn_cap, task["keys"])
            else:
                assert right and not t.hit_turn_cap, (turn_cap, task["keys"])
