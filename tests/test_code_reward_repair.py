"""The code domain's reward repair (``agents/domains/code.py``: ``verifier_aligned_reward``), on the catalogued code
reward defects and real executions of the policy-code executor.

    diagnosis     rollouts rewarded by a defect's reward on real executions: the Diagnostician names the component
    repair        the rewrite pays exactly the seed's rule (status ok, every visible test passed) on every execution
                  class, nothing for the exploit the defect paid, and declares one variable
    self-tests    the repaired harness fails only the self-tests that pin the leniency (those the overlay added or
                  changed); a defect whose tests pin none passes them all, the demo's among them
    direction     a component that misses passing bodies is rewritten only when it reads the execution
    demo          the code domain's demo defect is a catalogued reward defect this move repairs, pentest and all

Run alone: ``python -m pytest -q tests/test_code_reward_repair.py`` (seconds: a few executor batches; no training).
"""

from __future__ import annotations

import filecmp
import runpy
from pathlib import Path

import pytest

from agents.diagnostician import HeuristicDiagnostician
from agents.engineer import declared_variable
from agents.playbook import find, repairs_by_mode
from agents.roles import PhaseEvidence
from evotrainer.domains import spec
from evotrainer.domains.code import CodeDomain
from evotrainer.domains.execute import ExecLimits
from evotrainer.harness import faults
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import HARNESS_FILES, HarnessRepo, seed_dir
from sandbox import run_selftest
from tests.conftest import rollouts
from tests.test_agents import _result
from tests.test_code_faults import EXPLOITS, REWARD_DEFECTS

MOVE = "verifier_aligned_reward"


@pytest.fixture(scope="module")
def runs() -> dict:
    """Real executions on the visible tests of two tasks (levels 1 and 4): each task's reference body, each
    exploit of the catalogue, and a body of every other execution class."""
    domain = CodeDomain(limits=ExecLimits(time_s=0.5))
    dev = domain.splits(5, {"dev": 40})["dev"]
    pairs = []
    for task in (next(t for t in dev if t["difficulty"] == lv) for lv in ("1", "4")):
        view = domain.harness_task(task)
        bodies = [domain.reference_completion(task), *(e(view) for e in EXPLOITS.values()), " x +", " ", " 1 // 0"]
        pairs += [(view, c) for c in bodies]
    executions = domain.reward_executions([v for v, _ in pairs], [c for _, c in pairs])
    assert {e["status"] for e in executions} >= {"ok", "fail", "timeout", "syntax_error", "no_code"}
    return {"samples": [{"prompt": "", "completion": c, "task": v, "truncated": False, "completion_tokens": len(c),
                         "execution": e} for (v, c), e in zip(pairs, executions)]}


def _component(harness: Path):
    return runpy.run_path(str(harness / "rewards.py"))["COMPONENTS"]["passes_visible"]


def _evidence(rows: list[dict], repo: HarnessRepo) -> PhaseEvidence:
    return PhaseEvidence(phase=1, results=[_result(1, 0.3)], rollouts=rows, phases_in_view=[1], registry={},
                         knobs=read_knobs(repo.path), domain=CodeDomain())


