"""Step 8: the Librarian records the phase's outcomes as skills (``agents/librarian.py`` keeps them in Chroma).

Every backtest verdict of the phase becomes skill evidence, and so does the realized effect the previous step
measured (the promotion's ``effect`` note): a skill wins only when held-out accuracy moved beyond the paired margin.
Recording is idempotent (a step re-run after a kill, or a phase's waiting round passing twice, counts nothing twice).
Router ``route``: stop when the phase budget (read from config each time, so ``evotrainer run --phases N`` holds on
resume) is spent, else train the next phase. The phase's summary and report are the run's (``evotrainer/run.py``).
"""

from __future__ import annotations

import time

from langgraph.graph import END

from evotrainer.loop import train
from evotrainer.loop.effect import measured_this_phase
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState


def effects(rt: Runtime, state: RunState) -> list[dict]:
    """The realized effects the effect step measured this phase, as their ``effect`` notes ({"branch", **note});
    none in the baselines (keep/discard writes its own verdict into ``Promotion.effect``, and no note)."""
    if rt.cfg.evolution.mode != "evolve":
        return []
    notes = ((p.branch, rt.repo.note(p.sha, ref="effect")) for p in measured_this_phase(state))
    return [{"branch": branch, **note} for branch, note in notes if note]


def step(rt: Runtime, state: RunState) -> dict:
    lib = rt.agents.librarian
    t0 = time.time()
    diags = {d.id: d for d in state.diagnoses}
    cands = {c.branch: c for c in state.candidates}
    for report in state.reports:
        cand = cands.get(report.branch)
        if cand is not None:
            lib.record_outcome(cand, report, diags.get(cand.diagnosis_id), rt.cfg.domain)
    done = effects(rt, state)
    by_branch = {p.branch: p for p in state.promotions}
    for effect in done:
        lib.record_effect(by_branch[effect["branch"]].model_dump(mode="json"), effect, rt.cfg.domain)
    rt.emit("node_end", node="librarian", phase=state.phase, agent="librarian",
            model=rt.cfg.agents.role("librarian").model,
            outcomes=len(state.reports), effects=[e["branch"] for e in done], seconds=round(time.time() - t0, 2))
    return {}


def route(rt: Runtime, state: RunState) -> str:
    """Stop at the budget; else on to the next phase, or first to a round the phase left waiting (a run stopped in
    its last phase's Librarian, then resumed with a raised budget, starts here, not at START)."""
    return END if state.phase >= rt.cfg.phases else train.start(rt, state)
