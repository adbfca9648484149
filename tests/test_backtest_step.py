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


def answers(correct: list[int]) -> dict[str, str]:
    """A probe's answers as fingerprints: here one right answer and one wrong answer per task, so an answer changed
    exactly where the task's score did."""
    return {f"probe-{i}": "right" if ok else "wrong" for i, ok in enumerate(correct)}


def moved(n: int) -> dict[str, str]:
    """The answers of a start whose every answer the trial's arms changed (an informative trial)."""
    return {f"probe-{i}": "start" for i in range(n)}


def _pilot(correct: list[int], attempts: list[dict] = (), completions: int = 0):
    from evotrainer.contracts import EvalResult
    from evotrainer.trainer.wire import PilotResult

    items = {f"probe-{i}": float(ok) for i, ok in enumerate(correct)}
    return PilotResult(harness_sha="0" * 40, steps=2, rollout_path="x", stats={}, wall_time_s=1.0,
                       probe=EvalResult(accuracy=sum(correct) / len(correct), n=len(correct), items=items,
                                        answers=answers(correct)),
                       sandbox_attempts=list(attempts), completions=completions)


def test_the_trial_holds_only_the_candidates_own_attempts_against_it() -> None:
    from evotrainer.judge.checks import trial_verdict

    inherited = {"kind": "network", "what": "connect 192.0.2.1:80", "where": "rewards.py:9", "op": "score"}
    own = {"kind": "file", "what": "open /etc/passwd", "where": "filters.py:3", "op": "filter"}
    main, start = [_pilot([1, 0] * 50, [inherited])], moved(100)
    same = trial_verdict(main, [_pilot([1, 0] * 50, [inherited])], start=start)  # main's code did it too: decided
    assert same.name == "trial:probe_accuracy" and not same.passed and same.candidate == 0.5
    worse = trial_verdict(main, [_pilot([1] * 100, [inherited, own])], start=start)  # a gain buys no attempt
    assert worse.name == "trial:sandbox_attempts" and not worse.passed
    assert "open /etc/passwd" in worse.detail and "192.0.2.1" not in worse.detail
    assert trial_verdict(main, [_pilot([1] * 100, [inherited])], start=start).passed


def test_a_confirmation_holds_the_false_promotion_rate_per_round_not_per_candidate() -> None:
    """One confirmation per Engineer round decides, whatever raced: with 6 rounds a phase each must clear zero at
    1 - 0.05 / 6 (99.2%), however many candidates and entrants a round has; a gain that clears 95% but not 99.2% is
    promoted in a phase of one round and not in a phase of six."""
    from evotrainer import config as C
    from evotrainer.judge.checks import confirmations_per_phase, phase_level, trial_verdict

    default = C.parse({})
    assert confirmations_per_phase(default.evolution) == 1 and phase_level(default.evolution, default.backtest) == 0.95
    cfg = C.apply_overrides(default, ["evolution.max_engineer_rounds=6", "evolution.max_candidates=8",
                                      "backtest.race_entrants=8"])
    level = phase_level(cfg.evolution, cfg.backtest)
    assert confirmations_per_phase(cfg.evolution) == 6 and level == pytest.approx(1 - 0.05 / 6)
    two = C.apply_overrides(default, ["evolution.max_engineer_rounds=2", "backtest.race_entrants=1"])
    assert phase_level(two.evolution, two.backtest) == pytest.approx(0.975)
    main = [_pilot([1] * 100 + [0] * 200)]
    for gained, alone, in_round in ((15, True, False), (30, True, True), (10, False, False)):
        cand = [_pilot([1] * 95 + [0] * 5 + [1] * gained + [0] * (200 - gained))]  # 5 of main's tasks lost
        assert trial_verdict(main, cand, start=moved(300)).passed == alone, gained
        check = trial_verdict(main, cand, level, moved(300))
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


MAIN = [1] * 1000 + [0] * 1000  # main's arm answers 1,000 of 2,000 probe tasks, and as the start did


