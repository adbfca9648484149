"""Step 5: the Backtester judges this round's candidates; the checks are framework code (``evotrainer/judge/checks.py``).

:class:`Testbed` is what the loop lends the Backtester agent: the replay checks against main (main replayed once per
phase, from the evidence cache), which are the safety checks and the "effect" check, and then the decision, an A/B
trial through the trainer service: from this phase's checkpoint main and the candidate each train
``backtest.trial_steps`` generated batches with the same seeds and tasks (``trial_seeds`` replicates; main's arm is
trained once per phase: the trainer service answers a repeated request with its finished job) and are scored on the
probe of the dev split, paired per task, at the level that holds the false-promotion rate per round
(``backtest.false_promotion_rate`` over the most trials a phase can run, ``judge.checks.phase_level``). The candidate
must gain on main (superiority: the paired interval's lower end above 0), whatever it moved on replay. A trial that
fails in the trainer is a rejection with its reason, never a crash, and so is any other exception judging one
candidate ("could not judge: <one line>", ``evotrainer.judge.checks.could_not_judge``): the other candidates are still
judged and the run goes on. Only what stops the run on purpose passes through: a pause (``RunPaused``: an LLM budget
spent; LangGraph's interrupts) and KeyboardInterrupt/SystemExit. Each report is stored as the candidate's ``backtest``
git note. Candidates are judged in the Engineer's order, and since a phase promotes at most one, the first to pass
ends the round: the rest are not judged (a ``not_judged`` event and git note each), which saves their trials and
promotes by a rule fixed before any trial ran, not the largest of several noisy margins (a winner's curse). A round
runs at most ``backtest.max_trials`` trials (a candidate the replay checks reject spends none); once they are spent
the rest are not judged either. Router ``route``: back to the Engineer (with the reasons) when nothing passed and
rounds are left, else to promote.
"""

from __future__ import annotations

import time

from langgraph.errors import GraphBubbleUp

from evotrainer.contracts import NOT_JUDGED, BacktestReport, Candidate, Check, EvalResult
from evotrainer.judge.checks import TRIAL, could_not_judge, judge, phase_level, trial_of, trial_verdict, with_check
from evotrainer.loop.resume import trial_start
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState
from evotrainer.pause import RunPaused
from evotrainer.trainer.client import TrainerError
from evotrainer.trainer.wire import EvalRequest, PilotResult


