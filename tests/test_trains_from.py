"""Training on from an earlier checkpoint (``evotrainer/loop/resume.py``): when a phase harmed the policy on the dev
split, the round's trials start from the best earlier checkpoint (both arms); when a confirmed diagnosis says the
phase's update overshot, from the checkpoint that phase trained from; and a repair promoted there is what the next
phase trains on from (if its trial there reached the dev accuracy it replaces), recorded in the run state, the merge
commit and the log. Otherwise nothing moves."""

from __future__ import annotations

import random
from pathlib import Path
from types import MethodType, SimpleNamespace

from evotrainer import config as C
from evotrainer.contracts import BacktestReport, Candidate, Check, Diagnosis, EvalResult, PhaseResult
from evotrainer.harness.repo import HarnessRepo, parse_trailers
from evotrainer.judge.checks import TRIAL
from evotrainer.loop import promote, resume
from evotrainer.loop import backtest
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState

N = 1000


def dev(accuracy: float) -> EvalResult:
    """A dev result of N items, each right with probability ``accuracy``, drawn independently of every other
    result (so two results disagree on many items, as two checkpoints do)."""
    rng = random.Random(f"{accuracy}")
    items = {f"dev-{i}": float(rng.random() < accuracy) for i in range(N)}
    answers = {k: f"{accuracy}:{v}" for k, v in items.items()}  # every result answers otherwise than the others
    return EvalResult(accuracy=sum(items.values()) / N, n=N, items=items, answers=answers)


def result(phase: int, accuracy: float) -> PhaseResult:
    return PhaseResult(phase=phase, harness_sha="a" * 40, steps=1, eval=EvalResult(accuracy=0.0, n=N),
                       dev=dev(accuracy), rollout_path="", checkpoint_path="", wall_time_s=1.0, tokens=1)


def test_harmed_names_the_best_earlier_checkpoint_only_beyond_noise():
    start = dev(0.30)
    assert resume.harmed([result(1, 0.08)], start)[0] == 0  # phase 1 collapsed: back to the starting policy
    assert resume.harmed([result(1, 0.45), result(2, 0.30), result(3, 0.12)], start)[0] == 1
    assert resume.harmed([result(1, 0.29)], start) is None  # a point within noise is no harm
    assert resume.harmed([result(1, 0.31), result(2, 0.33)], start) is None  # better than every earlier one
    assert resume.harmed([result(1, 0.08)], None) is None  # nothing earlier to go back to


def _runtime(tmp_path: Path, trial_steps: int = 20):
    events: list[tuple[str, dict]] = []
    said: list[str] = []
    rt = SimpleNamespace(cfg=C.parse({"backtest": {"trial_steps": trial_steps}}), baseline_dev=dev(0.30),
                         emit=lambda kind, **f: events.append((kind, f)), reporter=SimpleNamespace(info=said.append),
                         rd=SimpleNamespace(checkpoint=lambda p: tmp_path / f"checkpoints/phase-{p:04d}",
                                        rollout_file=lambda p: tmp_path / "none"),
                         base_policy=str(tmp_path / "policy/base"))
    rt.checkpoint_of = MethodType(Runtime.checkpoint_of, rt)
    rt.checkpoint_for = MethodType(Runtime.checkpoint_for, rt)
    return rt, events, said


class _Req(SimpleNamespace):
    def model_copy(self, update):
        return _Req(**{**vars(self), **update})


def test_trials_start_from_the_best_earlier_checkpoint_after_harm(tmp_path: Path):
    rt, _, _ = _runtime(tmp_path)
    asked: list[_Req] = []
    rt.request = lambda phase, sha, steps, init=None, pilot=False: _Req(phase=phase, sha=sha, init=init)
    rt.trainer = SimpleNamespace(run_pilot=lambda req, timeout_s: asked.append(req))
    harmed = RunState(phase=2, results=[result(1, 0.40), result(2, 0.10)])
    start, reason = resume.trial_start(rt, harmed)
    assert start == 1 and reason["cause"] == "harmed" and reason["change"]["high"] < 0
    testbed = backtest.Testbed(rt, 2, "m" * 40, start)
    testbed._pilot("m" * 40, 0)
    testbed._pilot("c" * 40, 1)
    assert {r.init for r in asked} == {rt.checkpoint_of(1)} and {r.phase for r in asked} == {3}  # both arms, paired
    healthy = RunState(phase=2, results=[result(1, 0.30), result(2, 0.31)])
    assert resume.trial_start(rt, healthy) == (2, None)
    backtest.Testbed(rt, 2, "m" * 40)._pilot("m" * 40, 0)
    assert asked[-1].init == str(tmp_path / "checkpoints/phase-0002")  # this phase's own checkpoint
    off, _, _ = _runtime(tmp_path, trial_steps=0)
    assert resume.trial_start(off, harmed) == (2, None)  # no trial would judge a repair from there