class _Trainer:
    """A trainer service whose pilots are scripted per harness sha (``probes``: sha -> the probe's scores, or a
    function of the replicate and the steps giving them; main's by default; ``attempts``: sha -> what its code tried
    while training) and whose start checkpoint answers as ``start``; it records what it was asked."""

    def __init__(self, probes: dict, start: list[int] = MAIN, completions: int = 10,
                 attempts: dict[str, list[dict]] | None = None) -> None:
        self.probes, self.start, self.completions, self.attempts = probes, start, completions, attempts or {}
        self.piloted: list[tuple[str, int, int]] = []  # (sha, replicate, steps)
        self.evaluated: list[tuple[str, str]] = []  # (split, checkpoint)

    def run_pilot(self, req, timeout_s):
        self.piloted.append((req.harness_sha, req.replicate, req.steps))
        probe = self.probes.get(req.harness_sha, MAIN)
        probe = probe(req.replicate, req.steps) if callable(probe) else probe
        return _pilot(probe, self.attempts.get(req.harness_sha, ()), completions=self.completions)

    def evaluate(self, req, timeout_s):
        from evotrainer.contracts import EvalResult

        self.evaluated.append((req.split, req.checkpoint))
        return EvalResult(accuracy=sum(self.start) / len(self.start), n=len(self.start), answers=answers(self.start))


class _ScriptedTrials(backtest.Testbed):
    """The loop's Testbed with each trial arm's probe scripted (``_pilot``): the replay checks and the decision are
    the real ones; main's arm answers as the start did (``MAIN``), the candidate's loses 16 of its tasks and gains
    10, so 1.3% of its answers changed."""

    def __init__(self, rt: Runtime, cand: list[int] = (), start: list[int] = MAIN) -> None:
        from evotrainer.contracts import EvalResult

        super().__init__(rt, 1, rt.repo.sha("main"), start_dev=EvalResult(accuracy=0.5, n=2000, answers=answers(start)))
        self.cand = list(cand) or [1] * 984 + [0] * 16 + [1] * 10 + [0] * 990

    def _pilot(self, sha: str, replicate: int, steps: int | None = None):
        return _pilot(MAIN if sha == self.main_sha else self.cand)


def test_a_repair_that_moved_its_target_on_replay_must_still_gain(tmp_path: Path) -> None:
    """No lenient path: the numeric match moves its target on replay (it scores "+12" and "012", which the verifier
    accepts, so the reward agrees with it more), and a trial 0.3 points down is still a rejection, stopped after its
    first seed (no gain on main: the futility stop)."""
    rd = make_run(tmp_path / "run", ["backtest.trial_steps=5", "backtest.trial_seeds=2"])
    rt = runtime(rd, TrainerClient(f"http://127.0.0.1:{free_port()}"))
    try:
        cand = candidate(rt.repo, "numeric", {"rewards.py": NUMERIC_REWARDS}, "rewards.correct")
        report = _ScriptedTrials(rt).judge(cand)
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
        report = _ScriptedTrials(rt).judge(cand)
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


def test_an_uninformative_trial_promotes_nothing_even_with_a_gain(tmp_path: Path) -> None:
    """Main's arm answers every probe task as the start did; the candidate's changes 18 of 2,000 answers (0.9%), each
    from wrong to right: a gain whose interval clears zero, and still no promotion, since neither arm changed 1% of
    its answers. Not a loss on the merits either: the edit is not remembered as one."""
    from evotrainer.judge.checks import TRIAL_ANSWERS, trial_check

    rd = make_run(tmp_path / "run", ["backtest.trial_steps=5", "backtest.trial_seeds=2"])
    rt = runtime(rd, TrainerClient(f"http://127.0.0.1:{free_port()}"))
    small = [1] * 1000 + [1] * 18 + [0] * 982
    try:
        cand = candidate(rt.repo, "numeric", {"rewards.py": NUMERIC_REWARDS}, "rewards.correct")
        report = _ScriptedTrials(rt, small).judge(cand)
    finally:
        rt.close()
    assert trial_check([_pilot(MAIN).probe], [_pilot(small).probe]).passed  # the gain alone would have promoted
    check = next(c for c in report.checks if c.name.startswith("trial:"))
    assert report.verdict == "reject" and check.name == TRIAL_ANSWERS and not check.passed
    assert check.detail.startswith("uninformative: main changed 0.0% and the candidate 0.9% of probe answers since "
                                   "the start; at least 1% needed"), check.detail
    assert (check.base, check.candidate) == (0.0, 0.009) and "stopped after 1 of 2 seeds" in check.detail
    assert backtest.not_worth_retrying(report) is None


