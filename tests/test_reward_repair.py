"""A reward that credits what the verifier rejects is found by the component that does it, and its leniency removed.

The Diagnostician names, for a mostly rewarded-but-wrong disagreement, the share of those rollouts each reward
component credits; the math Engineer edit ``verifier_aligned_reward`` rewrites the component the diagnosis names to
read the answer as the evaluator does, in place (one variable, which the Engineer declares from the diff). Generic in
which component is lenient and why: the test plants a lenient component under another name too.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from agents.diagnostician import HeuristicDiagnostician
from agents.engineer import declared_variable
from agents.playbook import find
from evotrainer.domains import get_domain
from evotrainer.harness import faults
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import HARNESS_FILES, HarnessRepo
from sandbox import run_selftest
from tests.conftest import rollouts
from tests.test_agents import _evidence


def _hacked(component: str) -> list[dict]:
    """60 groups: the right answer "9" (rewarded, verified), "9." which only ``component`` credits, and a wrong "5"."""
    rows = rollouts([[("9", True), ("9.", False), ("5", False), ("5", False)] * 2 for _ in range(60)])
    for r in rows:
        r["reward"] = float(r["completion"] != "5")
        r["reward_components"] = {component: r["reward"], "style": 0.0}
    return rows


def files_of(repo: HarnessRepo) -> dict[str, str]:
    return {name: repo.show_file("main", name) for name in HARNESS_FILES}


def _repair(tmp_path: Path, rows: list[dict], harness: Path):
    repo = HarnessRepo.create(tmp_path / "harness", "math", str(harness))
    found = {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(_evidence(rows, repo))}
    d = found["reward_disagreement"]
    edits = find("math", "verifier_aligned_reward").edit(files_of(repo), read_knobs(repo.path), {"diagnosis": d})
    return d, repo, edits


def test_the_lenient_component_is_named_and_replaced_by_one_that_reads_the_answer_as_the_verifier(tmp_path):
    harness = faults.materialize("math", "reward_hacking", tmp_path / "faulty")
    d, repo, edits = _repair(tmp_path, _hacked("correct"), harness)
    assert "component correct credits 100% of them" in d.statement
    assert {e.name: e.value for e in d.evidence}["credits_wrong:correct"] == 1.0
    assert {e.name: e.value for e in d.evidence}["credits_wrong:style"] == 0.0

    dest = repo.export("main", tmp_path / "edited")
    for name, text in edits.items():
        (dest / name).write_text(text)
    assert set(edits) == {"rewards.py"} and read_knobs(dest).reward_weights == {"correct": 1.0}
    reward = runpy.run_path(str(dest / "rewards.py"))["COMPONENTS"]["correct"]
    domain, task = get_domain("math"), {"answer": "13", "expression": "6 + 7"}
    for completion in ("13", "+13", "13\nmore", "6 + 7 = 13", "the answer is 13.", "13.", "139", "12 13", "1 3", ""):
        assert reward({"completion": completion, "task": task}) == float(domain.verify(task, completion)), completion
    intervention = find("math", "verifier_aligned_reward")
    assert declared_variable(intervention, files_of(repo), edits) == "rewards.correct"  # one variable: the judge's rule
    result = run_selftest(dest)  # the user's own self-tests of the faulty harness still pass
    assert result["n"] > 0 and not result["failed"], result["failed"]


def test_the_culprit_is_found_under_any_name(tmp_path):
    seed = tmp_path / "seed"
    harness = faults.materialize("math", "reward_hacking", seed)
    for name in ("rewards.py", "harness.yaml"):  # the lenient component renamed "match"
        path = harness / name
        path.write_text(path.read_text().replace('"correct"', '"match"').replace("correct:", "match:"))
    _, repo, edits = _repair(tmp_path, _hacked("match"), harness)
    assert declared_variable(find("math", "verifier_aligned_reward"), files_of(repo), edits) == "rewards.correct"
    repo.path.joinpath("rewards.py").write_text(edits["rewards.py"])
    assert runpy.run_path(str(repo.path / "rewards.py"))["COMPONENTS"]["match"]({"completion": "9.", "task": {
        "answer": "9"}}) == 0.0


def _strict(constant: bool) -> list[dict]:
    """60 groups where the reward misses right answers: "09" (verified, as the number 9) earns nothing; with
    ``constant`` the reward credits no completion at all (a bare-integer parser facing worked answers)."""
    rows = rollouts([[("9", True), ("09", True), ("1", False), ("2", False)] * 2 for _ in range(60)])
    for r in rows:
        r["reward"] = 0.0 if constant else float(r["completion"] == "9")
        r["reward_components"] = {"correct": r["reward"], "style": 0.5}
    return rows


@pytest.mark.parametrize("constant", [False, True])
def test_a_strict_component_that_misses_right_answers_is_named_and_rewritten(tmp_path, constant):
    d, repo, edits = _repair(tmp_path, _strict(constant), faults.materialize("math", "reward_hacking", tmp_path / "f"))
    seen = {e.name: e.value for e in d.evidence}
    assert seen["misses_right:correct"] == 1.0 and seen["misses_right:style"] == 0.0, d.statement
    assert "correct but unrewarded" in d.statement and "component correct gives 0 to 100% of them" in d.statement
    if constant:  # a reward that credits nothing while the verifier accepts half: the most blatant disagreement
        assert seen["correct_but_unrewarded"] == 0.5
    repo.path.joinpath("rewards.py").write_text(edits["rewards.py"])
    reward = runpy.run_path(str(repo.path / "rewards.py"))["COMPONENTS"]["correct"]
    domain, task = get_domain("math"), {"answer": "9", "expression": "4 + 5"}
    for completion in ("09", "4 + 5 = 9", "the answer is 9.", "9.", "19"):
        assert reward({"completion": completion, "task": task}) == float(domain.verify(task, completion)), completion
    assert reward({"completion": "09", "task": task}) == 1.0


@pytest.mark.parametrize("case", ["no_culprit", "not_a_correctness_check"])
def test_no_rewrite_without_a_component_the_evidence_names(tmp_path, case):
    if case == "no_culprit":  # the wrong ones are rewarded, but by no component (the components do not explain it)
        rows = _hacked("correct")
        for r in rows:
            r["reward_components"] = {"correct": float(r["verified"])}
        harness = faults.materialize("math", "reward_hacking", tmp_path / "faulty")
    else:  # right answers missed by a component that never reads the task's answer (a format check, say)
        rows = _strict(constant=False)
        harness = faults.materialize("math", "reward_hacking", tmp_path / "faulty")
        rewards = harness / "rewards.py"
        rewards.write_text(rewards.read_text() + '\n\ndef style(sample: dict) -> float:\n'
                           '    return 1.0 if sample["completion"].isdigit() else 0.0\n\n\n'
                           'COMPONENTS["style"] = style\n')
        for r in rows:
            r["reward_components"] = {"correct": 1.0 if r["verified"] else 0.0, "style": r["reward"]}
    d, _, edits = _repair(tmp_path, rows, harness)
    assert edits is None, d.statement


@pytest.mark.parametrize("case", ["blind", "agrees", "too_few"])
def test_a_blind_reward_is_seen_when_the_policy_is_rarely_right(tmp_path, case):
    """1% of 3,840 rollouts right (the GPU fault run's SmolLM2 at temperature 1): a reward missing all but 2 of them
    disagrees on 1% of rollouts, under the overall rate's 3%, but on 95% of the right answers."""
    right = 40 if case != "too_few" else 12
    groups = [[("5", False)] * 8 for _ in range(480)]
    for i in range(right):
        groups[i][0] = ("9", True)
    rows = rollouts(groups)
    for r in rows:
        credited = r["verified"] and (case == "agrees" or r["group_id"] in {rows[0]["group_id"], rows[8]["group_id"]})
        r["reward"] = float(credited)
        r["reward_components"] = {"correct": r["reward"]}
    repo = HarnessRepo.create(tmp_path / "harness", "math", str(faults.materialize("math", "reward_hacking",
                                                                                       tmp_path / "f")))
    found = {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(_evidence(rows, repo))}
    if case != "blind":
        assert "reward_disagreement" not in found
        return
    d = found["reward_disagreement"]
    seen = {e.name: e for e in d.evidence}
    assert d.evidence[0].name == "unrewarded_share_of_correct" and d.evidence[0].value == 38 / 40
    assert d.evidence[0].low > 0.5 and seen["misses_right:correct"].value == 1.0, d.statement
    assert "38 of 40 verified-correct ones unrewarded" in d.statement
    # and the Critic confirms it (the 2 rewarded rollouts are too few to be evidence of their own)
    from agents.critic import HeuristicCritic

    critique = HeuristicCritic().critique([d], _evidence(rows, repo), rounds_left=0)
    assert [x.status for x in critique.diagnoses] == ["confirmed"], critique.diagnoses[0].critique


def test_a_reward_that_disagrees_with_the_verifier_is_repaired_before_the_signals_it_distorts(tmp_path):
    """Format failures and a lenient reward, equally severe: the Engineer's first candidate (the one the trials, which
    stop at the first to pass, judge first) rewrites the lenient component, not a format reward on top of it; the
    Critic's cap keeps the disagreement, and it outranks an accuracy regression (a symptom of whatever cause)."""
    from agents.critic import HeuristicCritic
    from agents.engineer import HeuristicEngineer
    from agents.roles import EngineerContext, urgency
    from evotrainer.rollouts import level_history

    rows = rollouts([[("9", True), ("9.", False), ("9.", False), ("5.", False)] * 2 for _ in range(60)])
    for r in rows:
        r["reward"] = float(r["completion"].startswith("9"))  # "9." credited: the substring reward of the fault
        r["reward_components"] = {"correct": r["reward"]}
    repo = HarnessRepo.create(tmp_path / "harness", "math", str(faults.materialize("math", "reward_hacking",
                                                                                 tmp_path / "faulty")))
    ev = _evidence(rows, repo)
    found = HeuristicDiagnostician().diagnose(ev)
    by_mode = {d.failure_mode: d for d in found}
    assert {"format_failures", "reward_disagreement"} <= set(by_mode)
    assert by_mode["format_failures"].severity >= by_mode["reward_disagreement"].severity  # not won on severity
    capped = HeuristicCritic(max_confirmed=1).critique(found, ev, 0).diagnoses
    assert [d.failure_mode for d in capped if d.status == "confirmed"] == ["reward_disagreement"]
    ctx = EngineerContext(phase=1, round=1, repo=repo, base_sha=repo.sha("main"), knobs=ev.knobs, domain="math",
                          level_stats=level_history(rows))
    cands = HeuristicEngineer().propose(HeuristicCritic().critique(found, ev, 0).diagnoses, ctx, {})
    assert [c.intervention for c in cands][:2] == ["verifier_aligned_reward", "format_reward"]
    regression = by_mode["format_failures"].model_copy(update={"layer": "score", "failure_mode": "accuracy_regression"})
    assert sorted([regression, by_mode["reward_disagreement"]], key=urgency)[0] is by_mode["reward_disagreement"]


@pytest.mark.parametrize("seed", ["math", "math_chat"])
def test_the_reward_repairs_score_a_completion_with_no_answer_as_zero_on_every_seed(tmp_path, seed):
    """A rewritten reward must not crash where the harness's own parser finds no answer: the chat seed's ``_answer``
    returns None for "I think so", and ``numeric_answer_match`` once turned that None into a TypeError on the H200
    (its candidate was rejected at replay, and the repair of that run was lost)."""
    from evotrainer.harness.repo import seed_dir

    src = seed_dir("math", seed)
    files = {name: (src / name).read_text() for name in HARNESS_FILES}
    edited = find("math", "numeric_answer_match").edit(files, read_knobs(src), {})
    dest = tmp_path / "edited"
    dest.mkdir()
    (dest / "rewards.py").write_text(edited["rewards.py"])
    correct = runpy.run_path(str(dest / "rewards.py"))["correct"]
    task = {"answer": "40", "difficulty": "1"}
    assert correct({"completion": "I think so", "task": task}) == 0.0
    assert correct({"completion": "", "task": task}) == 0.0
    assert correct({"completion": "40", "task": task}) == 1.0 and correct({"completion": "+40", "task": task}) == 1.0


@pytest.mark.parametrize("partial", [0.5, 0.3, 0.0])
def test_a_wrong_answer_paid_part_of_a_right_one_is_rewarded_where_it_trains(tmp_path, partial):
    """Partial credit sits at or below the middle of the reward range, so "above the middle" never called it
    rewarded, yet GRPO trains it wherever it beats its group's mean (a positive advantage): here every half-right
    rollout (220 of 480), in the 40 groups without a right answer and beside the one right answer of the other 20.
    Those count as credited: a disagreement naming the component; with no partial credit (0.0) nothing wrong trains
    and nothing is diagnosed."""
    groups = [[("9", True)] * (i < 20) + [("8", False)] * (4 - (i < 20)) + [("5", False)] * 4 for i in range(60)]
    rows = rollouts(groups)
    for r in rows:
        r["reward"] = 1.0 if r["verified"] else partial if r["completion"] == "8" else 0.0
        r["reward_components"] = {"share_passed": r["reward"]}
    for g in {r["group_id"] for r in rows}:
        group = [r for r in rows if r["group_id"] == g]
        mean = sum(r["reward"] for r in group) / len(group)
        for r in group:
            r["advantage"] = r["reward"] - mean
    repo = HarnessRepo.create(tmp_path / "harness", "math")
    found = {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(_evidence(rows, repo))}
    if not partial:
        assert "reward_disagreement" not in found
        return
    d = found["reward_disagreement"]
    seen = {e.name: e.value for e in d.evidence}
    assert seen["rewarded_but_wrong"] == pytest.approx(220 / 480) and seen["correct_but_unrewarded"] == 0.0
    assert seen["credits_wrong:share_passed"] == 1.0 and "rewarded but wrong" in d.statement, d.statement