def test_a_repair_promoted_after_harm_trains_on_from_there_and_says_so(tmp_path: Path):
    rt, events, said = _runtime(tmp_path)
    repo = rt.repo = HarnessRepo.create(tmp_path / "harness", "math")
    seed = repo.sha("main")
    cand = Candidate(branch="candidates/phase-1-1", base_sha=seed, diagnosis_id="d1-1",
                     intervention="lower_learning_rate", hypothesis="h", variable="harness.yaml:learning_rate",
                     target_metric="verified_rate", direction="up", expected="e", rollback="r", files=["harness.yaml"])
    text = repo.show_file(seed, "harness.yaml").replace("learning_rate: 1.0e-4", "learning_rate: 5.0e-5")
    cand.sha = repo.commit_candidate(cand.branch, seed, {"harness.yaml": text}, "s", "b", {"Variable": cand.variable})
    report = BacktestReport(branch=cand.branch, candidate_sha=cand.sha, base_sha=seed, target_metric="x", checks=[],
                            noise_floor=0.0, verdict="promote", reasons=["trial won"], runtime_s=0.0, rollouts=0,
                            sandbox="process")
    state = RunState(phase=1, results=[result(1, 0.05)], candidates=[cand], reports=[report])
    out = promote.step(rt, state)
    assert out["starts"] == {"2": 0} and rt.checkpoint_for(2, out["starts"]) == rt.base_policy
    assert rt.checkpoint_for(3, out["starts"]) == str(tmp_path / "checkpoints/phase-0002")  # only phase 2 moves
    trailer = parse_trailers(repo.message("main"))["Trains-From"]
    assert "phase 2 trains from the starting policy" in trailer
    assert f"dev accuracy at {state.results[0].dev.accuracy:.1%}" in trailer and "points below it" in trailer
    assert [f["start"] for k, f in events if k == "trains_from"] == [0] and any("starting policy" in s for s in said)
    assert [k for k, _ in events if k in ("promoted", "trains_from")] == ["promoted", "trains_from"]  # once merged

    events.clear()
    calm = RunState(phase=1, results=[result(1, 0.30)], candidates=[cand], reports=[report])
    repo2 = rt.repo = HarnessRepo.create(tmp_path / "harness2", "math")
    cand2 = cand.model_copy(update={"base_sha": repo2.sha("main")})
    cand2.sha = repo2.commit_candidate(cand.branch, repo2.sha("main"), {"harness.yaml": text}, "s", "b", {})
    calm = calm.model_copy(update={"candidates": [cand2]})
    out = promote.step(rt, calm)
    assert out["starts"] == {} and "Trains-From" not in parse_trailers(repo2.message("main"))
    assert not [k for k, _ in events if k == "trains_from"]


def _pilots(rt, accuracy: dict[tuple[str, int], float]) -> list[tuple[str, int]]:
    """A trainer whose pilot at (sha, replicate) scores ``accuracy`` on the probe; the pilots asked, in order."""
    from evotrainer.trainer.wire import PilotResult

    asked: list[tuple[str, int]] = []

    def run_pilot(req, timeout_s):
        asked.append((req.sha, req.replicate))
        return PilotResult(harness_sha=req.sha, steps=1, replicate=req.replicate, rollout_path="", completions=10,
                           stats={}, probe=dev(accuracy[req.sha, req.replicate]), wall_time_s=0.0)

    rt.request = lambda phase, sha, steps, init=None, pilot=False: _Req(phase=phase, sha=sha, init=init)
    rt.trainer = SimpleNamespace(run_pilot=run_pilot)
    return asked