@pytest.mark.parametrize("changed, informative", [(19, False), (20, True)])
def test_one_arm_that_changed_one_percent_of_its_answers_makes_a_trial_informative(changed: int,
                                                                                  informative: bool) -> None:
    from evotrainer.judge.checks import MIN_ANSWERS_CHANGED, TRIAL, TRIAL_ANSWERS, trial_verdict

    assert MIN_ANSWERS_CHANGED == 0.01
    start = answers(MAIN)
    cand = [_pilot([1] * 1000 + [1] * changed + [0] * (1000 - changed))]
    check = trial_verdict([_pilot(MAIN)], cand, start=start)
    assert check.name == (TRIAL if informative else TRIAL_ANSWERS), check.detail
    # either arm will do: main's arm moving is as informative as the candidate's
    assert trial_verdict(cand, [_pilot(MAIN)], start=start).name == check.name


def test_answers_that_were_not_recorded_make_no_trial_informative() -> None:
    from evotrainer.judge.checks import TRIAL_ANSWERS, trial_verdict

    gain = [_pilot([1] * 2000)]
    for start in (None, {}, dict(list(answers(MAIN).items())[:1999])):  # none, or one task's missing
        check = trial_verdict([_pilot(MAIN)], gain, start=start)
        assert check.name == TRIAL_ANSWERS and not check.passed and "cannot tell" in check.detail


def test_the_start_answers_are_asked_of_the_trainer_once_when_not_recorded_and_counted(tmp_path: Path) -> None:
    """A start checkpoint whose dev result carries no answers (a run scored before they were kept) is scored once
    on the dev split by the trainer; its completions are judging compute, counted in the trial's event."""
    from evotrainer.contracts import EvalResult

    rd = make_run(tmp_path / "run", ["backtest.trial_steps=5", "backtest.trial_seeds=1"])
    gain = [1] * 1100 + [0] * 900
    trainer = _Trainer({"c" * 40: gain, "d" * 40: gain})
    rt = runtime(rd, trainer)
    try:
        old = EvalResult(accuracy=0.5, n=2000, items={f"probe-{i}": float(ok) for i, ok in enumerate(MAIN)})
        testbed = backtest.Testbed(rt, 1, rt.repo.sha("main"), start=1, start_dev=old)
        for sha in ("c" * 40, "d" * 40):
            assert testbed.trial(Candidate(branch=f"candidates/{sha[0]}", base_sha="m", sha=sha, diagnosis_id="d",
                                           intervention="i", hypothesis="h", variable="v", target_metric="t",
                                           direction="up", expected="e", rollback="r")).passed
    finally:
        rt.close()
    assert trainer.evaluated == [("dev", str(rd.checkpoint(1)))]  # once, the checkpoint both arms trained from
    trials = [e for e in map(json.loads, rd.events_path.read_text().splitlines()) if e["kind"] == "trial"]
    assert [t["completions"] for t in trials] == [2000 + 10 + 10, 10]  # the start's answers, main's arm, the edit's


def test_an_answer_fingerprint_changes_with_the_answer_not_with_what_follows_it() -> None:
    from evotrainer.domains import get_domain
    from evotrainer.trainer.model import answer_fingerprint

    math = get_domain("math")
    same = answer_fingerprint(math, ["40"])
    assert answer_fingerprint(math, ["40\nthen more"]) == same and answer_fingerprint(math, [" 40 "]) == same
    assert len({same, answer_fingerprint(math, ["41"]), answer_fingerprint(math, ["40."]),
                answer_fingerprint(math, ["41."]), answer_fingerprint(math, ["40", "40"])}) == 5  # a slip is an answer


def gained(k: int) -> list[int]:
    """A probe k tasks above main's (below, for k < 0): k answers changed since the start, all one way."""
    return [1] * (1000 + k) + [0] * (1000 - k)


