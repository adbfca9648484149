"""The loop's backtest step (``evotrainer/loop/backtest.py``) over a round of candidates: one that cannot be judged,
or whose A/B trial fails in the trainer, is rejected with its reason; the others are still judged; the run goes on.

The run directory is made without training (``tests/backtest_world.py``); the step runs with the run's own
Runtime: its harness repo, evidence cache, built-in agents and events log. With trials off nothing reaches a
trainer. The trial test starts the real trainer service on the run (the tiny policy, the phase's checkpoint) and
asks it for a knob the config parse accepts but the trainer refuses: a completion budget beyond the tiny policy's
context window (``evotrainer.trainer.grpo.check_budget``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from agents import build_agents
from evotrainer.console import Reporter
from evotrainer.contracts import BacktestReport, Candidate, Promotion
from evotrainer.harness.repo import HarnessRepo
from evotrainer.loop import backtest
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState
from evotrainer.pause import RunPaused
from evotrainer.rollouts import spread_batches
from evotrainer.rundir import RunDir
from evotrainer.trainer.client import TrainerClient
from tests.backtest_world import HACK_REWARDS, NUMERIC_REWARDS, make_run
from tests.conftest import free_port


def runtime(rd: RunDir, trainer: TrainerClient) -> Runtime:
    cfg = rd.load_config()
    return Runtime(rd=rd, cfg=cfg, trainer=trainer, agents=build_agents(cfg, str(rd.skills_path(cfg)), rd.root),
                   reporter=Reporter(quiet=True), base_policy=str(rd.policy_base))


def _declared(repo: HarnessRepo, name: str, variable: str, files: list[str]) -> Candidate:
    return Candidate(branch=f"candidates/phase-1-{name}", base_sha=repo.sha("main"), diagnosis_id="d1-1",
                     intervention=name, hypothesis="if X then Y because Z", variable=variable,
                     target_metric="reward_verified_auc", direction="up", expected="reward_verified_auc up",
                     rollback="revert", files=sorted(files))


def candidate(repo: HarnessRepo, name: str, edits: dict[str, str], variable: str) -> Candidate:
    cand = _declared(repo, name, variable, list(edits))
    cand.sha = repo.commit_candidate(cand.branch, cand.base_sha, edits, f"{variable}: {name}", "test", {})
    return cand


def promoted(repo: HarnessRepo, name: str, temperature: float) -> Promotion:
    """A temperature edit committed as a candidate and merged into main: the promotion made after phase 1."""
    knobs = repo.show_file("main", "harness.yaml").replace("temperature: 1.0 ", f"temperature: {temperature} ")
    cand = candidate(repo, name, {"harness.yaml": knobs}, "harness.yaml:temperature")
    main = repo.promote(cand.branch, f"Promote {cand.branch}", "test", {})
    return Promotion(phase=1, branch=cand.branch, sha=cand.sha, main_sha=main, candidate=cand)


def knobs_folder(repo: HarnessRepo) -> Candidate:
    """A candidate whose harness.yaml is a folder (git plumbing, as an agent with a shell could commit it): reading
    its knobs raises IsADirectoryError, which no check catches. Should a check learn to refuse it, this test needs
    another candidate whose judging raises."""
    cand = _declared(repo, "knobs-folder", "harness.yaml", ["harness.yaml", "harness.yaml/knobs.yaml"])
    g = repo.repo.git
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        g.read_tree(cand.base_sha, env=env)
        g.update_index("--force-remove", "harness.yaml", env=env)
        blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo.path, input=repo.show_file(
            "main", "harness.yaml"), capture_output=True, text=True, check=True).stdout.strip()
        g.update_index("--add", "--cacheinfo", f"100644,{blob},harness.yaml/knobs.yaml", env=env)
        cand.sha = g.commit_tree(g.write_tree(env=env), "-p", cand.base_sha, "-m", "harness.yaml: as a folder")
    g.update_ref(f"refs/heads/{cand.branch}", cand.sha)
    return cand


def run_step(rt: Runtime, cands: list[Candidate]) -> tuple[RunState, dict[str, BacktestReport]]:
    """The backtest step on a round of ``cands``, its update merged into the state as LangGraph would."""
    state = RunState(phase=1, engineer_round=1, candidates=cands, round_branches=[c.branch for c in cands])
    state = state.model_copy(update=backtest.step(rt, state))
    return state, {r.branch: r for r in state.reports}


def verdicts(rd: RunDir) -> dict[str, dict]:
    events = [json.loads(line) for line in rd.events_path.read_text().splitlines()]
    return {e["branch"]: e for e in events if e["kind"] == "verdict"}


@pytest.fixture(scope="module")
def replay_only(tmp_path_factory) -> RunDir:
    return make_run(tmp_path_factory.mktemp("step") / "run", ["backtest.trial_steps=0"])


def test_a_candidate_that_cannot_be_judged_is_rejected_and_the_round_goes_on(replay_only: RunDir) -> None:
    rd = replay_only
    rt = runtime(rd, TrainerClient(f"http://127.0.0.1:{free_port()}"))  # trials off: no trainer is asked
    try:
        repo = rt.repo
        broken = knobs_folder(repo)
        fine = candidate(repo, "numeric", {"rewards.py": NUMERIC_REWARDS}, "rewards.correct")
        state, reports = run_step(rt, [broken, fine])
    finally:
        rt.close()
    bad = reports[broken.branch]
    assert bad.verdict == "reject" and len(bad.reasons) == 1, bad.reasons
    assert bad.reasons[0].startswith("could not judge: IsADirectoryError") and "harness.yaml" in bad.reasons[0]
    assert [(c.name, c.passed) for c in bad.checks] == [("judge", False)]
    # the candidate after it was judged in full, and the round routes on as any other round
    good = reports[fine.branch]
    assert good.verdict == "promote" and any(c.name == "effect" and c.passed for c in good.checks), good.reasons
    assert backtest.route(rd.load_config().evolution.max_engineer_rounds, state) == "promote"
    # stored like any other verdict: the candidate's backtest note and the run's events
    assert repo.note(broken.sha)["reasons"] == bad.reasons and repo.note(fine.sha)["verdict"] == "promote"
    assert verdicts(rd)[broken.branch]["reasons"] == bad.reasons


def test_the_first_candidate_to_pass_ends_the_round(replay_only: RunDir) -> None:
    """A phase promotes at most one candidate: one after the first to pass is not judged (no trial is spent on it,
    and the promotion follows the Engineer's order, not the largest of several noisy margins); one before it that
    failed keeps its verdict."""
    rd = replay_only
    rt = runtime(rd, TrainerClient(f"http://127.0.0.1:{free_port()}"))
    try:
        broken = knobs_folder(rt.repo)
        first = candidate(rt.repo, "numeric-first", {"rewards.py": NUMERIC_REWARDS}, "rewards.correct")
        second = candidate(rt.repo, "numeric-again", {"rewards.py": NUMERIC_REWARDS}, "rewards.correct")
        state, reports = run_step(rt, [broken, first, second])
    finally:
        rt.close()
    assert reports[broken.branch].verdict == "reject" and reports[first.branch].verdict == "promote"
    events = [json.loads(line) for line in rd.events_path.read_text().splitlines()]
    skipped = [e for e in events if e["kind"] == "not_judged"]
    assert second.branch not in reports and [e["branch"] for e in skipped] == [second.branch], reports
    assert first.branch in skipped[0]["reason"] and rt.repo.note(second.sha) is None
    assert backtest.route(rd.load_config().evolution.max_engineer_rounds, state) == "promote"
    # the harness log says why it has no verdict (not "pending", as if the run had stopped before judging it)
    from evotrainer.report.history import harness_log, log_rows

    entry = next(e for e in harness_log(rd) if e["branch"] == second.branch)
    assert entry["state"] == entry["verdict"] == "not judged" and first.branch in entry["reasons"][0]
    row = next(r for r in log_rows(rd) if r["branch"] == second.branch)
    assert row["decided"] == f"not judged: {entry['reasons'][0]}" and "passed first" in row["decided"]


class _Pausing:
    """A Backtester agent whose judging raises ``exc``, as the LLM one does when its budget is spent (RunPaused)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def judge(self, candidate, bench):
        raise self.exc


@pytest.mark.parametrize("exc", [RunPaused("budget", "LLM budget spent"), KeyboardInterrupt()],
                         ids=["paused", "interrupted"])
def test_a_pause_or_an_interrupt_is_not_a_verdict(replay_only: RunDir, exc: BaseException) -> None:
    rt = runtime(replay_only, TrainerClient(f"http://127.0.0.1:{free_port()}"))
    rt.agents.backtester = _Pausing(exc)
    try:
        cand = candidate(rt.repo, f"paused-{type(exc).__name__}", {"rewards.py": HACK_REWARDS}, "rewards.correct")
        with pytest.raises(type(exc)):
            run_step(rt, [cand])
        assert rt.repo.note(cand.sha) is None  # nothing recorded: the run resumes and judges it then
    finally:
        rt.close()


class _Scripted:
    """A Backtester agent with scripted verdicts (branch -> report), recording which candidates it judged."""

    def __init__(self, reports: dict[str, BacktestReport]) -> None:
        self.reports, self.judged = reports, []

    def judge(self, candidate, bench):
        self.judged.append(candidate.branch)
        return self.reports[candidate.branch]


def _report(cand: Candidate, *checks: tuple[str, bool]) -> BacktestReport:
    from evotrainer.contracts import Check

    failed = [name for name, ok in checks if not ok]
    return BacktestReport(branch=cand.branch, candidate_sha=cand.sha, base_sha=cand.base_sha, target_metric="t",
                          checks=[Check(name=n, passed=ok) for n, ok in checks], noise_floor=0.0,
                          verdict="reject" if failed else "promote", reasons=failed, runtime_s=0.0, rollouts=0,
                          sandbox="process")


@pytest.mark.parametrize("max_trials", [1, 2])
def test_a_round_runs_at_most_max_trials_trials(tmp_path: Path, max_trials: int) -> None:
    """``backtest.max_trials`` bounds a round's A/B trials: a candidate the replay checks reject spends none; once
    the trials are spent the rest are not judged (a note and event say why), and each trial's level counts trials,
    not candidates."""
    from evotrainer import config as C
    from evotrainer.judge.checks import phase_level, trials_per_phase

    rd = make_run(tmp_path / "run", [f"backtest.max_trials={max_trials}", "backtest.trial_steps=5"])
    rt = runtime(rd, TrainerClient(f"http://127.0.0.1:{free_port()}"))
    try:
        cfg = rt.cfg
        assert trials_per_phase(cfg.evolution, cfg.backtest) == max_trials * cfg.evolution.max_engineer_rounds
        assert phase_level(cfg.evolution, cfg.backtest) == pytest.approx(1 - 0.05 / (max_trials * 2))
        cands = [candidate(rt.repo, f"edit-{k}", {"rewards.py": NUMERIC_REWARDS + f"# {k}\n"}, "rewards.correct")
                 for k in range(3)]
        no_effect, lost, would_pass = cands
        rt.agents.backtester = _Scripted({
            no_effect.branch: _report(no_effect, ("replay", True), ("effect", False)),  # no trial spent
            lost.branch: _report(lost, ("effect", True), ("trial:probe_accuracy", False)),
            would_pass.branch: _report(would_pass, ("effect", True), ("trial:probe_accuracy", True))})
        state, reports = run_step(rt, cands)
    finally:
        rt.close()
    judged = [no_effect.branch, lost.branch] + ([would_pass.branch] if max_trials > 1 else [])
    assert rt.agents.backtester.judged == judged and sorted(reports) == sorted(judged)
    skipped = [json.loads(line) for line in rd.events_path.read_text().splitlines()]
    skipped = [e for e in skipped if e["kind"] == "not_judged"]
    if max_trials == 1:
        assert [e["branch"] for e in skipped] == [would_pass.branch] and "max_trials" in skipped[0]["reason"]
        assert rt.repo.note(would_pass.sha, "not_judged")["trials_spent"] == 1
        assert backtest.route(2, state) == "engineer"  # nothing passed: the next Engineer round, with its own trials
    else:
        assert skipped == [] and backtest.route(2, state) == "promote"
    # the level the loop and the A/A benchmark use: min(max_trials, max_candidates) x rounds
    cfg = C.apply_overrides(C.parse({}), ["backtest.max_trials=9", "evolution.max_candidates=2"])
    assert trials_per_phase(cfg.evolution, cfg.backtest) == 2 * cfg.evolution.max_engineer_rounds


@pytest.mark.slow  # the trainer service, the tiny policy's warm-up and one trial arm: about a minute
def test_a_knob_the_trainer_rejects_fails_the_trial_with_the_trainers_reason(tmp_path: Path, policy_cache) -> None:
    """``max_completion_length: 100`` passes harness.yaml's parse (1..32768) and every replay check (it changes
    the update), and then the trainer refuses it in the candidate's trial arm: 100 tokens and the prompt do not fit
    the tiny policy's 64-token window. Rejected with the trainer's words; the next candidate is still judged."""
    import os

    from evotrainer.trainer.client import local_service

    os.environ["EVOTRAINER_CACHE"] = str(policy_cache)
    rd = make_run(tmp_path / "run")
    rd.ensure_policy(log=lambda _: None)
    shutil.copytree(rd.policy_base, rd.checkpoint(1))  # phase 1's checkpoint: where the trial arms start
    with local_service(rd.root, env={"EVOTRAINER_CACHE": str(policy_cache)}) as trainer:
        rt = runtime(rd, trainer)
        try:
            repo = rt.repo
            knobs = repo.show_file("main", "harness.yaml").replace("max_completion_length: 8 ",
                                                                   "max_completion_length: 100 ")
            too_long = candidate(repo, "too-long", {"harness.yaml": knobs}, "harness.yaml:max_completion_length")
            after = candidate(repo, "hack", {"rewards.py": HACK_REWARDS}, "rewards.correct")
            state, reports = run_step(rt, [too_long, after])
            assert trainer.health()["pid"]  # the service is still there for the next phase
        finally:
            rt.close()
    report = reports[too_long.branch]
    trial = next(c for c in report.checks if c.name == "trial:probe_accuracy")
    assert report.verdict == "reject" and not trial.passed
    assert all(c.passed for c in report.checks if c is not trial), report.reasons  # only the trial refused it
    assert "the trial failed in the trainer" in trial.detail and "context window of 64 tokens" in trial.detail
    assert "max_completion_length 100" in trial.detail
    assert reports[after.branch].verdict == "reject" and any(r.startswith("main_tests:")
                                                             for r in reports[after.branch].reasons)
    assert backtest.route(1, state) == "promote" and repo.note(too_long.sha)["reasons"] == report.reasons
    # a trial the trainer could not run scored nothing: no loss to remember (nor the hack, which never reached one)
    assert state.trial_lost == {}


def _pilot(correct: list[int], attempts: list[dict] = ()):
    from evotrainer.contracts import EvalResult
    from evotrainer.trainer.wire import PilotResult

    items = {f"probe-{i}": float(ok) for i, ok in enumerate(correct)}
    return PilotResult(harness_sha="0" * 40, steps=2, rollout_path="x", stats={}, wall_time_s=1.0,
                       probe=EvalResult(accuracy=sum(correct) / len(correct), n=len(correct), items=items),
                       sandbox_attempts=list(attempts))


def test_the_trial_holds_only_the_candidates_own_attempts_against_it() -> None:
    from evotrainer.judge.checks import trial_verdict

    inherited = {"kind": "network", "what": "connect 192.0.2.1:80", "where": "rewards.py:9", "op": "score"}
    own = {"kind": "file", "what": "open /etc/passwd", "where": "filters.py:3", "op": "filter"}
    main = [_pilot([1, 0] * 50, [inherited])]
    same = trial_verdict(main, [_pilot([1, 0] * 50, [inherited])])  # main's code did it too: the decision decides
    assert same.name == "trial:probe_accuracy" and not same.passed and same.candidate == 0.5
    worse = trial_verdict(main, [_pilot([1] * 100, [inherited, own])])  # a clear gain does not buy its own attempt
    assert worse.name == "trial:sandbox_attempts" and not worse.passed
    assert "open /etc/passwd" in worse.detail and "192.0.2.1" not in worse.detail
    assert trial_verdict(main, [_pilot([1] * 100, [inherited])]).passed


def test_a_trial_holds_the_false_promotion_rate_per_round_not_per_trial() -> None:
    """With up to 6 trials a phase (3 candidates x 2 Engineer rounds), each must clear zero at 1 - 0.05 / 6: a gain
    that clears 95% but not 99.2% is promoted alone and not in a round of six."""
    from evotrainer import config as C
    from evotrainer.judge.checks import phase_level, trial_verdict, trials_per_phase

    cfg = C.apply_overrides(C.parse({}), ["evolution.max_engineer_rounds=2", "backtest.max_trials=3"])
    trials = trials_per_phase(cfg.evolution, cfg.backtest)
    level = phase_level(cfg.evolution, cfg.backtest)
    assert trials == 6 and level == pytest.approx(1 - 0.05 / 6)
    main = [_pilot([1] * 100 + [0] * 200)]
    for gained, alone, in_round in ((15, True, False), (30, True, True), (10, False, False)):
        cand = [_pilot([1] * 95 + [0] * 5 + [1] * gained + [0] * (200 - gained))]  # 5 of main's tasks lost
        assert trial_verdict(main, cand).passed == alone, gained
        check = trial_verdict(main, cand, level)
        assert check.passed == in_round and "(99.2% CI" in check.detail, (gained, check.detail)


def test_only_an_edit_that_changed_nothing_or_trained_and_lost_is_not_retried() -> None:
    from evotrainer.contracts import Check

    def report(*checks: Check) -> BacktestReport:
        return BacktestReport(branch="b", candidate_sha="c", base_sha="m", target_metric="t", checks=list(checks),
                              noise_floor=0.0, verdict="reject", reasons=["r"], runtime_s=0.0, rollouts=0,
                              sandbox="process")

    lost = Check(name="trial:probe_accuracy", base=0.3, candidate=0.3, passed=False)
    crashed = Check(name="trial:probe_accuracy", passed=False, detail="the trial failed in the trainer: timeout")
    assert backtest.not_worth_retrying(report(Check(name="effect", passed=False))) == "no_effect"
    assert backtest.not_worth_retrying(report(Check(name="effect", passed=True), lost)) == "trial_lost"
    assert backtest.not_worth_retrying(report(Check(name="effect", passed=True), crashed)) is None
    assert backtest.not_worth_retrying(report(Check(name="prompt_leak", passed=False))) is None


def test_the_replay_uses_at_most_replay_batches_whole_batches_spread_over_the_phase(tmp_path: Path) -> None:
    """Long phases would make every replay slower than its time budget (and the replay_time check then rejects every
    candidate): main's replay, which every candidate is replayed beside, takes whole generated batches, evenly
    spread, first and last included."""
    rd = make_run(tmp_path / "run", ["backtest.trial_steps=0", "backtest.replay_batches=4"])
    rt = runtime(rd, TrainerClient("http://127.0.0.1:9"))  # nothing here reaches a trainer
    try:
        main = rt.evidence.main(rt.repo.sha("main"), [1])
        all_rows = rt.evidence.rows([1])
        assert sorted({r["step"] for r in all_rows}) == list(range(1, 11))  # the world's 10 batches of 4 groups
        assert sorted({r["step"] for r in main.rollouts}) == [1, 4, 7, 10]
        assert len(main.rollouts) == 4 * 4 * 4  # whole batches: 4 groups of 4 each
        assert spread_batches(all_rows, 10) is all_rows and spread_batches(all_rows, 99) is all_rows
        assert {r["step"] for r in spread_batches(all_rows, 1)} == {10}
    finally:
        rt.evidence.close()


class _ScriptedTrials(backtest.Testbed):
    """The loop's Testbed with each trial arm's probe scripted (``_pilot``): the replay checks and the decision are
    the real ones; main's arm answers 1,000 of 2,000 probe tasks, the candidate's loses 16 of them and gains 10."""

    def _pilot(self, sha: str, replicate: int):
        if sha == self.main_sha:
            return _pilot([1] * 1000 + [0] * 1000)
        return _pilot([1] * 984 + [0] * 16 + [1] * 10 + [0] * 990)


def test_a_repair_that_moved_its_target_on_replay_must_still_gain(tmp_path: Path) -> None:
    """No lenient path: the numeric match moves its target on replay (it scores "+12" and "012", which the verifier
    accepts, so the reward agrees with it more), and a trial 0.3 points down is still a rejection, stopped after its
    first seed (no gain on main: the futility stop)."""
    rd = make_run(tmp_path / "run", ["backtest.trial_steps=5", "backtest.trial_seeds=2"])
    rt = runtime(rd, TrainerClient(f"http://127.0.0.1:{free_port()}"))
    try:
        cand = candidate(rt.repo, "numeric", {"rewards.py": NUMERIC_REWARDS}, "rewards.correct")
        report = _ScriptedTrials(rt, 1, rt.repo.sha("main")).judge(cand)
    finally:
        rt.close()
    target = next(c for c in report.checks if c.name == "target:reward_verified_auc")
    assert target.candidate > target.threshold and target.detail.startswith("moved as promised"), target
    trial = next(c for c in report.checks if c.name == "trial:probe_accuracy")
    assert trial.candidate == pytest.approx(0.497) and trial.base == 0.5
    assert report.verdict == "reject" and not trial.passed, report.reasons
    assert ": does not clear zero" in trial.detail and "futility stop" in trial.detail, trial.detail


def test_an_edit_that_moves_nothing_on_replay_never_reaches_a_trial(tmp_path: Path) -> None:
    """An edit that changes no decision on the replay (a comment) moves no metric; the effect check rejects it."""
    rd = make_run(tmp_path / "run", ["backtest.trial_steps=5", "backtest.trial_seeds=1"])
    rt = runtime(rd, TrainerClient(f"http://127.0.0.1:{free_port()}"))
    try:
        main = rt.repo.show_file("main", "rewards.py")
        same = main.replace('"""1 when', '"""(Reviewed.) 1 when')
        assert same != main
        cand = candidate(rt.repo, "reviewed", {"rewards.py": same}, "rewards.correct")
        report = _ScriptedTrials(rt, 1, rt.repo.sha("main")).judge(cand)
    finally:
        rt.close()
    assert report.verdict == "reject" and not any(c.name.startswith("trial:") for c in report.checks)
    assert any(r.startswith("effect: no effect") for r in report.reasons), report.reasons


@pytest.mark.parametrize("tasks", [40, 2000])
def test_two_arms_that_answer_alike_promote_nothing(tasks: int) -> None:
    """Where neither arm's answers differ, every paired difference is 0 and the interval is 0 to 0: that is no gain,
    at any probe size (the lenient path passed it with certainty)."""
    from evotrainer.judge.checks import trial_check

    alike = [_pilot([1, 0] * (tasks // 2)).probe] * 2
    check = trial_check(alike, alike)
    assert not check.passed and "CI +0.0000 to +0.0000" in check.detail and "does not clear zero" in check.detail