def test_a_candidate_without_gain_at_its_first_seed_stops_there_and_main_trains_each_seed_once(tmp_path: Path):
    from evotrainer.judge.checks import TRIAL

    rt, events, _ = _runtime(tmp_path)
    main, lost, won = "m" * 40, "l" * 40, "w" * 40
    asked = _pilots(rt, {(main, 0): 0.30, (main, 1): 0.31, (lost, 0): 0.20, (lost, 1): 0.40,
                         (won, 0): 0.45, (won, 1): 0.46})
    testbed = backtest.Testbed(rt, 1, main, start_dev=dev(0.30))
    cand = SimpleNamespace(sha=lost, branch="candidates/phase-1-1")
    check = testbed.trial(cand)
    assert check.name == TRIAL and not check.passed and "futility stop" in check.detail
    assert asked == [(main, 0), (lost, 0)]  # neither seed 1 was trained
    check = testbed.trial(SimpleNamespace(sha=won, branch="candidates/phase-1-2"))
    assert check.passed and "2 seed(s)" in check.detail
    assert asked[2:] == [(won, 0), (main, 1), (won, 1)]  # main's seed 0 reused, its seed 1 trained when needed
    trials = [f for k, f in events if k == "trial"]
    assert [t["seeds"] for t in trials] == [1, 2] and [t["completions"] for t in trials] == [20, 30]


def diagnosis(mode: str, status: str = "confirmed") -> Diagnosis:
    return Diagnosis(id="d2-1", layer="signal", failure_mode=mode, statement=f"the phase shows {mode}", severity=0.5,
                     confidence=0.9, status=status)


def test_an_overshoot_moves_the_trials_to_the_checkpoint_the_phase_trained_from_though_accuracy_rose(tmp_path: Path):
    rt, _, _ = _runtime(tmp_path)
    rose = [result(1, 0.30), result(2, 0.33)]  # no harm on dev: the starting policy and phase 1 are below it
    assert resume.harmed(rose, rt.baseline_dev) is None
    for mode in ("entropy_collapse", "training_decline"):
        start, reason = resume.trial_start(rt, RunState(phase=2, results=rose, diagnoses=[diagnosis(mode)]))
        assert start == 1 and reason == {"cause": "overshoot", "diagnosis": "d2-1", "failure_mode": mode,
                                         "statement": f"the phase shows {mode}"}
    moved = RunState(phase=2, results=rose, diagnoses=[diagnosis("entropy_collapse")], starts={"2": 0})
    assert resume.trial_start(rt, moved)[0] == 0  # phase 2 itself trained from the starting policy
    for other in (diagnosis("dead_groups"), diagnosis("entropy_collapse", status="rejected")):
        assert resume.trial_start(rt, RunState(phase=2, results=rose, diagnoses=[other])) == (2, None)
    off, _, _ = _runtime(tmp_path, trial_steps=0)
    assert resume.trial_start(off, RunState(phase=2, results=rose, diagnoses=[diagnosis("entropy_collapse")])) \
        == (2, None)


def _trial_report(candidate: float) -> BacktestReport:
    return BacktestReport(branch="candidates/phase-2-1", candidate_sha="c" * 40, base_sha="m" * 40, target_metric="x",
                          checks=[Check(name=TRIAL, base=0.05, candidate=candidate, passed=True, detail="won")],
                          noise_floor=0.0, verdict="promote", reasons=["trial won"], runtime_s=0.0, rollouts=0,
                          sandbox="process")


def test_a_repair_after_an_overshoot_trains_on_from_before_it_only_if_its_trial_got_further(tmp_path: Path):
    rt, events, said = _runtime(tmp_path)
    state = RunState(phase=2, results=[result(1, 0.30), result(2, 0.33)], diagnoses=[diagnosis("entropy_collapse")])
    now = state.results[-1].dev.accuracy
    moved = resume.plan(rt, state, _trial_report(now + 0.05))
    assert moved["start"] == 1 and moved["cause"] == "overshoot"
    assert "phase 3 trains from phase 1's checkpoint" in moved["why"] and "entropy_collapse" in moved["why"]
    assert resume.record(rt, state, {}, moved) == {"3": 1}
    assert [f["cause"] for k, f in events if k == "trains_from"] == ["overshoot"]

    events.clear()
    short = resume.plan(rt, state, _trial_report(now - 0.05))  # the repair from there fell short of phase 2's level
    assert short["start"] is None and "trains on from phase 2's checkpoint" in short["why"]
    assert resume.record(rt, state, {"2": 0}, short) == {"2": 0}
    assert [k for k, _ in events] == ["trains_on"] and "below the" in said[-1]
    assert resume.plan(rt, RunState(phase=2, results=state.results), _trial_report(0.9)) is None  # nothing moved
