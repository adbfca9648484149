"""Step 5: the Backtester judges this round's candidates: replay checks, then a race; the checks are framework code
(``evotrainer/judge/checks.py``).

:class:`Testbed` is what the loop lends the Backtester agent. A round goes in three stages:

1. **Replay.** Every candidate's replay checks against main (main replayed once per phase, from the evidence cache):
   the safety checks and the "effect" check. A candidate they reject spends no training.
2. **The race** (with trials on: ``backtest.trial_steps`` > 0). The candidates that pass, in the Engineer's order and
   at most ``backtest.race_entrants`` of them (the rest are not judged: a ``not_judged`` note each; so is one whose
   replay trains exactly as an earlier one's, ``BacktestReport.signature``, which races for both), race from the
   phase's checkpoint, scored on the dev split's probe through the trainer service (main's arm per seed is trained
   once per phase and shared):

   * the **screen**, for two entrants or more: successive halving. Each rung trains every entrant still in the race,
     and main, ``backtest.screen_steps`` batches at ``backtest.screen_seeds`` more replicates, ranks them by their
     paired gain over main (per task and seed, pooled over the screen's seeds so far; a tie goes to the Engineer's
     order) and keeps the best half, rounded down (8 -> 4 -> 2 -> 1; 3 -> 1), until one is left. An entrant whose
     code tried a forbidden operation while it trained, or whose arm failed in the trainer, leaves at once;
   * the **confirmation** of the survivor (a single entrant comes straight here): an A/B trial of
     ``backtest.trial_steps`` batches x ``backtest.trial_seeds`` at replicate indices the screen did not use, both
     arms (:meth:`Testbed.trial`). It promotes only on superiority, the paired interval's lower end above 0, at the
     phase's level (``judge.checks.phase_level``: ``backtest.false_promotion_rate`` over the Engineer rounds, one
     confirmation each: the screen's choice needs no share of it, since the confirmation's seeds are fresh and the
     screen's winner's curse stays in the screen), and only when an arm changed at least 1% of its probe answers
     since the checkpoint both trained from (``judge.checks.answers_check``; else the trial is uninformative).

   Losers stay on their branches with their scores: a ``race:screen`` check in their report and a ``race`` git note
   (the rung reached, the paired gain after each rung, why they stopped). A ``race`` event per round lists every
   entrant's rung scores and the completions the screen generated; the confirmation's, and the start's answers when
   they had to be generated, are in its ``trial`` event, so that summing both kinds counts judging once
   (``bench.runner.run_outcome``).
3. **Verdict.** The Backtester agent reads each candidate's checks (:meth:`Testbed.judge`) and gives the verdict; it
   may reject what the checks pass, never promote what they fail. Each report is stored as the candidate's
   ``backtest`` git note. A round so promotes at most one candidate: the race's survivor, confirmed.

With trials off the replay's targeted metric decides, in the Engineer's order: the first to pass ends the round and the
rest are not judged (a rule fixed before anything was measured, not the largest of several noisy margins).

A trial that fails in the trainer is a rejection with its reason, never a crash, and so is any other exception judging
a candidate ("could not judge: <one line>", ``evotrainer.judge.checks.could_not_judge``): the other candidates are
still judged and the run goes on. Only what stops the run on purpose passes through: a pause (``RunPaused``: an LLM
budget spent; LangGraph's interrupts) and KeyboardInterrupt/SystemExit. The step keeps nothing in the run state until
it returns (its notes and events are rewritten when it runs again), so a run killed mid-round judges that round again
on resume, as it would have. Router ``route``: back to the Engineer (with the reasons) when nothing passed and rounds
are left, else to promote.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from langgraph.errors import GraphBubbleUp

from evotrainer.contracts import NOT_JUDGED, RACE, BacktestReport, Candidate, Check, EvalResult
from evotrainer.judge.checks import TRIAL, confirm, could_not_judge, judge, new_attempts, phase_level, with_check
from evotrainer.loop.resume import trial_start
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState
from evotrainer.pause import RunPaused
from evotrainer.trainer.client import TrainerError
from evotrainer.trainer.wire import EvalRequest, PilotResult

SCREEN = "race:screen"  # the screen's word on an entrant: it lost (its rung, its gain), won, or could not be screened


@dataclass
class Entrant:
    """A candidate in the race: its screen arms so far (one per replicate), its paired gain over main after each rung,
    and its ``race:screen`` check once it lost, left or won the screen."""

    candidate: Candidate
    order: int  # its place in the Engineer's order: what breaks a tie
    pilots: list[PilotResult] = field(default_factory=list)
    gains: list[float] = field(default_factory=list)
    check: Check | None = None


class Testbed:
    """Replay checks on the retained rollouts, then the race from the phase's checkpoint."""

    def __init__(self, rt: Runtime, phase: int, main_sha: str, start: int | None = None,
                 start_dev: EvalResult | None = None):
        self.rt, self.phase, self.main_sha = rt, phase, main_sha
        self.start = phase if start is None else start  # the checkpoint every arm trains from (loop/resume.py)
        self._start_dev = start_dev  # that checkpoint's dev result, with its answers when they were recorded
        keep = rt.cfg.backtest.retained_phases
        self.retained = [p for p in range(max(1, phase - keep + 1), phase + 1) if rt.rd.rollout_file(p).exists()]
        self.trials = rt.cfg.backtest.trial_steps > 0
        self._main: dict[tuple[int, int], PilotResult] = {}  # (replicate, steps) -> main's arm, trained once
        self.replays: dict[str, BacktestReport] = {}  # branch -> its replay checks
        self.raced: dict[str, list[Check]] = {}  # branch -> what the race said of it (screen, confirmation)

    def _pilot(self, sha: str, replicate: int, steps: int | None = None) -> PilotResult:
        """One short run at ``sha`` from ``start``'s checkpoint (this phase's, or the best earlier one when this phase
        harmed the policy), ``steps`` batches (a confirmation's by default), scored on the probe."""
        rt, b = self.rt, self.rt.cfg.backtest
        req = rt.request(self.phase + 1, sha, steps or b.trial_steps, init=rt.checkpoint_of(self.start), pilot=True)
        req = req.model_copy(update={"replicate": replicate, "probe_size": b.probe_size})
        return rt.trainer.run_pilot(req, timeout_s=rt.cfg.trainer.phase_timeout_s)

    def _main_arm(self, replicate: int, steps: int) -> tuple[PilotResult, int]:
        """(main's arm at ``replicate`` and ``steps``, the completions training it cost now: 0 when already trained)."""
        if (replicate, steps) in self._main:
            return self._main[replicate, steps], 0
        arm = self._main[replicate, steps] = self._pilot(self.main_sha, replicate, steps)
        return arm, arm.completions

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

    def trial(self, candidate: Candidate, first: int = 0) -> Check:
        """The confirmation: an A/B trial of ``candidate`` against main at replicates ``first`` onwards
        (``backtest.trial_seeds`` of them), seed by seed, by ``judge.checks.confirm``'s rule (attempts made while
        training reject first, then a trial in which neither arm changed its answers since the start is
        uninformative, else superiority at the phase's level; a futility stop after a seed without gain).

        The futility stop can only turn a promotion into a rejection, so the round's false-promotion level holds, and
        it spares the further seeds of most candidates that cannot help (an edit worth +3 dev points shows no gain at
        one seed of 2,000 probe tasks well under 1% of the time). Main's seeds are trained when a candidate first
        needs them, once per phase."""
        b = self.rt.cfg.backtest
        spent = 0

        def pair(replicate: int) -> tuple[PilotResult, PilotResult]:
            nonlocal spent
            arm, cost = self._main_arm(replicate, b.trial_steps)  # charged to the first trial that needs it
            cand = self._pilot(candidate.sha, replicate)
            spent += cost + cand.completions
            return arm, cand

        try:
            start, spent = self.start_answers()
            verdict, main, cand = confirm(pair, range(first, first + b.trial_seeds),
                                          phase_level(self.rt.cfg.evolution, b), start)
        except TrainerError as err:
            return Check(name=TRIAL, passed=False, detail=f"the trial failed in the trainer: {err}")
        self.rt.emit("trial", phase=self.phase, branch=candidate.branch, completions=spent,
                     main=[r.probe.accuracy for r in main], candidate=[r.probe.accuracy for r in cand],
                     seeds=len(cand), replicates=list(range(first, first + len(cand))),
                     sandbox_attempts=[a for r in cand for a in r.sandbox_attempts][:20])
        return verdict

    def screen(self, entrants: list[Candidate]) -> tuple[Candidate | None, list[Entrant], int, int]:
        """Successive halving over ``entrants`` (two or more, in the Engineer's order): (the survivor, or None when
        none is left; every entrant with its gains and check; the replicates the screen used, 0 to that number less
        one; the completions it generated). See the module's docstring for the rule."""
        b = self.rt.cfg.backtest
        field_ = [Entrant(c, i) for i, c in enumerate(entrants)]
        alive, main = list(field_), []
        used = spent = 0
        while len(alive) > 1:
            replicates = range(used, used + b.screen_seeds)
            try:
                for r in replicates:
                    arm, cost = self._main_arm(r, b.screen_steps)
                    main.append(arm)
                    spent += cost
            except TrainerError as err:  # main's arm did not train: nobody can be ranked
                for e in alive:
                    e.check = Check(name=SCREEN, passed=False, detail=f"the screen failed in the trainer: {err}")
                return None, field_, used + b.screen_seeds, spent
            used += b.screen_seeds
            for e in alive:
                try:
                    for r in replicates:
                        e.pilots.append(self._pilot(e.candidate.sha, r, b.screen_steps))
                        spent += e.pilots[-1].completions
                except TrainerError as err:
                    e.check = Check(name=SCREEN, passed=False, detail=f"the screen failed in the trainer: {err}")
                    continue
                e.check = new_attempts(main, e.pilots)  # its code misbehaved while it trained: out, named
                e.gains.append(sum(c.probe.accuracy - m.probe.accuracy for m, c in zip(main, e.pilots)) / used)
            standing = sorted((e for e in alive if e.check is None), key=lambda e: (-e.gains[-1], e.order))
            keep = max(1, len(standing) // 2)
            for place, e in enumerate(standing[keep:], keep + 1):
                e.check = self._screened(e, main, standing[keep - 1].gains[-1],
                                         f"lost the race at rung {len(e.gains)}: placed {place} of {len(standing)}, "
                                         f"and the best {keep} went on")
            alive = standing[:keep]
        if not alive:
            return None, field_, used, spent
        won = alive[0]
        won.check = self._screened(won, main, None, f"won the screen of {len(entrants)} entrants after "
                                   f"{len(won.gains)} rung(s); confirmed at replicates {used} to "
                                   f"{used + b.trial_seeds - 1}, which the screen did not use")
        return won.candidate, field_, used, spent

    def _screened(self, e: Entrant, main: list[PilotResult], cut: float | None, said: str) -> Check:
        """The ``race:screen`` check of entrant ``e``: its paired gain over main on the screen's seeds so far, and
        ``said`` (lost at ``cut``, the gain the last of those that went on had; or won)."""
        b, seeds = self.rt.cfg.backtest, len(e.pilots)
        base = sum(m.probe.accuracy for m in main[:seeds]) / seeds
        gain = e.gains[-1]
        tie = " (a tie goes to the Engineer's order)" if cut is not None and gain == cut else ""
        return Check(name=SCREEN, base=round(base, 4), candidate=round(base + gain, 4), passed=cut is None,
                     threshold=None if cut is None else round(base + cut, 4),
                     detail=f"{said}: paired gain {gain:+.4f} over main at {seeds} seed(s) x {b.screen_steps} batches"
                     + ("" if cut is None else f", the cut {cut:+.4f}{tie}"))

    def race(self, entrants: list[Candidate], round_: int = 0) -> Candidate | None:
        """The round's race over ``entrants`` (those that passed the replay checks, in the Engineer's order): the
        screen when there are two or more, then the survivor's confirmation at replicates the screen did not use.
        Records what it said of each in ``raced`` (read by :meth:`judge`), a ``race`` git note on each and one
        ``race`` event; returns the survivor (confirmed or not), or None."""
        if not entrants:
            return None
        b = self.rt.cfg.backtest
        if len(entrants) > 1:
            survivor, field_, used, spent = self.screen(entrants)
        else:  # a single entrant skips the screen
            survivor, field_, used, spent = entrants[0], [Entrant(entrants[0], 0)], 0, 0
        for e in field_:
            self.raced[e.candidate.branch] = [e.check] if e.check is not None else []
        confirmed = None
        if survivor is not None:
            confirmed = self.trial(survivor, first=used)
            self.raced[survivor.branch].append(confirmed)
        confirmation = None if confirmed is None else {
            "branch": survivor.branch, "replicates": list(range(used, used + b.trial_seeds)),
            "check": confirmed.name, "passed": confirmed.passed, "detail": confirmed.detail}
        rows = []
        for e in field_:
            row = {"branch": e.candidate.branch, "rung": len(e.gains), "gains": [round(g, 6) for g in e.gains],
                   "stopped": None if e.check is None or e.check.passed else e.check.detail}
            rows.append(row)
            self.rt.repo.add_note(e.candidate.sha, {
                **row, "phase": self.phase, "round": round_, "entrants": len(entrants), "screen_seeds": used,
                "screen_steps": b.screen_steps, "survivor": e.candidate is survivor,
                "confirmation": confirmation if e.candidate is survivor else None}, ref=RACE)
        self.rt.emit("race", phase=self.phase, round=round_, entrants=rows,
                     survivor=survivor.branch if survivor is not None else None, screen_replicates=used,
                     screen_steps=b.screen_steps, confirmation=confirmation, completions=spent)
        return survivor

    def replay(self, candidate: Candidate) -> BacktestReport:
        """The candidate's replay checks (safety and effect; with trials off, its targeted metric decides)."""
        rt = self.rt
        report = judge(rt.repo, candidate, rt.evidence.main(self.main_sha, self.retained), settings=rt.cfg.backtest,
                       sandbox=rt.cfg.sandbox, hide=rt.rd.hidden_from_harness(), domain=rt.cfg.domain,
                       executor=rt.cfg.executor)
        self.replays[candidate.branch] = report
        return report

    def judge(self, candidate: Candidate) -> BacktestReport:
        """What the Backtester agent reads: the candidate's replay checks and what the race said of it (its screen;
        for the survivor, the confirmation that decides). A candidate judged alone (outside :func:`step`) is
        replayed and, when it passes with trials on, races alone: straight to its confirmation."""
        report = self.replays.get(candidate.branch) or self.replay(candidate)
        if self.trials and report.verdict == "promote" and candidate.branch not in self.raced:
            self.race([candidate])
        for check in self.raced.get(candidate.branch, []):
            report = with_check(report, check)
        return report.model_copy(deep=True)


def step(rt: Runtime, state: RunState) -> dict:
    start, reason = trial_start(rt, state)
    if reason is not None:
        rt.emit("trial_start", phase=state.phase, round=state.engineer_round, start=start, reason=reason)
    start_dev = rt.baseline_dev if start == 0 else next((r.dev for r in state.results if r.phase == start), None)
    testbed = Testbed(rt, state.phase, rt.repo.sha("main"), start, start_dev)
    todo = state.round_candidates()
    unjudged: dict[str, dict] = {}  # branch -> its not_judged note
    failed: dict[str, BacktestReport] = {}  # branch -> "could not judge" (an exception no check foresaw)
    with rt.reporter.progress(f"phase {state.phase}: replaying", len(todo)) as bar:
        for i, cand in enumerate(todo):
            first = next((b for b, r in testbed.replays.items() if r.verdict == "promote"), None)
            if first is not None and not testbed.trials:
                unjudged[cand.branch] = {"reason": f"{first} passed first (with trials off the replay decides, in "
                                         "the Engineer's order; a phase promotes at most one)", "passed_first": first}
            else:
                t0 = time.time()
                try:
                    testbed.replay(cand)
                except (RunPaused, GraphBubbleUp):
                    raise  # the run stops on purpose (an LLM budget, the human gate) and resumes here
                except Exception as err:  # noqa: BLE001 - one candidate must never stop an unattended run
                    failed[cand.branch] = could_not_judge(cand, testbed.main_sha, err, time.time() - t0)
            bar(step=i + 1, total=len(todo))
    passed = [c for c in todo if c.branch in testbed.replays and testbed.replays[c.branch].verdict == "promote"]
    if testbed.trials:
        passed = _distinct(passed, testbed.replays, unjudged)
    entrants = passed[:rt.cfg.backtest.race_entrants] if testbed.trials else []
    for cand in passed[len(entrants):] if testbed.trials else []:
        cap = rt.cfg.backtest.race_entrants
        unjudged[cand.branch] = {"reason": f"it passed the replay checks, and the race takes the first {cap} that "
                                 "do in the Engineer's order (backtest.race_entrants)", "race_entrants": cap}
    if entrants:
        t0 = time.time()
        try:
            with rt.reporter.progress(f"phase {state.phase}: racing {len(entrants)} candidate(s)"):
                testbed.race(entrants, state.engineer_round)
        except (RunPaused, GraphBubbleUp):
            raise
        except Exception as err:  # noqa: BLE001 - the round is rejected with the reason, the run goes on
            failed.update({c.branch: could_not_judge(c, testbed.main_sha, err, time.time() - t0) for c in entrants})
    reports = list(state.reports)
    no_effect = {sha: list(names) for sha, names in state.no_effect.items()}
    trial_lost = {sha: list(names) for sha, names in state.trial_lost.items()}
    for cand in todo:
        if cand.branch in unjudged:
            rt.repo.add_note(cand.sha, unjudged[cand.branch], ref=NOT_JUDGED)
            rt.emit("not_judged", phase=state.phase, branch=cand.branch, reason=unjudged[cand.branch]["reason"])
            continue
        report = failed.get(cand.branch)
        if report is None:
            t0 = time.time()
            try:
                report = rt.agents.backtester.judge(cand, testbed)
            except (RunPaused, GraphBubbleUp):
                raise
            except Exception as err:  # noqa: BLE001 - one candidate must never stop an unattended run
                report = could_not_judge(cand, testbed.main_sha, err, time.time() - t0)
        rt.repo.add_note(cand.sha, report.model_dump(mode="json"), ref="backtest")
        rt.emit("verdict", phase=state.phase, branch=cand.branch, verdict=report.verdict, reasons=report.reasons,
                checks=[ch.model_dump(mode="json") for ch in report.checks], runtime_s=report.runtime_s,
                sandbox=report.sandbox, agent="backtester", model=rt.cfg.agents.role("backtester").model)
        reports = [r for r in reports if r.branch != cand.branch] + [report]
        memory = {"no_effect": no_effect, "trial_lost": trial_lost}.get(not_worth_retrying(report))
        if memory is not None:  # run-level: the Engineer does not propose it again on this main
            seen = memory.setdefault(cand.base_sha, [])
            seen += [cand.intervention] if cand.intervention not in seen else []
    return {"reports": reports, "no_effect": no_effect, "trial_lost": trial_lost}


def _distinct(passed: list[Candidate], replays: dict[str, BacktestReport],
              unjudged: dict[str, dict]) -> list[Candidate]:
    """``passed`` less each candidate whose replay trains exactly as an earlier one's (one ``signature``: the same
    advantages, knobs outside replay, curriculum mix and prompt code, ``judge.checks.training_signature``), which
    gets a ``not_judged`` note naming it: racing both would spend a race slot and a confirmation on one experiment."""
    first: dict[str, str] = {}
    kept = []
    for cand in passed:
        sig = replays[cand.branch].signature
        if sig is not None and sig in first:
            unjudged[cand.branch] = {"reason": f"its replay trains exactly as {first[sig]}'s (the same advantages, "
                                     "knobs, curriculum mix and prompt code), which races for both", "same_as":
                                     first[sig], "signature": sig}
            continue
        if sig is not None:
            first[sig] = cand.branch
        kept.append(cand)
    return kept


def not_worth_retrying(report: BacktestReport) -> str | None:
    """Why a rejected edit is not worth proposing again on the same main: "no_effect" (it changed no training
    update), "trial_lost" (it trained and did not beat main in its confirmation; a trial the trainer could not run
    scored nothing and is no loss), or None.

    An uninformative trial (neither arm changed its answers: ``judge.checks.answers_check``) is no loss either, so the
    Engineer may propose the edit again: the trial measured nothing about it and could not have promoted it, so a
    retry spends none of the run's chance of a false promotion, and from a later checkpoint, or once a repair makes
    training move the policy, the same edit can be judged on its merits. Nor is losing the screen: it lost to another
    candidate on a short, noisy rung, not to main on the merits."""
    failed = {c.name: c for c in report.checks if not c.passed}
    if "effect" in failed:
        return "no_effect"
    if TRIAL in failed and failed[TRIAL].candidate is not None:
        return "trial_lost"
    return None


def route(max_rounds: int, state: RunState) -> str:
    """Back to the Engineer when no candidate of this round passed and rounds are left; else promote. A round passes
    at most one: the race's survivor, when its confirmation cleared superiority (and the Backtester agreed)."""
    passed = any(r.verdict == "promote" for r in state.reports if r.branch in state.round_branches)
    return "engineer" if not passed and state.engineer_round < max_rounds else "promote"