class Testbed:
    """Replay checks on the retained rollouts, then an A/B trial from the phase's checkpoint."""

    def __init__(self, rt: Runtime, phase: int, main_sha: str, start: int | None = None,
                 start_dev: EvalResult | None = None):
        self.rt, self.phase, self.main_sha = rt, phase, main_sha
        self.start = phase if start is None else start  # the checkpoint both trial arms train from (loop/resume.py)
        self._start_dev = start_dev  # that checkpoint's dev result, with its answers when they were recorded
        keep = rt.cfg.backtest.retained_phases
        self.retained = [p for p in range(max(1, phase - keep + 1), phase + 1) if rt.rd.rollout_file(p).exists()]
        self.trials = rt.cfg.backtest.trial_steps > 0
        self._main_arm: list[PilotResult] = []  # main's replicates, each trained once per phase, when first needed

    def _pilot(self, sha: str, replicate: int) -> PilotResult:
        """One short run at ``sha`` from ``start``'s checkpoint (this phase's, or the best earlier one when this phase
        harmed the policy), scored on the probe."""
        rt, b = self.rt, self.rt.cfg.backtest
        req = rt.request(self.phase + 1, sha, b.trial_steps, init=rt.checkpoint_of(self.start), pilot=True)
        req = req.model_copy(update={"replicate": replicate, "probe_size": b.probe_size})
        return rt.trainer.run_pilot(req, timeout_s=rt.cfg.trainer.phase_timeout_s)

    def start_answers(self) -> tuple[dict[str, str], int]:
        """(the answers the checkpoint both arms train from gives on the dev split, the completions generated now to
        get them): recorded when that checkpoint was scored (its phase's dev result, or the starting policy's), else
        asked of the trainer once (``POST /evaluate`` on the dev split, whose completions count as judging)."""
        if self._start_dev is not None and self._start_dev.answers:
            return self._start_dev.answers, 0
        rt = self.rt
        req = EvalRequest.make(rt.cfg, str(rt.rd.root), rt.checkpoint_of(self.start)).on("dev")
        self._start_dev = rt.trainer.evaluate(req, timeout_s=rt.cfg.trainer.phase_timeout_s)
        return self._start_dev.answers, self._start_dev.n * max(1, rt.cfg.training.eval_samples)

    def trial(self, candidate: Candidate) -> Check:
        """The A/B decision (``backtest.trial_verdict``: attempts made while training reject first, then a trial in
        which neither arm changed its answers since the start is uninformative), seed by seed.

        After each seed but the last, a candidate that has not gained on main at all (its paired point estimate at
        most 0) stops there, rejected: a futility stop. It can only turn a promotion into a rejection, so the round's
        false-promotion level holds, and it spares the further seeds of most candidates that cannot help (an edit
        worth +3 dev points shows no gain at one seed of 2,000 probe tasks well under 1% of the time). Main's seeds
        are trained when a candidate first needs them, once per phase."""
        b = self.rt.cfg.backtest
        level = phase_level(self.rt.cfg.evolution, b)
        cand: list[PilotResult] = []
        try:
            start, spent = self.start_answers()
            for replicate in range(b.trial_seeds):
                if replicate == len(self._main_arm):  # charged to the first trial that needs it
                    self._main_arm.append(self._pilot(self.main_sha, replicate))
                    spent += self._main_arm[-1].completions
                cand.append(self._pilot(candidate.sha, replicate))
                spent += cand[-1].completions
                verdict = trial_verdict(self._main_arm[:len(cand)], cand, level, start)
                if verdict.name != TRIAL:  # its code tried a forbidden operation while it trained, or nothing moved
                    if len(cand) < b.trial_seeds:
                        verdict = verdict.model_copy(update={"detail": f"{verdict.detail}; stopped after {len(cand)} "
                                                             f"of {b.trial_seeds} seeds"})
                    break
                if verdict.candidate <= verdict.base and len(cand) < b.trial_seeds:
                    verdict = verdict.model_copy(update={"detail": f"{verdict.detail}; stopped after {len(cand)} of "
                                                         f"{b.trial_seeds} seeds: no gain on main (futility stop)"})
                    break
        except TrainerError as err:
            return Check(name=TRIAL, passed=False, detail=f"the trial failed in the trainer: {err}")
        self.rt.emit("trial", phase=self.phase, branch=candidate.branch, completions=spent,
                     main=[r.probe.accuracy for r in self._main_arm[:len(cand)]],
                     candidate=[r.probe.accuracy for r in cand], seeds=len(cand),
                     sandbox_attempts=[a for r in cand for a in r.sandbox_attempts][:20])
        return verdict

    def judge(self, candidate: Candidate) -> BacktestReport:
        """The replay checks; then, when they all pass and trials are on, the trial decides."""
        rt = self.rt
        report = judge(rt.repo, candidate, rt.evidence.main(self.main_sha, self.retained), settings=rt.cfg.backtest,
                       sandbox=rt.cfg.sandbox, hide=rt.rd.hidden_from_harness())
        if self.trials and report.verdict == "promote":
            report = with_check(report, self.trial(candidate))
        return report


