"""Step 6: passing candidates merge into main (``--no-ff``, with trailers); the rest stay on their branches.

:func:`choose` is the promotion policy, a pure function: passing reports in order of their margin (a confirmation's
gain over the gain it needed; with trials off, how far the targeted metric moved beyond its noise floor), at most
``max_promotions`` of them, never two that touch the same file (each edit reaches main alone, so its effect stays
attributable). A round passes at most one report (the race's confirmed survivor; with trials off, the first to
pass), and the backtest step routes here as soon as one passed (``loop/backtest.py``). Held-back branches keep their reason in
the state (``held``). Safe to re-run: an already-merged branch is not merged twice. With ``gates: [before_promote]``
a person approves, revises (router ``route``: back to the Engineer) or aborts first (``gate.py``).
"""

from __future__ import annotations

from evotrainer.contracts import BacktestReport, Candidate, Promotion
from evotrainer.harness.repo import RevertConflict
from evotrainer.judge.checks import trial_of
from evotrainer.loop import gate, resume
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState


def undo(rt: Runtime, promo: Promotion, phase: int, subject: str, body: str, trailers: dict[str, str]) -> Promotion:
    """Revert a promotion by a new commit on main: the promotion with its ``reverted_sha``. When git cannot (a later
    promotion changed the same lines), main keeps the edit, the promotion's effect says why, a ``rollback_failed``
    event is emitted, and the run goes on."""
    try:
        return promo.model_copy(update={"reverted_sha": rt.repo.revert(promo.main_sha, subject, body, trailers)})
    except RevertConflict as err:
        rt.emit("rollback_failed", phase=phase, branch=promo.branch, error=str(err))
        return promo.model_copy(update={"effect": f"{promo.effect}; not reverted: {err}"})


def margin(report: BacktestReport) -> float:
    """How clearly the candidate won: its trial gain over the trial's margin when a trial decided, else how far the
    targeted metric moved in units of its noise floor (0 when nothing was measured)."""
    trial = trial_of(report)
    if trial is not None and None not in (trial.base, trial.candidate, trial.threshold):
        return (trial.candidate - trial.base) / max(trial.threshold - trial.base, 1e-3)
    target = next((c for c in report.checks if c.name.startswith("target:")), None)
    if target is None or target.base is None or target.candidate is None:
        return 0.0
    return abs(target.candidate - target.base) / (report.noise_floor or 1e-3)


def choose(reports: list[BacktestReport], candidates: dict[str, Candidate], max_promotions: int
           ) -> tuple[list[BacktestReport], dict[str, str]]:
    """(reports to promote, in order; {branch: why a passing one is held back})."""
    chosen: list[BacktestReport] = []
    held: dict[str, str] = {}
    touched: set[str] = set()
    for report in sorted((r for r in reports if r.verdict == "promote"), key=margin, reverse=True):
        files = set(candidates[report.branch].files)
        if len(chosen) >= max_promotions:
            held[report.branch] = f"max_promotions_per_phase={max_promotions} reached"
        elif touched & files:
            held[report.branch] = "touches a file already changed"
        else:
            chosen.append(report)
            touched |= files
    return chosen, held


def step(rt: Runtime, state: RunState) -> dict:
    candidates = {c.branch: c for c in state.candidates}
    reports = [r for r in state.reports if r.branch not in state.withdrawn]
    chosen, held = choose(reports, candidates, rt.cfg.evolution.max_promotions_per_phase)
    chosen, held, feedback = gate.review(rt, state, chosen, held)  # the human gate, when configured
    if feedback:  # a person asked for a revision: back to the Engineer, these branches withdrawn
        sent_back = [b for b, why in held.items() if why.startswith(gate.SENT_BACK)]
        return {"held": held, "feedback": feedback, "withdrawn": [*state.withdrawn, *sent_back]}
    for branch, reason in held.items():
        rt.emit("not_promoted", phase=state.phase, branch=branch, reason=reason)
    promotions, starts = list(state.promotions), dict(state.starts)
    done = {p.branch for p in promotions}
    for report in chosen:
        if report.branch in done:
            continue
        cand = candidates[report.branch]
        diag = next((d for d in state.diagnoses if d.id == cand.diagnosis_id), None)
        what = f"{cand.diagnosis_id} ({diag.layer}/{diag.failure_mode}) {diag.statement}" if diag else cand.diagnosis_id
        moved = resume.plan(rt, state, report)  # where the next phase trains from, said in the merge commit
        main_sha = rt.repo.promote(
            cand.branch, subject=f"Promote {cand.branch}: {cand.variable}", body=cand.hypothesis,
            trailers={"Diagnosis": what, "Hypothesis": cand.hypothesis, "Variable": cand.variable,
                      "Expected": cand.expected, "Rollback": cand.rollback,
                      "Backtest": f"{report.verdict}: {'; '.join(report.reasons)}", "Candidate": cand.sha,
                      **({"Trains-From": moved["why"]} if moved else {})},
        )
        promotions.append(Promotion(phase=state.phase, branch=cand.branch, sha=cand.sha, main_sha=main_sha,
                                    candidate=cand, failure_mode=diag.failure_mode if diag else "unknown",
                                    statement=diag.statement if diag else "", backtest=report.reasons))
        rt.emit("promoted", phase=state.phase, branch=cand.branch, main_sha=main_sha, variable=cand.variable)
        starts = resume.record(rt, state, starts, moved)  # announced once the merge is made
    return {"promotions": promotions, "held": held, "starts": starts}


def route(state: RunState) -> str:
    """Back to the Engineer when a person asked for a revision at the gate, else on to the Librarian."""
    return "engineer" if state.feedback else "effect"