@pytest.fixture(scope="module")
def racing(tmp_path_factory) -> RunDir:
    """A run whose rounds race: up to 4 entrants, confirmations of 5 batches x 2 seeds, a screen of 3 batches x 1 seed
    a rung."""
    return make_run(tmp_path_factory.mktemp("race") / "run", ["backtest.trial_steps=5", "backtest.trial_seeds=2",
                                                              "backtest.screen_steps=3", "backtest.screen_seeds=1",
                                                              "backtest.race_entrants=4"])


def race_round(rd: RunDir, names: list[str], probes, attempts=None, overrides: list[str] = (), alike: bool = False):
    """The backtest step on a round of numeric-match candidates (each passes the replay checks) named ``names``,
    against a scripted trainer (``probes(name)``: the candidate's probe, as for ``_Trainer``); phase 1's dev result
    carries the start's answers (``MAIN``). (state, reports, candidates by name, trainer, events of the round).
    The k-th candidate also samples at temperature 1 + 0.05 k, so that none trains exactly as another (the race
    takes one of those: ``training_signature``); with ``alike`` each differs from the first by a comment only, so
    all train alike."""
    from evotrainer import config as C
    from evotrainer.contracts import EvalResult, PhaseResult

    rt = runtime(rd, None)
    rt.cfg = C.apply_overrides(rt.cfg, list(overrides))
    before = len(rd.events_path.read_text().splitlines())
    try:
        knobs = rt.repo.show_file("main", "harness.yaml")
        assert "temperature: 1.0 " in knobs
        cands = {n: candidate(rt.repo, n, {"rewards.py": NUMERIC_REWARDS + f"# {n}\n"} if alike else {
            "harness.yaml": knobs.replace("temperature: 1.0 ", f"temperature: {1 + 0.05 * (k + 1):.2f} ")},
            "rewards.correct" if alike else "harness.yaml:temperature") for k, n in enumerate(names)}
        rt.trainer = _Trainer({c.sha: probes(n) for n, c in cands.items()},
                              attempts={cands[n].sha: a for n, a in (attempts or {}).items()})
        dev = EvalResult(accuracy=0.5, n=2000, answers=answers(MAIN))
        phase = PhaseResult(phase=1, harness_sha="a" * 40, steps=1, eval=dev, dev=dev, rollout_path="",
                            checkpoint_path="", wall_time_s=1.0, tokens=1)
        state = RunState(phase=1, engineer_round=1, results=[phase], candidates=list(cands.values()),
                         round_branches=[c.branch for c in cands.values()])
        state = state.model_copy(update=backtest.step(rt, state))
    finally:
        rt.close()
    events = [json.loads(line) for line in rd.events_path.read_text().splitlines()[before:]]
    return state, {r.branch: r for r in state.reports}, cands, rt.trainer, events


