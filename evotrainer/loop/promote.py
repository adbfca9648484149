"""Step 6: passing candidates merge into main (``--no-ff``, with trailers); the rest stay on their branches.

:func:`choose` is the promotion policy, a pure function: passing reports in order of their margin (how far the
targeted metric moved beyond its noise floor), at most ``max_promotions`` of them, never two that touch the same
file (each edit reaches main alone, so its effect stays attributable). Held-back branches keep their reason in
the state (``held``). Safe to re-run: an already-merged branch is not merged twice.
"""

from __future__ import annotations

from evotrainer.contracts import BacktestReport, Candidate, Promotion
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState


def margin(report: BacktestReport) -> float:
    """How far the targeted metric moved, in units of its noise floor (0 when it was not measured)."""
    target = next((c for c in report.checks if c.name.startswith(("target:", "pilot:"))), None)
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
    chosen, held = choose(state.reports, candidates, rt.cfg.evolution.max_promotions_per_phase)
    for branch, reason in held.items():
        rt.emit("not_promoted", phase=state.phase, branch=branch, reason=reason)
    promotions = list(state.promotions)
    done = {p.branch for p in promotions}
    for report in chosen:
        if report.branch in done:
            continue
        cand = candidates[report.branch]
        diag = next((d for d in state.diagnoses if d.id == cand.diagnosis_id), None)
        what = f"{cand.diagnosis_id} ({diag.layer}/{diag.failure_mode}) {diag.statement}" if diag else cand.diagnosis_id
        main_sha = rt.repo.promote(
            cand.branch, subject=f"Promote {cand.branch}: {cand.variable}", body=cand.hypothesis,
            trailers={"Diagnosis": what, "Hypothesis": cand.hypothesis, "Variable": cand.variable,
                      "Expected": cand.expected, "Rollback": cand.rollback,
                      "Backtest": f"{report.verdict}: {'; '.join(report.reasons)}", "Candidate": cand.sha},
        )
        promotions.append(Promotion(phase=state.phase, branch=cand.branch, sha=cand.sha, main_sha=main_sha,
                                    candidate=cand, failure_mode=diag.failure_mode if diag else "unknown",
                                    statement=diag.statement if diag else "", backtest=report.reasons))
        rt.emit("promoted", phase=state.phase, branch=cand.branch, main_sha=main_sha, variable=cand.variable)
    return {"promotions": promotions, "held": held}
