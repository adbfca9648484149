"""Step 7: the Librarian records outcomes as skills and measures the realized effect of last phase's promotion.

Every backtest verdict of the phase becomes skill evidence; a promotion made after phase N-1 is judged on phase N,
the first phase trained on it (:func:`realized_effect`, stored as the candidate's ``effect`` git note). Then the
phase summary is printed and logged. Router ``route``: stop when the phase budget (read from config each time, so
``evotrainer run --phases N`` holds on resume) is spent, else train the next phase.
"""

from __future__ import annotations

import math
import time

from langgraph.graph import END

from evotrainer.console import summarize
from evotrainer.contracts import PhaseResult, Promotion
from evotrainer.loop.evidence import EvidenceCache
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState
from evotrainer.metrics import wilson
from evotrainer.replay import METRICS
from evotrainer.rollouts import group_stats
from evotrainer.scoring import trained


def realized_effect(evidence: EvidenceCache, promo: Promotion, results: list[PhaseResult]) -> dict:
    """How the promoted edit did in the phase it first trained: the targeted metric and held-out accuracy."""
    before_phase, after_phase = promo.phase, promo.phase + 1
    before = next(r for r in results if r.phase == before_phase)
    after = next(r for r in results if r.phase == after_phase)
    cand = promo.candidate
    metric = cand.target_metric

    def measured(phase: int) -> float | None:
        rows = [{**r, "trained": trained(r)} for r in evidence.rollouts(phase)]
        return METRICS[metric](rows) if metric in METRICS else group_stats(rows).get(metric)

    m0, m1 = measured(before_phase), measured(after_phase)
    a0, a1 = before.eval.accuracy, after.eval.accuracy
    se = math.sqrt(a0 * (1 - a0) / max(before.eval.n, 1) + a1 * (1 - a1) / max(after.eval.n, 1))
    moved = None if m0 is None or m1 is None else (m1 - m0 if cand.direction == "up" else m0 - m1)
    acc_ok = a1 - a0 > -1.96 * se
    won = bool(moved is not None and moved > 0 and acc_ok)
    lo, hi = wilson(a1 * after.eval.n, after.eval.n)
    summary = (f"{metric} {m0:.3f} -> {m1:.3f} ({'as promised' if moved and moved > 0 else 'not as promised'}); "
               f"accuracy {a0:.1%} -> {a1:.1%} (95% CI {lo:.1%}-{hi:.1%}); "
               f"{'win' if won else 'no win'}{accuracy_note(won, a1 - a0, 1.96 * se)}"
               ) if m0 is not None and m1 is not None else "metric not measurable"
    return {"metric": metric, "before": m0, "after": m1, "accuracy_before": a0, "accuracy_after": a1,
            "accuracy_margin": 1.96 * se, "won": won, "summary": summary, "measured_in_phase": after_phase}


def accuracy_note(won: bool, change: float, margin: float) -> str:
    """What a win says about accuracy: a metric that moved as promised is not an accuracy gain unless beyond noise."""
    if not won:
        return ""
    if change > margin:
        return " (accuracy up beyond noise)"
    return " on the targeted metric; the accuracy change is within noise"


def step(rt: Runtime, state: RunState) -> dict:
    lib = rt.agents.librarian
    t0 = time.time()
    diags = {d.id: d for d in state.diagnoses}
    cands = {c.branch: c for c in state.candidates}
    for report in state.reports:
        cand = cands.get(report.branch)
        if cand is not None:
            lib.record_outcome(cand, report, diags.get(cand.diagnosis_id), rt.cfg.domain)
    effects = []
    for promo in [p for p in state.promotions if p.phase == state.phase - 1]:
        effect = realized_effect(rt.evidence, promo, list(state.results))
        rt.repo.add_note(promo.sha, effect, ref="effect")
        lib.record_effect(promo.model_dump(mode="json"), effect, rt.cfg.domain)
        rt.emit("realized_effect", phase=state.phase, branch=promo.branch, **effect)
        effects.append({"branch": promo.branch, **effect})
    rt.emit("node_end", node="librarian", phase=state.phase, agent="librarian", model=rt.cfg.agents.librarian.model,
            outcomes=len(state.reports), effects=[e["branch"] for e in effects], seconds=round(time.time() - t0, 2))
    summary = summarize(state, effects, rt.baseline)
    rt.reporter.phase_summary(summary)
    rt.emit("phase_summary", **summary)
    rt.rd.set_status("running", phase=state.phase, node="librarian",
                     accuracy=[r.eval.accuracy for r in state.results])
    return {}


def route(budget: int, state: RunState) -> str:
    return END if state.phase >= budget else "train"
