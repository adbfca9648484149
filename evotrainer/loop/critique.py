"""Step 3: the Critic decides which diagnoses the evidence supports, or asks for more evidence (bounded).

When the Critic proposes a diagnostics metric, it is validated on earlier phases and, if it holds, merged into main
as a gate (``new_metric.add_metric``; a refused one stays on its branch with the reason).

Router ``route``: back to ``diagnose`` while a diagnosis is still ``proposed`` (a further evidence round), to the
Engineer when one is confirmed, else straight to the Librarian (nothing to fix this phase).
"""

from __future__ import annotations

from evotrainer.loop.diagnose import phase_evidence
from evotrainer.loop.new_metric import add_metric
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState


def step(rt: Runtime, state: RunState) -> dict:
    ev = phase_evidence(rt, state)
    rounds_left = rt.cfg.evolution.max_evidence_rounds - state.evidence_round
    result = rt.agents.critic.critique(list(state.diagnoses), ev, rounds_left)
    rt.emit("node_end", node="critique", phase=state.phase, agent="critic",
            model=rt.cfg.agents.role("critic").model,
            needs_more_evidence=result.needs_more_evidence,
            verdicts={d.id: [d.status, d.critique] for d in result.diagnoses})
    if result.metric is not None:
        add_metric(rt, state.phase, result.metric)
    update: dict = {"diagnoses": result.diagnoses}
    if result.needs_more_evidence:
        update["evidence_round"] = state.evidence_round + 1
    return update


def route(state: RunState) -> str:
    if any(d.status == "proposed" for d in state.diagnoses):
        return "diagnose"
    return "engineer" if any(d.status == "confirmed" for d in state.diagnoses) else "effect"