def test_the_race_halves_the_field_and_confirms_the_survivor_on_seeds_the_screen_did_not_use(racing: RunDir):
    """Four entrants: after rung 1 (replicate 0) the best two go on, after rung 2 (replicate 1, gains pooled over
    both) the best one; it is confirmed at replicates 2 and 3, and promoted. Main's screen arms are shared, losers
    keep their scores in a race note and a race:screen check, and the screen's completions are counted."""
    screen = {"a": (10, 0), "b": (30, 0), "c": (20, 40), "d": (-10, 0)}  # gain at replicate 0 and 1 (3 batches)

    def probes(name):
        return lambda replicate, steps: gained(screen[name][replicate] if steps == 3 else 60)

    state, reports, cands, trainer, events = race_round(racing, ["a", "b", "c", "d"], probes)
    sha = {c.sha: n for n, c in cands.items()}
    asked = [(sha.get(s, "main"), r, steps) for s, r, steps in trainer.piloted]
    assert [a for a in asked if a[0] == "main"] == [("main", 0, 3), ("main", 1, 3), ("main", 2, 5), ("main", 3, 5)]
    assert {n: [(r, st) for m, r, st in asked if m == n] for n in "abcd"} == {
        "a": [(0, 3)], "d": [(0, 3)], "b": [(0, 3), (1, 3)], "c": [(0, 3), (1, 3), (2, 5), (3, 5)]}
    assert trainer.evaluated == []  # the start's answers came from phase 1's dev result
    assert [n for n in "abcd" if reports[cands[n].branch].verdict == "promote"] == ["c"]
    assert backtest.route(2, state) == "promote"
    notes = {n: HarnessRepo(racing.harness).note(cands[n].sha, "race") for n in "abcd"}
    assert (notes["a"]["rung"], notes["a"]["gains"], notes["a"]["survivor"]) == (1, [0.005], False)
    assert notes["a"]["stopped"].startswith("lost the race at rung 1: placed 3 of 4, and the best 2 went on: paired "
                                            "gain +0.0050 over main at 1 seed(s) x 3 batches, the cut +0.0100")
    assert (notes["b"]["rung"], notes["b"]["gains"]) == (2, [0.015, 0.0075])  # pooled: (30 + 0) / 2 tasks per 2000
    assert notes["b"]["stopped"].startswith("lost the race at rung 2: placed 2 of 2")
    assert notes["c"]["survivor"] and notes["c"]["stopped"] is None and notes["c"]["gains"] == [0.01, 0.015]
    assert notes["c"]["confirmation"]["replicates"] == [2, 3] and notes["c"]["confirmation"]["passed"]
    loser = next(c for c in reports[cands["d"].branch].checks if c.name == "race:screen")
    assert not loser.passed and loser.candidate == pytest.approx(0.495) and loser.base == 0.5
    assert backtest.not_worth_retrying(reports[cands["b"].branch]) is None  # lost to another candidate, not to main
    won = next(c for c in reports[cands["c"].branch].checks if c.name == "race:screen")
    assert won.passed and "confirmed at replicates 2 to 3, which the screen did not use" in won.detail
    race = [e for e in events if e["kind"] == "race"]
    assert len(race) == 1 and race[0]["survivor"] == cands["c"].branch and race[0]["screen_replicates"] == 2
    assert [row["gains"] for row in race[0]["entrants"]] == [notes[n]["gains"] for n in "abcd"]
    assert race[0]["completions"] == 10 * (2 + 1 + 2 + 2 + 1)  # main's two screen arms and the entrants' six
    trial = [e for e in events if e["kind"] == "trial"]
    assert [(t["branch"], t["replicates"], t["completions"]) for t in trial] == [(cands["c"].branch, [2, 3], 40)]
    from evotrainer.bench.runner import JUDGING_EVENTS  # what the bench sums: every pilot counted once

    assert sum(e["completions"] for e in events if e["kind"] in JUDGING_EVENTS) == 10 * len(trainer.piloted)


def test_a_screen_winner_that_does_not_clear_superiority_is_not_promoted(racing: RunDir):
    """The screen's winner (+1.5 points at its rung) loses its confirmation (-1.5 points at its first fresh seed:
    stopped there): nothing is promoted, the round goes back to the Engineer, and the winner is remembered as a loss
    on the merits, the screen's loser not. A third candidate that passed the replay finds the race full
    (backtest.race_entrants=2): not judged, and its note says why."""
    def probes(name):
        return lambda replicate, steps: gained({"w": 30, "l": 0, "x": 80}[name] if steps == 3 else -30)

    state, reports, cands, trainer, events = race_round(racing, ["w", "l", "x"], probes,
                                                        overrides=["backtest.race_entrants=2"])
    w, l, x = (cands[n] for n in "wlx")
    assert sorted(reports) == sorted([w.branch, l.branch]) and all(r.verdict == "reject" for r in reports.values())
    trial = next(c for c in reports[w.branch].checks if c.name == "trial:probe_accuracy")
    assert not trial.passed and "stopped after 1 of 2 seeds: no gain on main (futility stop)" in trial.detail
    assert next(c for c in reports[w.branch].checks if c.name == "race:screen").passed
    assert backtest.route(2, state) == "engineer" and backtest.route(1, state) == "promote"
    assert state.trial_lost == {w.base_sha: [w.intervention]}
    assert HarnessRepo(racing.harness).note(x.sha, "not_judged")["race_entrants"] == 2
    assert x.sha not in {s for s, _, _ in trainer.piloted}  # it trained nothing
    assert [e["branch"] for e in events if e["kind"] == "not_judged"] == [x.branch]
    race = next(e for e in events if e["kind"] == "race")
    assert race["confirmation"]["replicates"] == [1, 2] and not race["confirmation"]["passed"]


