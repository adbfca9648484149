"""Backtest: judge a candidate harness against ``main`` by replaying both on retained rollouts, in the sandbox.

Main is replayed once per phase (:class:`Baseline`, kept by the loop's evidence cache) and every candidate is
compared with it (``replay.py`` does the replaying). Harness code never sees ``verified``; the checks below
compare its decisions with it:

    self_tests            the candidate's own harness tests pass (separate process, time limit), but for those
                          that fail on main too (``Baseline.failing``)
    knobs_valid           harness.yaml is well-formed
    reward_pentest        the reward pays none of the domain's null probes (``judge.pentest``), but for those main's
                          reward pays too, by as much (``Baseline.pentest``)
    ordering_violations   inside groups, verified-correct rollouts are not ranked below wrong ones more than on main
    reward_verified_auc   the reward separates correct from wrong at least as well as main's
    target:<metric>       moves in the promised direction by more than the noise floor (1.96 x the bootstrap
                          standard deviation of main's value over resampled groups); decides only without trials
    verified_dropped      verified-correct rollouts are not filtered or truncation-masked away more than on main
    diagnostic:<name>     every diagnostic registered on main stays within its alert threshold
    replay_time           the replay stays within its time budget
    effect                the edit changes training updates (else rejected as "no effect", before any trial)
    trial:probe_accuracy  the decision (with trials on): the race's confirmation (``loop/backtest.py`` runs the race:
                          a screen by successive halving, then its survivor's confirmation at seeds the screen did not
                          use). From the current checkpoint main and the candidate train the same short budget with
                          the same seeds and tasks; the candidate's accuracy gain on the dev split's probe, paired per
                          task and seed, must clear zero at the phase's level (``phase_level``: 95% at the defaults,
                          one confirmation a round; a trial the trainer could not run fails it with the trainer's
                          words and no accuracy): superiority, whatever the edit moved (:func:`confirm`)
    trial:answers_changed instead of the decision: neither arm changed at least ``MIN_ANSWERS_CHANGED`` (1%) of its
                          probe answers since the checkpoint both trained from, so the trial is uninformative and
                          promotes nothing, whatever its gain (:func:`answers_check`)
    trial:sandbox_attempts  instead of the decision: while training in its trial arms, the candidate's harness code
                          tried a forbidden operation main's did not (named; :func:`new_attempts`)
    race:screen           the screen's word on an entrant (``loop/backtest.py``): failed, the rung it lost at and its
                          paired gain over main; passed, it won the screen and went on to its confirmation
    safety checks         harness_tree, variable, prompts, ... (``safety.py``, which lists them)

With trials on, the targeted metric does not decide at all: every edit moves its own target by construction (a group
filter its kept share, a graded reward component the share of dead groups), so a target that moved is no evidence that
the edit helps, and only a gain on the probe promotes. This module computes the
checks; the Backtester agent turns them into a verdict. When judging a candidate raises all the same (a case no
check foresaw), :func:`could_not_judge` is the last resort: a rejection with one failed check ``judge`` and the
reason "could not judge: <one line>", so the run goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from evotrainer.config import BacktestConfig, EvolutionConfig, SandboxConfig
from evotrainer.contracts import BacktestReport, Candidate, Check
from evotrainer.domains.execute import ExecLimits
from evotrainer.harness.knobs import Knobs, KnobsError, read_knobs
from evotrainer.harness.repo import HarnessRepo
from evotrainer.judge.arbitrate import Arbiter
from evotrainer.judge.pentest import CHECK as PENTEST, Pentest, bar, pentest
from evotrainer.judge.replay import METRICS, mixed, noise_floor, registry, replay
from evotrainer.judge.safety import attempts_check, safety_checks
from evotrainer.rollouts import SPREAD_EPS
from sandbox import HarnessError, HarnessWorker, run_selftest


@dataclass
class Baseline:
    """Main, exported and replayed once on the retained rollouts: what every candidate of a phase is compared with.
    ``worker`` (main's sandbox) also evaluates main's diagnostics on a candidate's replayed rows."""

    sha: str
    dir: Path
    worker: HarnessWorker
    rollouts: list[dict]
    tasks: dict[str, dict]
    _replay: dict | None = None
    _failing: set[str] | None = None
    _pentest: Pentest | bool | None = None  # False: main's reward cannot be scored (tried once)

    @property
    def replay(self) -> dict:
        if self._replay is None:
            self._replay = replay(self.worker, self.dir, self.rollouts, self.tasks)
        return self._replay

    @property
    def failing(self) -> set[str]:
        """Main's own tests that fail on main: no candidate's fault (a first harness whose test already fails would
        otherwise reject every edit). Empty when main's tests cannot be run at all (each candidate's then say why)."""
        if self._failing is None:
            try:
                self._failing = {f["name"] for f in self.worker.selftest()["failed"]}
            except HarnessError:
                self._failing = set()
        return self._failing

    def pentest(self, domain: str, executor: ExecLimits | None) -> Pentest | None:
        """Main's own reward pentest (``judge.pentest``): a null probe main already pays is no candidate's doing (a
        first harness with a leaky reward would otherwise reject every edit but a repair of that leak). None when
        main's reward cannot be scored (each candidate is then held to the whole pentest)."""
        if self._pentest is None:
            try:
                self._pentest = _run_pentest(self.worker, self.dir, domain, executor)
            except (HarnessError, KnobsError, ValueError):
                self._pentest = False
        return self._pentest or None


@contextlib.contextmanager
def harness_worker(repo: HarnessRepo, sha: str, sandbox: SandboxConfig, hide: list[str]
                   ) -> Iterator[tuple[Path, HarnessWorker]]:
    """The harness at ``sha`` exported to a temporary folder, and a sandbox worker on it, while the block runs."""
    tmp = Path(tempfile.mkdtemp(prefix="evo-harness-"))
    try:
        path = repo.export(sha, tmp / "harness")
        with HarnessWorker(path, limits=sandbox.limits, backend=sandbox.backend, image=sandbox.image,
                           hide=hide) as worker:
            yield path, worker
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _diag_checks(main_registry: dict, cand_values: dict) -> list[Check]:
    checks = []
    for name, spec in sorted(main_registry.items()):
        if spec.get("error"):
            continue
        base = spec.get("value")
        cand = (cand_values.get(name) or {}).get("value")
        lo, hi = spec.get("min"), spec.get("max")
        if cand is None:
            checks.append(Check(name=f"diagnostic:{name}", base=base, passed=False,
                                detail=(cand_values.get(name) or {}).get("error") or "not computed"))
            continue

        def within(v):
            return (lo is None or v >= lo) and (hi is None or v <= hi)

        # outside the bounds on main already: the candidate must not be further out on the side main is
        ok = within(cand) or (base is not None and not within(base) and
                              (cand <= base if hi is not None and base > hi else cand >= base))
        checks.append(Check(name=f"diagnostic:{name}", base=base, candidate=cand,
                            threshold=hi if hi is not None else lo, passed=ok,
                            detail="" if ok else f"outside its alert threshold (min {lo}, max {hi})"))
    return checks


def _run_pentest(worker: HarnessWorker, harness_dir: Path, domain: str, executor: ExecLimits | None) -> Pentest:
    from evotrainer.domains import get_domain

    return pentest(worker, read_knobs(harness_dir), get_domain(domain, executor))


def _pentest_check(worker: HarnessWorker, harness_dir: Path, domain: str, executor: ExecLimits | None,
                   base: Baseline | None = None) -> Check:
    """The reward pentest (``judge.pentest``) as a replay check: a reward that pays a null probe fails it, unless
    main's reward (``base.pentest``, run only then) pays that probe too, by at least as much over its bar: the
    candidate did not make it."""
    try:
        result = _run_pentest(worker, harness_dir, domain, executor)
    except (HarnessError, KnobsError, ValueError) as err:
        return Check(name=PENTEST, passed=False, detail=f"the pentest could not score the reward: {err}")
    main = base.pentest(domain, executor) if base is not None and result.failed else None

    def over(p: Pentest, probe: str) -> float:  # how far a probe's pay clears the bar of its reward
        return p.probes[probe] - bar(p.reference)

    inherited = {p for p in result.failed if main and p in main.failed and over(result, p) <= over(main, p) + 1e-9}
    new = [p for p in result.failed if p not in inherited]
    detail = Pentest(result.reference, result.probes, new).detail()
    if inherited:
        excused = f"paid on main too, not counted: {', '.join(sorted(inherited))}"
        detail = f"{detail}; {excused}" if new else f"no null probe is paid that main's reward does not pay ({excused})"
    top = max(result.probes.values())
    return Check(name=PENTEST, base=result.reference, candidate=top, threshold=round(bar(result.reference), 6),
                 passed=not new, detail=detail[:500])


def _self_tests(tests: dict, failing_on_main: set[str]) -> Check:
    """The candidate's own tests pass, but for those that fail on main too (``Baseline.failing``: not its doing)."""
    failed = [f for f in tests["failed"] if f["name"] not in failing_on_main]
    also = sorted(f["name"] for f in tests["failed"] if f["name"] in failing_on_main)
    said = "; ".join(f"{f['name']}: {f['error']}" for f in failed) or f"{len(tests['passed'])} passed"
    return Check(name="self_tests", base=None, candidate=float(len(tests["passed"])), threshold=float(tests["n"]),
                 passed=not failed and tests["n"] > 0,
                 detail=(said + (f"; failing on main too, not counted: {', '.join(also)}" if also else ""))[:500])


def judge(repo: HarnessRepo, candidate: Candidate, base: Baseline, *, settings: BacktestConfig,
          sandbox: SandboxConfig, hide: list[str], domain: str = "math",
          executor: ExecLimits | None = None) -> BacktestReport:
    """Every replay check of ``candidate`` against main (``base``) on the base's rollouts; verdict by all-pass.

    The candidate's self-tests run first, in a sandbox process of their own limited to ``settings.test_timeout_s``,
    then the reward pentest on ``domain``'s null probes (``judge.pentest``: a reward that pays a completion that
    answers nothing is rejected before it trains). With trials on (``settings.trial_steps > 0``) these are the
    safety checks and the "effect" check; the decision is the A/B trial's (:func:`trial_check`, added with
    :func:`with_check`). With trials off, the targeted metric moving beyond its noise floor on replay decides.
    """
    t0 = time.time()
    checks: list[Check] = []
    noise, signature = 0.0, None
    with harness_worker(repo, candidate.sha, sandbox, hide) as (cand_dir, wc):
        sandbox_name = wc.backend
        try:
            read_knobs(cand_dir)
            checks.append(Check(name="knobs_valid", passed=True))
        except KnobsError as err:
            checks.append(Check(name="knobs_valid", passed=False, detail=str(err)))
        arbiter = Arbiter(base.worker, Path(base.dir), wc, cand_dir, domain, executor)
        try:
            limits = sandbox.limits.model_copy(update={"call_timeout_s": settings.test_timeout_s})
            tests = run_selftest(cand_dir, limits=limits, backend=sandbox.backend, hide=hide)
            checks.append(_self_tests(tests, base.failing))
        except HarnessError as err:
            checks.append(Check(name="self_tests", passed=False, detail=str(err)))
        checks.append(_pentest_check(wc, cand_dir, domain, executor, base))
        checks += safety_checks(repo, candidate, base, cand_dir, wc, settings=settings, sandbox=sandbox, hide=hide,
                                arbiter=arbiter)
        if all(c.passed for c in checks):
            try:
                main = base.replay
                cand = replay(wc, cand_dir, base.rollouts, base.tasks)
            except HarnessError as err:
                checks.append(Check(name="replay", passed=False, detail=str(err)))
            else:
                checks.append(Check(name="replay", passed=True, detail=f"{len(base.rollouts)} rollouts"))
                noise, more = _metric_checks(main, cand, candidate, settings.bootstrap,
                                             settings.alignment_tolerance, decisive_target=settings.trial_steps == 0)
                checks += more
                checks += _diag_checks(main["registry"], registry(base.worker, cand["rows"], base.tasks))
                checks.append(effect_check(main, cand, candidate))
                signature = training_signature(cand, repo.read(candidate.sha, "prompt.py"))
    runtime = time.time() - t0
    checks.append(Check(name="replay_time", candidate=round(runtime, 2), threshold=settings.time_budget_s,
                        passed=runtime <= settings.time_budget_s))
    reasons = [f"{c.name}: {c.detail or _describe(c)}" for c in checks if not c.passed]
    return BacktestReport(
        branch=candidate.branch, candidate_sha=candidate.sha, base_sha=base.sha,
        target_metric=candidate.target_metric, checks=checks, noise_floor=round(noise, 6),
        verdict="promote" if not reasons else "reject",
        reasons=reasons or [_summary(checks, candidate)], runtime_s=round(runtime, 2), rollouts=len(base.rollouts),
        sandbox=sandbox_name, signature=signature,
    )


def run_backtest(repo: HarnessRepo, candidate: Candidate, rollouts: list[dict], tasks: dict[str, dict], *,
                 main_sha: str, settings: BacktestConfig, sandbox: SandboxConfig, hide: list[str],
                 domain: str = "math", executor: ExecLimits | None = None) -> BacktestReport:
    """The replay checks of one candidate against ``main_sha`` on ``rollouts`` (main replayed for this call)."""
    with harness_worker(repo, main_sha, sandbox, hide) as (path, worker):
        base = Baseline(sha=main_sha, dir=path, worker=worker, rollouts=rollouts, tasks=tasks)
        return judge(repo, candidate, base, settings=settings, sandbox=sandbox, hide=hide, domain=domain,
                     executor=executor)


def _metric_checks(base: dict, cand: dict, candidate: Candidate, bootstrap: int, tolerance: float,
                   decisive_target: bool = True) -> tuple[float, list[Check]]:
    b_rows, c_rows = base["rows"], cand["rows"]
    checks = []
    for name, worse in (("ordering_violations", "up"), ("reward_verified_auc", "down")):
        bv = METRICS[name](b_rows)
        cv = METRICS[name](c_rows)
        ok = cv <= bv + tolerance if worse == "up" else cv >= bv - tolerance
        checks.append(Check(name=name, base=round(bv, 4), candidate=round(cv, 4),
                            threshold=round(bv + tolerance if worse == "up" else bv - tolerance, 4), passed=ok,
                            detail="" if ok else "reward agrees less with the verifier than on main"))
    bv = METRICS["verified_dropped"](b_rows)
    cv = METRICS["verified_dropped"](c_rows)
    ok = cv <= bv + 1e-9
    checks.append(Check(name="verified_dropped", base=round(bv, 4), candidate=round(cv, 4), threshold=round(bv, 4),
                        passed=ok, detail="" if ok else "verified-correct rollouts would stop training toward "
                        "themselves (filtered, masked or outscored)"))
    target = candidate.target_metric
    if target not in METRICS:
        checks.append(Check(name=f"target:{target}", passed=not decisive_target,
                            detail="cannot be measured on retained rollouts" + (
                                "" if decisive_target else " (informational: the A/B trial decides)")))
        return 0.0, checks
    stat = METRICS[target]
    # a curriculum edit changes which levels train: weigh each side's rows by its own level mix (main's
    # configured mix, not the rows' empirical one, so sampling luck is not credited to the candidate)
    b_mix, c_mix = (base["mix"], cand["mix"]) if cand["mix"] != base["mix"] else (None, None)
    bv = mixed(b_rows, stat, b_mix)
    cv = mixed(c_rows, stat, c_mix)
    noise = noise_floor(b_rows, target, b_mix, bootstrap)
    gain = (cv - bv) if candidate.direction == "up" else (bv - cv)
    moved = gain > noise and gain > SPREAD_EPS
    detail = "" if moved else f"moved {gain:+.4f} in the promised direction; noise floor {noise:.4f}"
    if not decisive_target:
        detail = f"{'moved as promised' if moved else detail} (informational: the A/B trial decides)"
    checks.append(Check(name=f"target:{target}", base=round(bv, 4), candidate=round(cv, 4),
                        threshold=round(bv + noise if candidate.direction == "up" else bv - noise, 4),
                        passed=moved or not decisive_target, detail=detail))
    return noise, checks


# the knobs a replay on fixed completions applies (reward weights, advantage scaling, the truncation mask; the
# curriculum through its mix, compared apart): every other knob acts where replay cannot see it (sampling, the
# generated batch, the turn cap, the optimizer), so a candidate that changes one is never "no effect". Derived, not
# listed: a new knob counts as acting outside replay until replay applies it (max_turns was once missed by a list).
# oversample is one: training generates more groups to refill from, which retained rollouts do not hold.
_REPLAYED_KNOBS = ("reward_weights", "scale_rewards", "mask_truncated_completions", "curriculum_weights")
_TRAINING_KNOBS = tuple(k for k in Knobs.model_fields if k not in _REPLAYED_KNOBS)


def _signal(rows: list[dict], beta: float) -> dict:
    """What a replay says training updates with: (group, sample) -> the advantage of each rollout that trains with a
    non-zero advantage (with a KL term, beta > 0, every trained one)."""
    return {(r["group_id"], r["sample_idx"]): round(r["advantage"], 5) for r in rows
            if r["trained"] and (beta > 0 or abs(r["advantage"]) > 1e-6)}


def training_signature(replayed: dict, prompt_code: str | None) -> str | None:
    """A short hash of everything a candidate's replay says training does with it: the advantages its rollouts train
    with (:func:`_signal`), the knobs that act outside replay, the curriculum's mix after the last phase and after a
    phase unlike it, and prompt.py's text (``prompt_code``). Two candidates with one signature run the same training
    whatever their files say (a level given weight in harness.yaml, or by curriculum code that reads no history), so
    racing both would judge one experiment twice (``loop.backtest.step`` races the first). None when the curriculum
    could not be asked about the other phase: such a candidate is never taken for another."""
    if replayed.get("mix_turned") is None:
        return None
    knobs = replayed["knobs"]
    payload = json.dumps({"signal": sorted(_signal(replayed["rows"], knobs.beta).items()),
                          "knobs": {k: getattr(knobs, k) for k in _TRAINING_KNOBS},
                          "mix": replayed["mix"], "mix_turned": replayed["mix_turned"], "prompt": prompt_code},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def effect_check(main: dict, cand: dict, candidate: Candidate) -> Check:
    """Does the edit change training updates? Rejected as "no effect" when it does not.

    On the replayed rollouts, the rollouts that train with a non-zero advantage and those advantages are the same as
    main's (rows that train with zero advantage add no policy gradient, and a loss that only changes scale is
    undone by Adam's normalisation and gradient clipping), no knob that acts outside replay differs, the
    curriculum's mix is the same and prompt.py is untouched. With a KL term (beta > 0) every trained row counts.
    """
    kb, kc = main["knobs"], cand["knobs"]
    base, new = _signal(main["rows"], kb.beta), _signal(cand["rows"], kc.beta)
    changed = sum(base.get(k) != new.get(k) for k in base.keys() | new.keys())
    knobs = [k for k in _TRAINING_KNOBS if getattr(kb, k) != getattr(kc, k)]
    if knobs or main["mix"] != cand["mix"] or "prompt.py" in candidate.files:
        why = f"changes {', '.join(knobs)}" if knobs else ("changes the curriculum's mix" if main["mix"] !=
                                                            cand["mix"] else "changes the prompts")
        return Check(name="effect", base=float(len(base)), candidate=float(changed), passed=True,
                     detail=f"{why}; {changed} replayed rollouts train differently")
    return Check(name="effect", base=float(len(base)), candidate=float(changed), passed=changed > 0,
                 detail=f"{changed} rollouts train differently" if changed else
                 "no effect: every rollout would train with the same advantage as on main (at most the loss's "
                 "scale changes, which Adam's normalisation and gradient clipping undo)")


TRIAL = "trial:probe_accuracy"  # the decision's check
TRIAL_ATTEMPTS = "trial:sandbox_attempts"  # instead of the decision: the candidate's code misbehaved while it trained
TRIAL_ANSWERS = "trial:answers_changed"  # instead of the decision: neither arm's answers moved, so it measured nothing

# The least share of the probe's answers (per task and seed) that one arm of a trial must have changed since the
# checkpoint both arms trained from for the trial to say anything (issue 40). Below it in both arms, the arms differ
# from each other on at most twice that share of the probe: a handful of discordant tasks then make the whole paired
# interval, which the bootstrap gets wrong where so few disagree (with none it is 0 to 0, whatever the edit is worth),
# and training that moved so few answers has not run long enough to show what the edit does to the policy.
MIN_ANSWERS_CHANGED = 0.01


def trial_of(report: BacktestReport) -> Check | None:
    """The report's A/B trial check (the decision, its attempts check, an uninformative trial's, or a trial the trainer
    could not run), or None when no trial ran: what a promotion's margin reads."""
    return next((c for c in report.checks if c.name in (TRIAL, TRIAL_ATTEMPTS, TRIAL_ANSWERS)), None)


def answers_changed(start: dict[str, str], probes: list) -> float | None:
    """The share of (probe task, seed) pairs whose answer (``EvalResult.answers``, a fingerprint) differs from
    ``start``'s, over one arm's ``probes`` (one EvalResult per seed); None when an answer is missing on either side
    (nothing can be told then)."""
    pairs = [(start.get(task), answer) for probe in probes for task, answer in probe.answers.items()]
    if not pairs or any(probe.n and len(probe.answers) < probe.n for probe in probes) or \
            any(before is None for before, _ in pairs):
        return None
    return sum(before != after for before, after in pairs) / len(pairs)


def answers_check(start: dict[str, str] | None, main_runs: list, cand_runs: list) -> Check:
    """Did training change the policy's answers at all? Passed when either arm changed at least
    :data:`MIN_ANSWERS_CHANGED` of its probe answers (per task and seed) since the checkpoint both arms trained from
    (``start``: that checkpoint's answers on the dev split); else the trial is uninformative and promotes nothing,
    whatever its point gain. Failed, and said so, when the answers were not recorded (a trial that cannot show it
    measured anything promotes nothing either)."""
    main = answers_changed(start or {}, main_runs)
    cand = answers_changed(start or {}, cand_runs)
    if main is None or cand is None:
        return Check(name=TRIAL_ANSWERS, passed=False, detail="uninformative: cannot tell whether training changed "
                     "any probe answer (the answers of the checkpoint both arms started from, or of an arm, were not "
                     "recorded)")
    ok = max(main, cand) >= MIN_ANSWERS_CHANGED
    said = (f"main changed {main:.1%} and the candidate {cand:.1%} of probe answers since the start; at least "
            f"{MIN_ANSWERS_CHANGED:.0%} needed")
    return Check(name=TRIAL_ANSWERS, base=round(main, 4), candidate=round(cand, 4), threshold=MIN_ANSWERS_CHANGED,
                 passed=ok, detail=said if ok else f"uninformative: {said}")


def uninformative(report: BacktestReport) -> bool:
    """Whether the report's trial measured nothing (:func:`answers_check` failed): no verdict on the merits."""
    return any(c.name == TRIAL_ANSWERS and not c.passed for c in report.checks)


def trial_check(main_runs: list, cand_runs: list, resamples: int = 2000, level: float = 0.95) -> Check:
    """The A/B decision: the candidate's gain in probe accuracy over main, paired per task and per seed, must clear
    zero at ``level`` (the lower end of the paired bootstrap interval above 0: superiority). The loop passes the level
    that holds the false-promotion rate per round (:func:`round_level`). There is no lenient path: an interval of 0 to
    0 (two arms that answer alike) does not clear zero, and an edit that moved its own target on replay needs the same
    gain as any other (every edit moves its own target by construction)."""
    from evotrainer.metrics import paired_gain

    gain = paired_gain([(m.items, c.items) for m, c in zip(main_runs, cand_runs)], resamples=resamples, level=level)
    main_acc = sum(m.accuracy for m in main_runs) / len(main_runs)
    cand_acc = sum(c.accuracy for c in cand_runs) / len(cand_runs)
    ok = gain["low"] > 0
    return Check(name=TRIAL, base=round(main_acc, 4), candidate=round(cand_acc, 4),
                 threshold=round(main_acc + gain["diff"] - gain["low"], 4),
                 passed=ok, detail=f"gain {gain['diff']:+.4f} ({_pct(level)} CI {gain['low']:+.4f} to "
                 f"{gain['high']:+.4f}, {gain['n']} probe tasks x {len(main_runs)} seed(s), paired)"
                 + ("" if ok else ": does not clear zero"))


def round_level(rate: float, trials: int) -> float:
    """The level of each decision's interval so that ``trials`` decisions, none of whose candidates can help, promote
    one with probability at most ``rate`` (Bonferroni: any of them may pass)."""
    return 1 - rate / max(1, trials)


def confirmations_per_phase(evolution: EvolutionConfig) -> int:
    """The most decisions one phase's evolution can make: one confirmation per Engineer round
    (``evolution.max_engineer_rounds``), however many candidates raced. The screen's choice among a round's entrants
    needs no share of the rate: the survivor is confirmed on seeds the screen did not use (both arms), so under the
    null its confirmation passes no more often than any one trial would, the screen's winner's curse staying in the
    screen. (Its probe tasks are the screen's: the decision is about the dev split's probe, as every trial's is.)
    The one count the confirmation's level (:func:`round_level`), the Backtester and the A/A benchmark use."""
    return evolution.max_engineer_rounds


def phase_level(evolution: EvolutionConfig, backtest: BacktestConfig) -> float:
    """Each confirmation's level at this configuration: ``backtest.false_promotion_rate`` over
    :func:`confirmations_per_phase` (95% at the defaults, 97.5% with 2 Engineer rounds)."""
    return round_level(backtest.false_promotion_rate, confirmations_per_phase(evolution))


def _pct(level: float) -> str:
    return f"{level:.1%}".replace(".0%", "%")


def new_attempts(main_pilots: list, cand_pilots: list) -> Check | None:
    """The check that rejects a candidate whose harness code tried a forbidden operation while it trained in its arms
    (``PilotResult.sandbox_attempts``), one main's own code did not make in its arms (named; code may behave in the
    replay and not in training); None when it tried nothing new. The race's screen and its confirmation both ask."""
    def seen(pilots: list) -> dict[tuple, dict]:
        return {(a["kind"], a["what"], a.get("where", "")): a for p in pilots for a in p.sandbox_attempts}

    inherited = seen(main_pilots)
    new = [a for key, a in seen(cand_pilots).items() if key not in inherited]
    return attempts_check(new, TRIAL_ATTEMPTS) if new else None


def trial_verdict(main_pilots: list, cand_pilots: list, level: float = 0.95, start: dict[str, str] | None = None
                  ) -> Check:
    """The trial's check from both arms' pilots (``PilotResult``): a candidate whose code tried a forbidden operation
    while it trained is rejected for that (:func:`new_attempts`); then a trial in which neither arm changed its
    answers since ``start`` (the answers of the checkpoint both trained from) is uninformative
    (:func:`answers_check`), whatever its gain; otherwise the paired A/B decision (``trial_check``), which also says
    how many answers each arm changed."""
    attempts = new_attempts(main_pilots, cand_pilots)
    if attempts is not None:
        return attempts
    main, cand = [p.probe for p in main_pilots], [p.probe for p in cand_pilots]
    moved = answers_check(start, main, cand)
    decision = trial_check(main, cand, level=level)
    if not moved.passed:
        gain = decision.detail.split(":")[0]  # what the decision would have said: for the reader only
        return moved.model_copy(update={"detail": f"{moved.detail} (the trial's {gain})"})
    return decision.model_copy(update={"detail": f"{decision.detail}; {moved.detail}"})


def confirm(pair: Callable[[int], tuple], replicates: range, level: float = 0.95, start: dict[str, str] | None = None
            ) -> tuple[Check, list, list]:
    """The race's confirmation rule, seed by seed: ``pair(replicate)`` trains and returns (main's pilot, the
    candidate's) at each of ``replicates`` (the loop's :class:`Testbed` and the A/A benchmark give theirs); the check
    is :func:`trial_verdict`'s at ``level``. After each seed but the last, a candidate that misbehaved, whose trial is
    uninformative so far, or that has not gained on main at all (its paired point estimate at most 0) stops there: a
    futility stop, which can only turn a promotion into a rejection, so the level holds. (check, main's pilots, the
    candidate's pilots)."""
    main: list = []
    cand: list = []
    for replicate in replicates:
        arms = pair(replicate)
        main.append(arms[0])
        cand.append(arms[1])
        verdict = trial_verdict(main, cand, level, start)
        if len(cand) < len(replicates) and (verdict.name != TRIAL or verdict.candidate <= verdict.base):
            why = ": no gain on main (futility stop)" if verdict.name == TRIAL else ""
            verdict = verdict.model_copy(update={"detail": f"{verdict.detail}; stopped after {len(cand)} of "
                                                 f"{len(replicates)} seeds{why}"})
            break
    return verdict, main, cand


def with_check(report: BacktestReport, check: Check) -> BacktestReport:
    """``report`` with one more check, its verdict and reasons recomputed (all checks must pass)."""
    checks = [c for c in report.checks if c.name != check.name] + [check]
    reasons = [f"{c.name}: {c.detail or _describe(c)}" for c in checks if not c.passed]
    return report.model_copy(update={"checks": checks, "verdict": "reject" if reasons else "promote",
                                     "reasons": reasons or [f"all {len(checks)} checks passed; {check.name}: "
                                                            f"{check.detail}"]})


def one_line(err: BaseException) -> str:
    """An exception as one readable line: git's own complaint for a git error, else ``Type: first line``."""
    import git

    if isinstance(err, git.InvalidGitRepositoryError):
        return f"{err}: not a git repository"
    if isinstance(err, git.NoSuchPathError):
        return f"{err}: no such folder"
    if isinstance(err, git.GitCommandError):
        said = [ln.strip().strip("'").removeprefix("fatal: ").removeprefix("error: ")
                for ln in str(err.stderr or "").replace("stderr:", "").splitlines()]
        said = [ln for ln in said if ln]
        cmd = err.command[:2] if isinstance(err.command, (list, tuple)) else str(err.command).split()[:2]
        return f"{' '.join(map(str, cmd))} failed (exit {err.status})" + (f": {said[-1]}" if said else "")
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def could_not_judge(candidate: Candidate, base_sha: str, err: Exception, runtime_s: float = 0.0,
                    sandbox: str = "") -> BacktestReport:
    """The last-resort verdict when judging ``candidate`` raised ``err``: rejected, "could not judge: <one line>"."""
    why = f"could not judge: {one_line(err)}"[:500]
    return BacktestReport(branch=candidate.branch, candidate_sha=candidate.sha, base_sha=base_sha,
                          target_metric=candidate.target_metric, checks=[Check(name="judge", passed=False, detail=why)],
                          noise_floor=0.0, verdict="reject", reasons=[why], runtime_s=round(runtime_s, 2), rollouts=0,
                          sandbox=sandbox)


def _describe(c: Check) -> str:
    return f"{c.base} -> {c.candidate} (threshold {c.threshold})"


def _summary(checks: list[Check], candidate: Candidate) -> str:
    target = next((c for c in checks if c.name.endswith(candidate.target_metric)), None)
    moved = f"; {candidate.target_metric} {target.base} -> {target.candidate}" if target else ""
    return f"all {len(checks)} checks passed{moved}"