def step(rt: Runtime, state: RunState) -> dict:
    start, reason = trial_start(rt, state)
    if reason is not None:
        rt.emit("trial_start", phase=state.phase, round=state.engineer_round, start=start, reason=reason)
    start_dev = rt.baseline_dev if start == 0 else next((r.dev for r in state.results if r.phase == start), None)
    testbed = Testbed(rt, state.phase, rt.repo.sha("main"), start, start_dev)
    reports = list(state.reports)
    todo = state.round_candidates()
    no_effect = {sha: list(names) for sha, names in state.no_effect.items()}
    trial_lost = {sha: list(names) for sha, names in state.trial_lost.items()}
    first_pass = None  # a phase promotes at most one candidate: the first to pass ends the round's judging
    trials_left = rt.cfg.backtest.max_trials  # the round's A/B trials; a candidate the replay rejects spends none
    with rt.reporter.progress(f"phase {state.phase}: backtesting", len(todo)) as bar:
        for i, cand in enumerate(todo):
            why = None
            if first_pass is not None:
                why = (f"{first_pass} passed first (candidates are judged in the Engineer's order; a phase promotes "
                       f"at most one)")
                note = {"reason": why, "passed_first": first_pass}
            elif testbed.trials and trials_left == 0:
                why = (f"the round's {rt.cfg.backtest.max_trials} A/B trial(s) are spent (backtest.max_trials; "
                       f"candidates are judged in the Engineer's order)")
                note = {"reason": why, "trials_spent": rt.cfg.backtest.max_trials}
            if why is not None:
                rt.repo.add_note(cand.sha, note, ref=NOT_JUDGED)
                rt.emit("not_judged", phase=state.phase, branch=cand.branch, reason=why)
                bar(step=i + 1, total=len(todo))
                continue
            t0 = time.time()
            try:
                report = rt.agents.backtester.judge(cand, testbed)
            except (RunPaused, GraphBubbleUp):
                raise  # the run stops on purpose (an LLM budget, the human gate) and resumes here
            except Exception as err:  # noqa: BLE001 - one candidate must never stop an unattended run
                report = could_not_judge(cand, testbed.main_sha, err, time.time() - t0)
            trials_left -= trial_of(report) is not None
            rt.repo.add_note(cand.sha, report.model_dump(mode="json"), ref="backtest")
            rt.emit("verdict", phase=state.phase, branch=cand.branch, verdict=report.verdict, reasons=report.reasons,
                    checks=[ch.model_dump(mode="json") for ch in report.checks], runtime_s=report.runtime_s,
                    sandbox=report.sandbox, agent="backtester", model=rt.cfg.agents.role("backtester").model)
            reports = [r for r in reports if r.branch != cand.branch] + [report]
            if report.verdict == "promote":  # a phase promotes at most one (evolution.max_promotions_per_phase)
                first_pass = cand.branch
            memory = {"no_effect": no_effect, "trial_lost": trial_lost}.get(not_worth_retrying(report))
            if memory is not None:  # run-level: the Engineer does not propose it again on this main
                seen = memory.setdefault(cand.base_sha, [])
                seen += [cand.intervention] if cand.intervention not in seen else []
            bar(step=i + 1, total=len(todo))
    return {"reports": reports, "no_effect": no_effect, "trial_lost": trial_lost}


def not_worth_retrying(report: BacktestReport) -> str | None:
    """Why a rejected edit is not worth proposing again on the same main: "no_effect" (it changed no training
    update), "trial_lost" (it trained and did not beat main in its A/B trial; a trial the trainer could not run
    scored nothing and is no loss), or None.

    An uninformative trial (neither arm changed its answers: ``judge.checks.answers_check``) is no loss either, so the
    Engineer may propose the edit again: the trial measured nothing about it and could not have promoted it, so a
    retry spends none of the run's chance of a false promotion, and from a later checkpoint, or once a repair makes
    training move the policy, the same edit can be judged on its merits."""
    failed = {c.name: c for c in report.checks if not c.passed}
    if "effect" in failed:
        return "no_effect"
    if TRIAL in failed and failed[TRIAL].candidate is not None:
        return "trial_lost"
    return None


def route(max_rounds: int, state: RunState) -> str:
    """Back to the Engineer when no candidate of this round passed and rounds are left; else promote."""
    passed = any(r.verdict == "promote" for r in state.reports if r.branch in state.round_branches)
    return "engineer" if not passed and state.engineer_round < max_rounds else "promote"
