"""Wiring: the loop's steps (``evotrainer/loop/``) as a LangGraph state machine, checkpointed to SQLite after each.

    train -> diagnose -> critique -> engineer -> backtest -> promote -> librarian -> (stop | train)
                 ^           |                       |              |
                 +-- more evidence (bounded)         |              +-- the gate's --revise: back to engineer
                                                     +-- all rejected: back to engineer (bounded)

A killed run resumes at the step it was in (``invoke(None, THREAD)``); every step is safe to re-run.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from functools import partial
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from evotrainer.loop import backtest, critique, diagnose, engineer, keep_discard, librarian, promote, train
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState, serializer

THREAD = {"configurable": {"thread_id": "run"}, "recursion_limit": 100_000}
STEPS = {"train": train, "diagnose": diagnose, "critique": critique, "engineer": engineer, "backtest": backtest,
         "promote": promote, "librarian": librarian, "keep_discard": keep_discard}
AFTER_TRAIN = {"evolve": "diagnose", "static": "librarian", "keep_discard": "keep_discard"}  # evolution.mode


def build_graph(rt: Runtime, checkpointer):
    g = StateGraph(RunState)
    for name, module in STEPS.items():
        g.add_node(name, partial(_logged, rt, name, module.step))
    g.add_edge(START, "train")
    g.add_edge("train", AFTER_TRAIN[rt.cfg.evolution.mode])
    g.add_edge("keep_discard", "librarian")
    g.add_edge("diagnose", "critique")
    g.add_conditional_edges("critique", critique.route, ["diagnose", "engineer", "librarian"])
    g.add_conditional_edges("engineer", engineer.route, ["backtest", "promote"])
    g.add_conditional_edges("backtest", partial(backtest.route, rt.cfg.evolution.max_engineer_rounds),
                            ["engineer", "promote"])
    g.add_conditional_edges("promote", promote.route, ["engineer", "librarian"])  # engineer: revise at the gate
    g.add_conditional_edges("librarian", partial(librarian.route, rt.cfg.phases), ["train", END])
    return g.compile(checkpointer=checkpointer)


def _logged(rt: Runtime, name: str, step, state: RunState) -> dict:
    """Run one step, with the run's status and a ``node`` event around it."""
    t0 = time.time()
    rt.rd.set_status("running", phase=state.phase, node=name)
    out = step(rt, state)
    rt.emit("node", node=name, phase=out.get("phase", state.phase), seconds=round(time.time() - t0, 2))
    return out


@contextlib.contextmanager
def open_checkpointer(path: Path):
    """The run's SQLite checkpointer; every step's output is committed before the next step starts."""
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        yield SqliteSaver(conn, serde=serializer())
    finally:
        conn.close()
