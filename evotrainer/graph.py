"""Wiring: the loop's steps (``evotrainer/loop/``) as a LangGraph state machine, checkpointed after each step to
SQLite (``RUN_DIR/state.sqlite``) or, with ``state.url``, to a shared Postgres (one thread per run).

    train -> diagnose -> critique -> engineer -> backtest -> promote -> effect -> librarian -> (stop | train)
      |          ^           |                       |              |
      |          +-- more evidence (bounded)         |              +-- the gate's --revise: back to engineer
      |                                              +-- all rejected: back to engineer (bounded)
      +-- the last phase: straight to the effect (its round waits for a raised budget, which starts there)

``effect`` measures the realized effect of the previous phase's promotion (and rolls back a loss); the Librarian
keeps skills. The run (``evotrainer/run.py``), not a step, prints each phase's summary and writes the report.

A killed run resumes at the step it was in (``invoke(None, thread(rd, cfg))``); every step is safe to re-run.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from functools import partial

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from evotrainer.config import ConfigError
from evotrainer.loop import backtest, critique, diagnose, effect, engineer, keep_discard, librarian, promote, train
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState, serializer

THREAD = {"configurable": {"thread_id": "run"}, "recursion_limit": 100_000}  # a run's own SQLite file: one thread
STEPS = {"train": train, "diagnose": diagnose, "critique": critique, "engineer": engineer, "backtest": backtest,
         "promote": promote, "effect": effect, "librarian": librarian, "keep_discard": keep_discard}


def build_graph(rt: Runtime, checkpointer):
    g = StateGraph(RunState)
    for name, module in STEPS.items():
        g.add_node(name, partial(_logged, rt, name, module.step))
    g.add_conditional_edges(START, partial(train.start, rt), ["train", "diagnose", "keep_discard"])
    g.add_conditional_edges("train", partial(train.after, rt), ["diagnose", "effect", "keep_discard"])
    g.add_edge("keep_discard", "effect")
    g.add_edge("diagnose", "critique")
    g.add_conditional_edges("critique", critique.route, ["diagnose", "engineer", "effect"])
    g.add_conditional_edges("engineer", engineer.route, ["backtest", "promote"])
    g.add_conditional_edges("backtest", partial(backtest.route, rt.cfg.evolution.max_engineer_rounds),
                            ["engineer", "promote"])
    g.add_conditional_edges("promote", promote.route, ["engineer", "effect"])  # engineer: revise at the gate
    g.add_edge("effect", "librarian")
    g.add_conditional_edges("librarian", partial(librarian.route, rt), ["train", "diagnose", "keep_discard", END])
    return g.compile(checkpointer=checkpointer)


def _logged(rt: Runtime, name: str, step, state: RunState) -> dict:
    """Run one step, with the run's status and a ``node`` event around it."""
    t0 = time.time()
    rt.rd.set_status("running", phase=state.phase, node=name)
    rt.agents.at_phase(state.phase)
    out = step(rt, state)
    rt.emit("node", node=name, phase=out.get("phase", state.phase), seconds=round(time.time() - t0, 2))
    return out


def thread(rd, cfg) -> dict:
    """The run's thread: "run" in its own SQLite file; its ``run_id`` in a Postgres that many runs share."""
    if not cfg.state.url:
        return THREAD
    return {**THREAD, "configurable": {"thread_id": rd.run_id}}


@contextlib.contextmanager
def open_checkpointer(rd, cfg):
    """The run's checkpointer; every step's output is committed before the next step starts."""
    if cfg.state.url:
        with _postgres(cfg.state.url) as saver:
            yield saver
        return
    conn = sqlite3.connect(str(rd.state_db), check_same_thread=False)
    try:
        yield SqliteSaver(conn, serde=serializer())
    finally:
        conn.close()


def check_state(url: str) -> None:
    """Raise ConfigError (one line) unless the Postgres of ``state.url`` answers; creates its tables."""
    with _postgres(url):
        pass


@contextlib.contextmanager
def _postgres(url: str):
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
    except ImportError:
        raise ConfigError("state.url: a Postgres checkpointer needs langgraph-checkpoint-postgres and psycopg "
                          "(pip install 'evotrainer[teams]')") from None
    try:
        conn = psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row, connect_timeout=10)
    except psycopg.OperationalError as err:
        first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "cannot connect")
        raise ConfigError(f"state.url: cannot connect to Postgres: {first}") from None
    try:
        saver = PostgresSaver(conn, serde=serializer())
        saver.setup()  # creates or migrates its tables; safe to repeat
        yield saver
    finally:
        conn.close()