def test_screen_seeds_sets_the_replicates_each_rung_adds(racing: RunDir):
    """backtest.screen_seeds=2: the one rung of a two-entrant screen trains both entrants and main at replicates 0
    and 1, and the survivor's confirmation starts at replicate 2 (fresh seeds after the screen's)."""
    def probes(name):
        return lambda replicate, steps: gained({"p": 30, "q": 0}[name] if steps == 3 else 60)

    state, reports, cands, trainer, events = race_round(racing, ["p", "q"], probes,
                                                        overrides=["backtest.screen_seeds=2"])
    screened: dict[str, set[int]] = {}
    for sha, rep, steps in trainer.piloted:
        if steps == 3:
            screened.setdefault(sha, set()).add(rep)
    assert len(screened) == 3 and all(reps == {0, 1} for reps in screened.values())  # both entrants and main
    assert reports[cands["q"].branch].verdict == "reject" and reports[cands["p"].branch].verdict == "promote"
    race = next(e for e in events if e["kind"] == "race")
    assert race["screen_replicates"] == 2 and race["confirmation"]["replicates"] == [2, 3]


def test_a_single_entrant_skips_the_screen_and_one_that_misbehaves_in_it_leaves(racing: RunDir):
    """A lone entrant goes straight to its confirmation at replicates 0 and 1. In a screen, an entrant whose code
    tried a forbidden operation while it trained leaves at once, named, whatever its gain."""
    state, reports, cands, trainer, events = race_round(racing, ["alone"], lambda name: gained(60))
    assert [(r, steps) for _, r, steps in trainer.piloted] == [(0, 5), (0, 5), (1, 5), (1, 5)]  # main, then it
    assert reports[cands["alone"].branch].verdict == "promote"
    race = next(e for e in events if e["kind"] == "race")
    assert race["screen_replicates"] == 0 and race["completions"] == 0 and race["entrants"][0]["rung"] == 0
    assert not any(c.name == "race:screen" for c in reports[cands["alone"].branch].checks)

    bad = {"kind": "network", "what": "connect 192.0.2.1:80", "where": "rewards.py:3", "op": "score"}
    state, reports, cands, trainer, events = race_round(racing, ["sly", "plain"], lambda name: gained(
        90 if name == "sly" else 40), attempts={"sly": [bad]})
    sly = reports[cands["sly"].branch]
    assert sly.verdict == "reject" and sly.reasons[0].startswith("trial:sandbox_attempts: network"), sly.reasons
    assert reports[cands["plain"].branch].verdict == "promote"


def test_a_candidate_that_trains_exactly_as_an_earlier_one_does_not_race(racing: RunDir):
    """Three candidates whose files differ only in a comment train alike on replay (one training signature): the
    first goes straight to its confirmation as the round's one entrant, the other two are not judged, their notes
    name the first, and they train nothing. Scripted to differ, they would have raced a screen of three."""
    def probes(name):
        return lambda replicate, steps: gained(60)

    state, reports, cands, trainer, events = race_round(racing, ["a", "b", "c"], probes, alike=True)
    a, b, c = (cands[n] for n in "abc")
    assert list(reports) == [a.branch] and reports[a.branch].verdict == "promote"
    assert reports[a.branch].signature is not None
    repo = HarnessRepo(racing.harness)
    assert [repo.note(x.sha, "not_judged")["same_as"] for x in (b, c)] == [a.branch, a.branch]
    assert {s for s, _, _ in trainer.piloted} <= {a.sha, repo.sha("main")}
    race = next(e for e in events if e["kind"] == "race")
    assert [row["branch"] for row in race["entrants"]] == [a.branch] and race["screen_replicates"] == 0
