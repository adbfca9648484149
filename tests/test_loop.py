"""The loop's decisions without a trainer: routers, the promotion policy, the state's checkpoint round trip.

Each router and the promotion policy is a pure function of the typed state, so every branch of the graph is
checked here by hand, in milliseconds.
"""

from __future__ import annotations

import sqlite3

import pytest
from langgraph.graph import END

from evotrainer.contracts import BacktestReport, Candidate, Check, Diagnosis, EvalResult, PhaseResult, Promotion
from evotrainer.loop import backtest, critique, engineer, librarian
from evotrainer.loop.promote import choose, margin
from evotrainer.loop.state import RunState


def _diag(status: str, i: int = 1) -> Diagnosis:
    return Diagnosis(id=f"d1-{i}", layer="signal", failure_mode="dead_groups", statement="s", severity=0.5,
                     confidence=0.9, status=status)


def _cand(branch: str, files: list[str]) -> Candidate:
    return Candidate(branch=branch, base_sha="a" * 40, sha="b" * 40, diagnosis_id="d1-1", intervention="x",
                     hypothesis="If X, Y, because Z", variable="v", target_metric="kept_dead_ratio", direction="down",
                     expected="down", rollback="revert", files=files)


def _report(branch: str, verdict: str, base: float = 0.3, cand: float = 0.0, noise: float = 0.05) -> BacktestReport:
    target = Check(name="target:kept_dead_ratio", base=base, candidate=cand, passed=verdict == "promote")
    return BacktestReport(branch=branch, candidate_sha="b" * 40, base_sha="a" * 40, target_metric="kept_dead_ratio",
                          checks=[target], noise_floor=noise, verdict=verdict, reasons=["r"], runtime_s=1.0,
                          rollouts=10, sandbox="process")


def test_critique_routes_back_for_evidence_then_to_engineer_or_the_phase_end():
    assert critique.route(RunState(diagnoses=[_diag("proposed"), _diag("confirmed", 2)])) == "diagnose"
    assert critique.route(RunState(diagnoses=[_diag("confirmed"), _diag("rejected", 2)])) == "engineer"
    assert critique.route(RunState(diagnoses=[_diag("rejected")])) == "effect"
    assert critique.route(RunState()) == "effect"


def test_engineer_routes_to_backtest_only_with_new_candidates():
    assert engineer.route(RunState(round_branches=["candidates/phase-1-1"])) == "backtest"
    # earlier rounds' candidates do not count: this round made none
    assert engineer.route(RunState(candidates=[_cand("candidates/phase-1-1", ["a"])])) == "promote"


def test_backtest_routes_back_to_engineer_while_rounds_are_left_and_nothing_of_this_round_passed():
    old_pass = _report("candidates/phase-1-1", "promote")
    this_round = RunState(round_branches=["candidates/phase-1-2"], reports=[old_pass, _report(
        "candidates/phase-1-2", "reject")], engineer_round=1)
    assert backtest.route(2, this_round) == "engineer"  # an earlier round's pass does not end this round
    assert backtest.route(1, this_round) == "promote"  # no rounds left
    passed = this_round.model_copy(update={"reports": [_report("candidates/phase-1-2", "promote")]})
    assert backtest.route(2, passed) == "promote"


def test_librarian_routes_on_the_budget_and_a_waiting_round_goes_first():
    from types import SimpleNamespace

    from evotrainer import config as C

    def rt(phases: int, mode: str = "evolve"):
        return SimpleNamespace(cfg=C.apply_overrides(C.parse({}), [f"phases={phases}", f"evolution.mode={mode}"]))

    assert librarian.route(rt(3), RunState(phase=2)) == "train"
    assert librarian.route(rt(3), RunState(phase=3)) == END
    assert librarian.route(rt(3), RunState(phase=4)) == END  # a budget lowered below the phase reached stops
    assert librarian.route(rt(3), RunState(phase=3, round_due=True)) == END  # the last phase's round waits
    # stopped in the last phase's Librarian, resumed with `run --phases 4`: its waiting round first, not phase 4
    assert librarian.route(rt(4), RunState(phase=3, round_due=True)) == "diagnose"
    assert librarian.route(rt(4, "keep_discard"), RunState(phase=3, round_due=True)) == "keep_discard"


