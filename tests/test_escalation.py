"""Escalation after phases with nothing promoted: the Engineer is told to change layer or subtract, and main rolls
back to the last known-good harness by a new commit (history kept), once, only when accuracy fell beyond noise."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from evotrainer import config as C
from evotrainer.contracts import Candidate, EvalResult, PhaseResult, Promotion
from evotrainer.harness.repo import HarnessRepo
from evotrainer.loop import escalation
from evotrainer.loop.state import RunState


def result(phase: int, sha: str, accuracy: float) -> PhaseResult:
    return PhaseResult(phase=phase, harness_sha=sha, steps=1, eval=EvalResult(accuracy=0.0, n=300), dev=EvalResult(accuracy=accuracy, n=300),
                       rollout_path="", checkpoint_path="", wall_time_s=1.0, tokens=1)


def test_a_stall_instructs_the_engineer_and_rolls_main_back_once(tmp_path: Path):
    repo = HarnessRepo.create(tmp_path / "harness", "math")
    seed = repo.sha("main")
    cand = Candidate(branch="candidates/phase-1-1", base_sha=seed, diagnosis_id="d1-1", intervention="x",
                     hypothesis="h", variable="filters.keep_group", target_metric="kept_dead_ratio", direction="down",
                     expected="e", rollback="r", files=["filters.py"])
    cand.sha = repo.commit_candidate(cand.branch, seed, {"filters.py": "def keep_group(g):\n    return False\n"},
                                     "s", "b", {"Variable": cand.variable})
    merged = repo.promote(cand.branch, "Promote", "h", {})
    events: list[tuple] = []
    rt = SimpleNamespace(repo=repo, cfg=C.parse({}), emit=lambda kind, **f: events.append((kind, f)))
    promo = Promotion(phase=1, branch=cand.branch, sha=cand.sha, main_sha=merged, candidate=cand)
    accuracies = [0.5, 0.3, 0.28, 0.27]
    state = RunState(phase=4, promotions=[promo], results=[result(p, seed if p == 1 else merged, a)
                                                           for p, a in enumerate(accuracies, 1)])
    assert escalation.stalled(state, 3) == 2 and escalation.instruct(rt, state.model_copy(update={"phase": 3})) == \
        ("", [])
    text, layers = escalation.instruct(rt, state.model_copy(update={"phase": 5}))
    assert "stalled" in text and "change layer" in text and layers == []  # nothing tried in phases 2-4
    sha = escalation.rollback(rt, state)
    assert sha == repo.sha("main") and repo.repo.commit(sha).parents[0].hexsha == merged  # a new commit on top
    assert repo.repo.commit(sha).tree == repo.repo.commit(seed).tree  # the harness of phase 1
    assert "last known-good" in repo.message(sha) and events[0][0] == "rollback"
    assert escalation.rollback(rt, state) is None  # safe to re-run: main already holds that harness
    level = state.model_copy(update={"results": [result(p, merged, 0.3) for p in range(1, 5)]})
    assert escalation.rollback(rt, level) is None  # no loss beyond noise: nothing to roll back


def test_a_run_at_a_standstill_is_rolled_back_at_most_at_the_nominal_rate():
    """The known-good phase is the best of the earlier ones: against the largest of k noisy figures an unwidened
    95% interval says "fell" far more often than 2.5% of the time when nothing changed (a winner's curse)."""
    import random

    rng = random.Random(0)
    n, p, phases, runs = 1000, 0.3, 6, 400

    def phase(i: int) -> PhaseResult:
        hits = sum(rng.random() < p for _ in range(n))
        return PhaseResult(phase=i, harness_sha="a", steps=1, eval=EvalResult(accuracy=0.0, n=n), dev=EvalResult(accuracy=hits / n, n=n),
                           rollout_path="", checkpoint_path="", wall_time_s=1.0, tokens=1)

    fell = sum(escalation.fell_below_known_good([phase(i) for i in range(1, phases + 1)]) is not None
               for _ in range(runs))
    assert fell / runs <= 0.05, f"{fell} of {runs} runs at a standstill would be rolled back"