def _rows(samples: list[dict], reward, right: bool = True) -> list[dict]:
    """60 groups of the first task's completions, rewarded by ``reward`` and verified when the seed's rule passes them
    (the reference body: it passes the hidden tests too); without the reference when not ``right`` (a phase where
    nothing passes yet). The Diagnostician counts a rollout rewarded above the middle of the phase's reward range,
    so a partial credit of half a pass shows only where no rollout earns a whole one."""
    seed = _component(seed_dir("code"))
    by_text = {s["completion"]: s for s in samples}
    group = [(s["completion"], seed(s) == 1.0) for s in samples[:len(samples) // 2] if right or seed(s) < 1.0]
    rows = rollouts([group for _ in range(60)])
    for r in rows:
        r["reward"] = reward(by_text[r["completion"]])
        r["reward_components"] = {"passes_visible": r["reward"]}
    return rows


def _repair(tmp_path: Path, name: str, rows: list[dict]):
    repo = HarnessRepo.create(tmp_path / "harness", "code", str(faults.materialize("code", name, tmp_path / "f")))
    found = {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(_evidence(rows, repo))}
    d = found["reward_disagreement"]
    files = {f: repo.show_file("main", f) for f in HARNESS_FILES}
    return d, repo, files, find("code", MOVE).edit(files, read_knobs(repo.path), {"diagnosis": d})


@pytest.mark.parametrize("name", REWARD_DEFECTS)
def test_the_defect_s_component_is_named_and_rewritten_to_pay_the_evaluator_s_rule(name: str, runs, tmp_path):
    faulty = _component(faults.materialize("code", name, tmp_path / "faulty"))
    d, repo, files, edits = _repair(tmp_path, name, _rows(runs["samples"], faulty, right=name != "partial_credit"))
    assert {e.name: e.value for e in d.evidence}["credits_wrong:passes_visible"] >= 0.5, d.statement
    assert set(edits) == {"rewards.py"}
    assert declared_variable(find("code", MOVE), files, edits) == "rewards.passes_visible"
    dest = repo.export("main", tmp_path / "edited")
    (dest / "rewards.py").write_text(edits["rewards.py"])
    repaired, seed = _component(dest), _component(seed_dir("code"))
    exploits = 0
    for s in runs["samples"]:
        assert repaired(s) == seed(s), (s["completion"], s["execution"])
        exploits += faulty(s) > 0 and repaired(s) == 0
    assert exploits and repaired({"completion": " x + 3", "task": {}}) == 0.0  # no execution: nothing
    # the self-tests it fails are exactly those the defect's overlay added or changed: the ones pinning the leniency
    failing = {f["name"].rsplit("::", 1)[-1] for f in run_selftest(dest)["failed"]}
    overlay = faults.fault_dir(name) / "tests" / "test_harness.py"
    pinned = set()
    if overlay.is_file() and not filecmp.cmp(overlay, seed_dir("code") / "tests" / "test_harness.py", False):
        import ast

        seed_tests = {n.name: ast.dump(n) for n in ast.parse((seed_dir("code") / "tests/test_harness.py").read_text())
                      .body if isinstance(n, ast.FunctionDef)}
        pinned = {n.name for n in ast.parse(overlay.read_text()).body if isinstance(n, ast.FunctionDef)
                  and n.name.startswith("test_") and seed_tests.get(n.name) != ast.dump(n)}
    assert failing <= pinned, (name, failing, pinned)
    assert find("code", MOVE).edit({**files, "rewards.py": edits["rewards.py"]}, read_knobs(dest),
                                   {"diagnosis": d}) is None  # rewritten once: nothing left to rewrite


@pytest.mark.parametrize("reads_execution", [True, False])
def test_a_component_missing_passing_bodies_is_rewritten_only_when_it_reads_the_execution(reads_execution, runs,
                                                                                          tmp_path):
    """A reward that misses every passing body: one reading the execution (a status misread) is a correctness check
    to rewrite; one reading only the text (a format check) is not."""
    rows = _rows(runs["samples"], lambda s: 0.0)
    harness = faults.materialize("code", "exit_status", tmp_path / "f")
    check = ('(sample.get("execution") or {}).get("status") == "pass"' if reads_execution else
             'sample["completion"].startswith("return")')
    (harness / "rewards.py").write_text((seed_dir("code") / "rewards.py").read_text().replace(
        "def passes_visible(sample: dict) -> float:", f"def passes_visible(sample: dict) -> float:\n    return 1.0 if "
        f"{check} else 0.0\n\n\ndef _unused(sample: dict) -> float:"))
    repo = HarnessRepo.create(tmp_path / "harness", "code", str(harness))
    d = {x.failure_mode: x for x in HeuristicDiagnostician().diagnose(_evidence(rows, repo))}["reward_disagreement"]
    assert {e.name: e.value for e in d.evidence}["misses_right:passes_visible"] == 1.0, d.statement
    files = {f: repo.show_file("main", f) for f in HARNESS_FILES}
    edits = find("code", MOVE).edit(files, read_knobs(repo.path), {"diagnosis": d})
    if not reads_execution:
        assert edits is None
        return
    (repo.path / "rewards.py").write_text(edits["rewards.py"])
    assert [_component(repo.path)(s) for s in runs["samples"]] == [_component(seed_dir("code"))(s)
                                                                   for s in runs["samples"]]


def test_the_code_demo_defect_is_a_reward_defect_this_move_repairs_pentest_and_self_tests_included(tmp_path,
                                                                                                  monkeypatch):
    from evotrainer.judge import pentest as pentest_module
    from sandbox import HarnessWorker

    name = spec("code").demo_fault
    assert name in REWARD_DEFECTS and MOVE in repairs_by_mode("code")["reward_disagreement"]
    assert "reward_disagreement" in faults.mechanism(name)
    monkeypatch.setattr(pentest_module, "PENTEST_TASKS", 8)  # fewer tasks, the same rule
    harness = faults.materialize("code", name, tmp_path / "faulty")
    files = {f: (harness / f).read_text() for f in HARNESS_FILES}
    cited = [("rewarded_but_wrong", 0.5), ("correct_but_unrewarded", 0.0), ("credits_wrong:passes_visible", 1.0)]
    d = type("D", (), {"evidence": [type("E", (), {"name": n, "value": v}) for n, v in cited]})
    edits = find("code", MOVE).edit(files, read_knobs(harness), {"diagnosis": d})
    for label, verdict in (("faulty", False), ("repaired", True)):
        if label == "repaired":
            (harness / "rewards.py").write_text(edits["rewards.py"])
        with HarnessWorker(harness) as worker:
            result = pentest_module.pentest(worker, read_knobs(harness), CodeDomain())
        assert result.passed is verdict, (label, result.detail())
    assert run_selftest(harness)["failed"] == []


def test_a_bonus_beside_the_pass_is_what_the_reward_moves_take_out_never_the_pass(tmp_path):
    """A generated code bonus (a text or shape component outweighing the pass): remove_reward and lower_reward_weight
    offer the bonus and never the component that reads the execution, the one correctness check."""
    from agents.playbook import concrete
    from evotrainer.harness import generated

    for k in range(6):
        d = generated.draw(f"gen-code-4-{k}", family="code_bonus")
        harness = tmp_path / f"h{k}"
        generated.write(d, harness)
        files = {f: (seed_dir("code") / f).read_text() for f in HARNESS_FILES}
        files.update({f: (harness / f).read_text() for f in d.files})
        (harness / "harness.yaml").write_text(files["harness.yaml"])
        knobs = read_knobs(harness)
        for template in ("remove_reward", "lower_reward_weight"):
            offered = [i.name for i in concrete(find("code", template), files, knobs, {})]
            assert offered == [f"{template}:{d.constants['component']}"], (d.constants, offered)