def test_the_last_phase_goes_straight_to_the_phase_end_and_a_raised_budget_runs_its_round_first():
    from types import SimpleNamespace

    from evotrainer import config as C
    from evotrainer.loop import train

    def rt(phases: int, mode: str = "evolve", final_round: bool = False):
        return SimpleNamespace(cfg=C.apply_overrides(C.parse({}), [f"phases={phases}", f"evolution.mode={mode}",
                                                                   f"evolution.final_round={final_round}"]))

    assert train.after(rt(3), RunState(phase=2, round_due=True)) == "diagnose"
    assert train.after(rt(3), RunState(phase=3, round_due=True)) == "effect"  # nothing would train on it
    assert train.after(rt(3, final_round=True), RunState(phase=3)) == "diagnose"
    assert train.after(rt(3, "static"), RunState(phase=2)) == "effect"
    assert train.after(rt(3, "keep_discard"), RunState(phase=3)) == "keep_discard"
    assert train.start(rt(3), RunState(phase=3, round_due=True)) == "diagnose"  # `evotrainer run --phases 4`
    assert train.start(rt(3, "keep_discard"), RunState(phase=3, round_due=True)) == "keep_discard"  # its next edit
    assert train.start(rt(3), RunState(phase=3)) == "train"
    assert train.start(rt(3), RunState()) == "train"


def test_promotion_policy_takes_the_largest_margin_and_never_two_edits_to_one_file():
    cands = {"c1": _cand("c1", ["filters.py"]), "c2": _cand("c2", ["rewards.py", "harness.yaml"]),
             "c3": _cand("c3", ["harness.yaml"]), "c4": _cand("c4", ["prompt.py"])}
    reports = [_report("c1", "promote", cand=0.2), _report("c2", "promote", cand=0.0),
               _report("c3", "promote", cand=0.1), _report("c4", "reject")]
    assert margin(reports[1]) == pytest.approx(6.0) and margin(reports[0]) == pytest.approx(2.0)
    chosen, held = choose(reports, cands, max_promotions=1)
    assert [r.branch for r in chosen] == ["c2"]
    assert held == {"c3": "max_promotions_per_phase=1 reached", "c1": "max_promotions_per_phase=1 reached"}
    chosen, held = choose(reports, cands, max_promotions=3)
    assert [r.branch for r in chosen] == ["c2", "c1"] and held == {"c3": "touches a file already changed"}
    chosen, held = choose(reports, cands, max_promotions=0)  # a fixed harness: nothing reaches main
    assert chosen == [] and set(held) == {"c1", "c2", "c3"}


