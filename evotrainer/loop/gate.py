"""The human gate before promotion: with ``gates: [before_promote]`` the run pauses before merging into main.

:func:`review` is called by the promote step with the candidates the promotion policy chose. With the gate on, it
pauses the graph with a LangGraph ``interrupt()`` carrying what waits (branch, variable, hypothesis, backtest
reasons); ``evotrainer/run.py`` records the run as paused and ``evotrainer status`` shows it. A person answers with

    evotrainer approve RUN_DIR                      merge as chosen
    evotrainer approve RUN_DIR --revise "feedback"  the Engineer revises with the feedback (back to engineer)
    evotrainer approve RUN_DIR --abort              nothing is promoted this phase

which resumes the graph with ``Command(resume={"action": ..., "feedback": ...})``; the promote step runs again from
its start and ``interrupt()`` returns the answer. Unattended runs (no gate configured) never pause.
"""

from __future__ import annotations

from langgraph.types import interrupt

from evotrainer.contracts import BacktestReport
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState

GATE = "before_promote"
ACTIONS = ("approve", "revise", "abort")
SENT_BACK = "sent back for revision"


def question(state: RunState, chosen: list[BacktestReport]) -> dict:
    cands = {c.branch: c for c in state.candidates}
    return {"gate": GATE, "phase": state.phase, "candidates": [
        {"branch": r.branch, "variable": cands[r.branch].variable, "hypothesis": cands[r.branch].hypothesis,
         "reasons": r.reasons} for r in chosen]}


def describe(payload: dict) -> str:
    """What a paused gate waits for, in one line (for status.json and `evotrainer status`)."""
    what = ", ".join(f"{c['branch']} ({c['variable']})" for c in payload.get("candidates", []))
    return (f"phase {payload.get('phase')}: waiting for approval to promote {what or 'nothing'}; answer with "
            "`evotrainer approve RUN_DIR` [--revise \"feedback\" | --abort]")


def review(rt: Runtime, state: RunState, chosen: list[BacktestReport], held: dict[str, str]
           ) -> tuple[list[BacktestReport], dict[str, str], str]:
    """(reports to promote, held-back branches and why, feedback for the Engineer when a person asked to revise)."""
    if GATE not in rt.cfg.gates or not chosen:
        return chosen, held, ""
    answer = interrupt(question(state, chosen))
    action = answer.get("action") if isinstance(answer, dict) else str(answer)
    feedback = (answer.get("feedback") or "").strip() if isinstance(answer, dict) else ""
    rt.emit("gate", gate=GATE, phase=state.phase, action=action, feedback=feedback,
            branches=[r.branch for r in chosen])
    if action == "abort":
        return [], {**held, **{r.branch: "aborted at the gate" for r in chosen}}, ""
    if action == "revise":
        return [], {**held, **{r.branch: f"{SENT_BACK}: {feedback}" for r in chosen}}, \
            feedback or "revise the candidate"
    return chosen, held, ""
