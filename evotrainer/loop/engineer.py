"""Step 4: the Engineer turns confirmed diagnoses into candidate commits, one variable each.

It gets the skills the Librarian retrieves for each confirmed diagnosis, main's knobs, the level statistics of
the phase, what was already tried this phase and why earlier rounds' candidates were rejected, the edits that
changed no training update or lost their A/B trial on this same main in earlier phases (``RunState.no_effect``,
``trial_lost``: not worth retrying), a person's feedback
from the gate (``gate.py``), and, when the run is stalled, the escalation (``escalation.py``). Router ``route``:
to the backtest when it made candidates, else to promote (which then has nothing new to merge).
"""

from __future__ import annotations

import time

from agents.roles import EngineerContext, ceilings_of
from evotrainer.contracts import Candidate
from evotrainer.judge import arbitrate
from evotrainer.loop import escalation
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState
from evotrainer.rollouts import level_history


def step(rt: Runtime, state: RunState) -> dict:
    base = rt.repo.sha("main")
    confirmed = [d for d in state.diagnoses if d.status == "confirmed"]
    skills = {d.id: rt.agents.librarian.retrieve(d, rt.cfg.domain) for d in confirmed}
    rejections: dict[str, list[str]] = {}
    for r in state.reports:
        rejections.setdefault(r.branch, r.reasons)
    ctx = EngineerContext(
        phase=state.phase, round=state.engineer_round + 1, repo=rt.repo, base_sha=base,
        knobs=rt.evidence.knobs(base), domain=rt.cfg.domain, tried=state.tried(), rejections=rejections,
        pilot=rt.cfg.backtest.trial_steps > 0, level_stats=level_history(rt.evidence.rollouts(state.phase)),
        feedback=state.feedback, promotions=list(state.promotions), no_effect=list(state.no_effect.get(base, [])),
        trial_lost=list(state.trial_lost.get(base, [])), ceilings=ceilings_of(state.results),
    )
    ctx.escalation, ctx.avoid_layers = escalation.instruct(rt, state)  # stalled: change layer or subtract
    t0 = time.time()
    candidates = [_arbitrated(rt, state, c) for c in rt.agents.engineer.propose(list(state.diagnoses), ctx, skills)]
    for c in candidates:
        rt.emit("candidate", phase=state.phase, **c.model_dump(mode="json"))
    rt.emit("node_end", node="engineer", phase=state.phase, agent="engineer",
            model=rt.cfg.agents.role("engineer").model,
            round=ctx.round, candidates=[c.branch for c in candidates],
            skills_retrieved={k: [x.id for x in v] for k, v in skills.items()}, seconds=round(time.time() - t0, 2))
    made = {c.branch for c in candidates}
    return {"candidates": [c for c in state.candidates if c.branch not in made] + candidates,
            "round_branches": [c.branch for c in candidates], "engineer_round": state.engineer_round + 1,
            "feedback": ""}


def _arbitrated(rt: Runtime, state: RunState, candidate: Candidate) -> Candidate:
    """``candidate``, with main's self-tests it fails rewritten where the evaluator contradicts them
    (``judge.arbitrate.amend``: any source's candidate); unchanged when it cannot be amended (the gate says why)."""
    try:
        amended, rulings = arbitrate.amend(rt.repo, candidate, sandbox=rt.cfg.sandbox, hide=rt.rd.hidden_from_harness(),
                                           domain=rt.cfg.domain, test_timeout_s=rt.cfg.backtest.test_timeout_s,
                                           executor=rt.cfg.executor)
    except Exception as err:  # noqa: BLE001 - the candidate goes to the gate as it was; its self-tests say why
        rt.emit("arbitration_error", phase=state.phase, branch=candidate.branch, error=f"{type(err).__name__}: {err}")
        return candidate
    if rulings:
        rt.emit("arbitrated", phase=state.phase, branch=candidate.branch, sha=amended.sha,
                tests=[r.test for r in rulings], why=[r.why for r in rulings])
        rt.reporter.info(f"{candidate.branch}: the evaluator's arbitration rewrote {len(rulings)} self-test(s) of "
                         f"main that assert rewards its verifier contradicts ({', '.join(r.test for r in rulings)})")
    return amended


def route(state: RunState) -> str:
    return "backtest" if state.round_branches else "promote"
