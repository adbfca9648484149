"""Step 2: the Diagnostician reads the phase's evidence and says what is failing, with evidence.

It reads the phase just trained (and, in a further evidence round, earlier phases trained on the same harness),
the run's results, main's diagnostics registry and knobs (:func:`phase_evidence`, which the Critic reads too),
and returns Diagnoses. With an LLM Diagnostician, the built-in rules read the same evidence beside it
(:func:`rules_beside`): what they flag and the model did not name still reaches the Critic, marked as the rules'
(``Diagnosis.source``), and the run's log says the role missed it, so what the evidence shows is never lost
silently whichever model runs the role.
"""

from __future__ import annotations

import time

from agents.roles import PhaseEvidence
from evotrainer.contracts import Diagnosis
from evotrainer.domains import get_domain
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState, start_of
from evotrainer.rundir import RunDir


def phases_in_view(state: RunState, rd: RunDir) -> list[int]:
    """The phase just trained, plus one earlier phase per extra evidence round, when it trained on the same harness."""
    sha_of = {r.phase: r.harness_sha for r in state.results}
    first = max(1, state.phase - state.evidence_round)
    return [p for p in range(first, state.phase + 1)
            if rd.rollout_file(p).exists() and sha_of.get(p) == sha_of.get(state.phase)]


def phase_evidence(rt: Runtime, state: RunState) -> PhaseEvidence:
    """What the Diagnostician and the Critic read about the phase that just trained, the dev result of the checkpoint
    it trained from and the training pool included."""
    in_view = phases_in_view(state, rt.rd)
    main = rt.repo.sha("main")
    reg: dict = {}
    try:
        reg = rt.evidence.registry(main, in_view)
    except Exception as err:  # a broken registry on main is itself worth reporting, not fatal
        rt.emit("registry_error", sha=main, error=str(err))
    promos = [p for p in state.promotions if p.phase == state.phase - 1]
    last = {"branch": promos[-1].branch, "intervention": promos[-1].candidate.intervention} if promos else None
    begun = start_of(state.phase, state.starts)  # the checkpoint this phase trained from (0: the starting policy)
    start = rt.baseline_dev if begun == 0 else next((r.dev for r in state.results if r.phase == begun), None)
    return PhaseEvidence(phase=state.phase, results=list(state.results), rollouts=rt.evidence.rows(in_view),
                         phases_in_view=in_view, registry=reg, knobs=rt.evidence.knobs(main),
                         domain=get_domain(rt.cfg.domain, rt.cfg.executor), last_promotion=last,
                         baseline=rt.baseline_dev, start=start, tasks=rt.evidence.tasks(), run_dir=rt.rd.root)


def rules_beside(role, ev: PhaseEvidence, diagnoses: list[Diagnosis]) -> tuple[list[Diagnosis], list[Diagnosis]]:
    """(all diagnoses, the rules' that the role missed): an LLM role's findings, then each failure mode the built-in
    rules (``role.builtin``) flag on the same evidence that the role did not name. A built-in role: unchanged."""
    builtin = getattr(role, "builtin", None)
    if builtin is None:
        return diagnoses, []
    named = {d.failure_mode for d in diagnoses}
    missed = [d for d in builtin.diagnose(ev) if d.failure_mode not in named]
    missed = [d.model_copy(update={"id": f"d{ev.phase}-{len(diagnoses) + k}", "source": "rules", "statement":
                                   f"{d.statement} (found by the built-in rules; the Diagnostician did not name it)"})
              for k, d in enumerate(missed, 1)]
    return diagnoses + missed, missed


def step(rt: Runtime, state: RunState) -> dict:
    t0 = time.time()
    ev = phase_evidence(rt, state)
    diagnoses, missed = rules_beside(rt.agents.diagnostician, ev, rt.agents.diagnostician.diagnose(ev))
    if missed:
        modes = ", ".join(d.failure_mode for d in missed)
        rt.reporter.info(f"the Diagnostician ({rt.cfg.agents.role('diagnostician').model}) did not name what the "
                         f"built-in rules flag: {modes}; the Critic reads them too")
        rt.emit("rules_beside_role", phase=state.phase, role="diagnostician", failure_modes=[d.failure_mode
                                                                                             for d in missed])
    rt.emit("node_end", node="diagnose", phase=state.phase, phases_in_view=ev.phases_in_view,
            diagnoses=[d.model_dump(mode="json") for d in diagnoses], agent="diagnostician",
            model=rt.cfg.agents.role("diagnostician").model, seconds=round(time.time() - t0, 2))
    return {"diagnoses": diagnoses, "round_due": False}