def test_run_state_round_trips_through_the_sqlite_checkpoint(tmp_path):
    """The typed state is what LangGraph stores and gives back after a restart, models and all."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, StateGraph

    from evotrainer.loop.state import serializer

    result = PhaseResult(phase=1, harness_sha="a" * 40, steps=3, eval=EvalResult(accuracy=0.5, n=10), dev=EvalResult(accuracy=0.5, n=10),
                         rollout_path="r", checkpoint_path="c", wall_time_s=1.0, tokens=5)
    promo = Promotion(phase=1, branch="c1", sha="b" * 40, main_sha="c" * 40, candidate=_cand("c1", ["f"]))

    def step(state: RunState) -> dict:
        return {"phase": 1, "results": [result], "promotions": [promo], "reports": [_report("c1", "promote")],
                "diagnoses": [_diag("confirmed")], "held": {"c2": "why"}}

    g = StateGraph(RunState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    db = tmp_path / "state.sqlite"
    with sqlite3.connect(db, check_same_thread=False) as conn:
        g.compile(checkpointer=SqliteSaver(conn, serde=serializer())).invoke({"phase": 0}, {"configurable": {
            "thread_id": "t"}}, durability="sync")
    with sqlite3.connect(db, check_same_thread=False) as conn:  # a new process would open it like this
        values = g.compile(checkpointer=SqliteSaver(conn, serde=serializer())).get_state(
            {"configurable": {"thread_id": "t"}}).values
    state = RunState.model_validate(values)
    assert state.results == [result] and state.promotions == [promo] and state.held == {"c2": "why"}
    assert isinstance(state.reports[0], BacktestReport) and state.diagnoses[0].status == "confirmed"


def test_state_derives_what_was_tried_and_the_current_round():
    s = RunState(candidates=[_cand("c1", ["a"]), _cand("c2", ["b"]).model_copy(update={"intervention": "y"})],
                 round_branches=["c2"])
    assert s.tried() == ["x", "y"] and [c.branch for c in s.round_candidates()] == ["c2"]


def _phase_rows(phase: int, kept_dead: bool) -> list[dict]:
    """20 groups: 10 mixed, 10 all-wrong; the all-wrong ones train only when ``kept_dead``."""
    from tests.conftest import rollouts

    rows = rollouts([[("9", True), ("1", False)] * 2 if g % 2 else [("1", False)] * 4 for g in range(20)], phase=phase)
    for r in rows:
        if not kept_dead and r["group_id"].endswith(tuple(f"g{g}" for g in range(0, 20, 2))):
            r["kept"] = False
    return rows


def _eval(correct: set[int], n: int = 300) -> EvalResult:
    items = {f"eval-{i}": float(i in correct) for i in range(n)}
    return EvalResult(accuracy=len(correct) / n, n=n, items=items)


@pytest.mark.parametrize("with_edit, without, won, lost", [
    (set(range(150)), set(range(110)), True, False),   # 40 tasks more right, none lost: a win
    (set(range(110)), set(range(150)), False, True),   # 40 fewer: a loss beyond the margin, rolled back
    (set(range(0, 300, 2)), set(range(1, 300, 2)), False, False),  # as many gained as lost: no measurable effect
])
def test_realized_effect_is_paired_against_the_counterfactual(tmp_path, with_edit, without, won, lost):
    from evotrainer.contracts import Rollout
    from evotrainer.loop.evidence import EvidenceCache
    from evotrainer.loop.effect import realized_effect
    from evotrainer.rollouts import write_rollouts
    from evotrainer.rundir import RunDir

    rd = RunDir(tmp_path)
    write_rollouts([Rollout(**r) for r in _phase_rows(1, kept_dead=True)], rd.rollout_file(1))
    write_rollouts([Rollout(**r) for r in _phase_rows(2, kept_dead=False)], rd.rollout_file(2))
    results = [PhaseResult(phase=p, harness_sha="a" * 40, steps=3, eval=ev, dev=ev, rollout_path="", checkpoint_path="",
                           wall_time_s=1.0, tokens=5) for p, ev in ((1, _eval(set(range(120)))), (2, _eval(with_edit)))]
    promo = Promotion(phase=1, branch="c1", sha="b" * 40, main_sha="c" * 40, candidate=_cand("c1", ["filters.py"]))
    cache = EvidenceCache(rd, repo=None, cfg=None)
    effect = realized_effect(cache, promo, results, pairs=[(_eval(without), _eval(with_edit))])
    assert (effect["before"], effect["after"]) == (pytest.approx(0.5), 0.0)  # kept_dead_ratio, as promised
    assert (effect["won"], effect["lost"], effect["counterfactual"]) == (won, lost, True)
    assert effect["gain"] == pytest.approx((len(with_edit) - len(without)) / 300)
    assert effect["low"] <= effect["gain"] <= effect["high"] and effect["measured_in_phase"] == 2
    # without a counterfactual, two consecutive phases are compared unpaired: never called a loss
    fallback = realized_effect(cache, promo, results)
    assert fallback["counterfactual"] is False and fallback["lost"] is False and "unpaired" in fallback["summary"]


def test_a_realized_effect_at_two_seeds_carries_training_s_run_to_run_noise(tmp_path):
    """One seed: 40 tasks fewer is a loss beyond the margin. A second seed where the edit gains 40 shows that much
    is what another run of training gives: no measurable effect, nothing rolled back."""
    from evotrainer.contracts import Rollout
    from evotrainer.loop.evidence import EvidenceCache
    from evotrainer.loop.effect import realized_effect
    from evotrainer.rollouts import write_rollouts
    from evotrainer.rundir import RunDir

    rd = RunDir(tmp_path)
    for p in (1, 2):
        write_rollouts([Rollout(**r) for r in _phase_rows(p, kept_dead=p == 1)], rd.rollout_file(p))
    fewer, more = _eval(set(range(110))), _eval(set(range(150)))
    results = [PhaseResult(phase=p, harness_sha="a" * 40, steps=3, eval=ev, dev=ev, rollout_path="", checkpoint_path="",
                           wall_time_s=1.0, tokens=5) for p, ev in ((1, _eval(set(range(120)))), (2, fewer))]
    promo = Promotion(phase=1, branch="c1", sha="b" * 40, main_sha="c" * 40, candidate=_cand("c1", ["filters.py"]))
    cache = EvidenceCache(rd, repo=None, cfg=None)
    one = realized_effect(cache, promo, results, pairs=[(more, fewer)])  # (without the edit, with it)
    two = realized_effect(cache, promo, results, pairs=[(more, fewer), (fewer, more)])
    assert one["lost"] and one["seeds"] == 1
    assert not two["lost"] and not two["won"] and two["seeds"] == 2 and two["gain"] == pytest.approx(0)
    assert "2 seeds each" in two["summary"] and "no measurable effect" in two["summary"]


def test_keep_discard_rerun_after_a_kill_past_its_merge_merges_no_second_edit(tmp_path):
    """Killed between merging its edit and saving the step's state, keep/discard re-runs the step: it rebuilds
    that edit's promotion from the merge and the candidate's note instead of committing and merging another."""
    from types import SimpleNamespace

    from evotrainer import config as C
    from evotrainer.harness.repo import HarnessRepo
    from evotrainer.loop import keep_discard

    repo = HarnessRepo.create(tmp_path / "h", "math")
    text = repo.show_file("main", "harness.yaml").replace("temperature: 1.0 ", "temperature: 1.3 ")
    cand = _cand("candidates/phase-1-kd", ["harness.yaml"])
    cand.base_sha = repo.sha("main")
    cand.sha = repo.commit_candidate(cand.branch, cand.base_sha, {"harness.yaml": text}, "t", "b", {})
    repo.add_note(cand.sha, cand.model_dump(mode="json"), ref=keep_discard.NOTES)
    merge = repo.promote(cand.branch, "Try", "h", {"Variable": "v", "Mode": "keep/discard", "Phase": "1"})
    events = []
    rt = SimpleNamespace(repo=repo, cfg=C.apply_overrides(C.parse({}), ["phases=3", "evolution.mode=keep_discard"]),
                         emit=lambda kind, **f: events.append(kind))
    out = keep_discard.step(rt, RunState(phase=1, round_due=True))  # the re-run: the state never saw the merge
    assert out["round_due"] is False and repo.sha("main") == merge and events == []
    (promo,) = out["promotions"]
    assert (promo.phase, promo.branch, promo.sha, promo.main_sha) == (1, cand.branch, cand.sha, merge)
    assert promo.candidate == cand
    assert keep_discard._merged_before(rt, 2) is None  # the next phase's edit is its own


def test_undo_reverts_a_promotion_or_says_why_git_cannot_and_keeps_main(tmp_path):
    """The Librarian's rollback and keep/discard's discard both undo through ``promote.undo``: a new commit on main,
    or, when a later promotion changed the same lines, main as it was, the reason in the effect and an event."""
    from types import SimpleNamespace

    from evotrainer.harness.repo import HarnessRepo
    from evotrainer.loop.promote import undo

    repo = HarnessRepo.create(tmp_path / "h", "math")
    events = []
    rt = SimpleNamespace(repo=repo, emit=lambda kind, **f: events.append((kind, f.get("branch"))))

    def promoted(branch: str, old: str, new: str) -> Promotion:
        text = repo.show_file("main", "harness.yaml").replace(old, new)
        sha = repo.commit_candidate(branch, repo.sha("main"), {"harness.yaml": text}, branch, "b", {})
        return Promotion(phase=1, branch=branch, sha=sha, main_sha=repo.promote(branch, "Promote", "b", {}),
                         candidate=_cand(branch, ["harness.yaml"]), effect="lost")

    a = promoted("candidates/phase-1-1", "temperature: 1.0 ", "temperature: 1.3 ")
    b = promoted("candidates/phase-2-1", "temperature: 1.3 ", "temperature: 0.9 ")  # the same line, later
    kept = undo(rt, a, 2, "Roll back", "lost", {})
    assert kept.reverted_sha == "" and kept.effect.startswith("lost; not reverted: git cannot take")
    assert repo.sha("main") == b.main_sha and events == [("rollback_failed", a.branch)]
    undone = undo(rt, b, 3, "Roll back", "lost", {})
    assert undone.reverted_sha == repo.sha("main") != b.main_sha and undone.effect == "lost"
    assert "temperature: 1.3 " in repo.show_file("main", "harness.yaml") and len(events) == 1
