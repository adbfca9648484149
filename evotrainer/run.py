"""Running a run directory: start (or resume) the co-evolution loop until its phase budget is spent.

``run(RUN_DIR)`` makes sure the starting policy exists, connects to the trainer service (starting a local
one when the config names no URL), measures the starting policy's held-out accuracy once (the "phase 0" every
later phase is compared with), and drives the LangGraph loop from its SQLite checkpoint: a fresh run
starts at ``train``, a killed one resumes at the node it was in, a finished one whose budget was raised
trains on. At the end of every phase the run prints its summary and rewrites RUN_DIR/report.html. The run's state
(running, paused, done, failed) is kept in ``status.json`` for ``evotrainer status``;
a run paused at the human gate (``evotrainer/loop/gate.py``) or by a spent LLM budget records what it waits for,
and ``run(..., decision=...)`` (``evotrainer approve``) answers the gate and goes on.
Only one process may drive a run directory at a time.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from rich.markup import escape

from evotrainer.config import apply_overrides
from evotrainer.console import Reporter, summarize
from evotrainer.contracts import EvalResult
from evotrainer.loop.gate import describe
from evotrainer.loop.state import RunState
from evotrainer.pause import RunPaused, waiting_for
from evotrainer.report.html import write_quietly
from evotrainer.rundir import RunDir, RunDirError
from evotrainer.trainer.wire import EvalRequest
from sandbox.confine import run_log as sandbox_run_log


def run(run_dir: Path, *, phases: int | None = None, reporter: Reporter | None = None,
        decision: dict | None = None) -> dict:
    """``decision`` answers a paused gate ({"action": approve | revise | abort, "feedback": ...})."""
    from langgraph.types import Command

    from agents import build_agents
    from evotrainer.graph import build_graph, open_checkpointer, thread
    from evotrainer.loop.runtime import Runtime
    from evotrainer.trainer.client import connect

    reporter = reporter or Reporter()
    rd = RunDir(run_dir)
    cfg = rd.load_config()
    st = rd.status()
    if st.get("state") == "running":
        raise RunDirError(f"{rd.root}: already being run by process {st.get('pid')}")
    if phases is not None and phases != cfg.phases:
        cfg = apply_overrides(cfg, [f"phases={phases}"])  # a bad value fails here, with one line
        rd.save_config(cfg)
    agents = build_agents(cfg, str(rd.skills_path(cfg)), rd.root)  # an unknown model or a missing key fails here
    rd.set_status("running", node="start", started=time.time(), waiting_for=None)
    rd.events.emit("run_start", phases=cfg.phases)
    rd.events.emit("sandbox", **sandbox_run_log(cfg.sandbox.backend, cfg.sandbox.limits, cfg.sandbox.image))
    t0 = time.time()
    try:
        t = time.time()
        base = rd.ensure_policy(log=reporter.info, progress=reporter.progress)
        rd.events.emit("policy", base=base, seconds=round(time.time() - t, 2))
        t = time.time()
        def restarted(why: str) -> None:
            reporter.info(f"[yellow]trainer service lost[/yellow]: {escape(why)}")
            rd.events.emit("trainer_restart", reason=why)

        with connect(rd.root, cfg.trainer.url, cfg.trainer.start_timeout_s, cfg.trainer.max_restarts,
                     on_restart=restarted) as trainer:
            health = trainer.health()
            reporter.info(f"trainer service at {trainer.url} (pid {health['pid']}, {health['device']})")
            rd.events.emit("trainer", url=trainer.url, seconds=round(time.time() - t, 2), **health)
            baseline = _baseline(rd, cfg, trainer, base, reporter)
            rt = Runtime(rd=rd, cfg=cfg, trainer=trainer, agents=agents, reporter=reporter, base_policy=base,
                         baseline=baseline["held_out"], baseline_dev=baseline["dev"])
            with contextlib.closing(rt), open_checkpointer(rd, cfg) as saver:
                run_thread = thread(rd, cfg)
                graph = build_graph(rt, saver)
                snap = graph.get_state(run_thread)
                waiting = waiting_for(snap)  # a gate's question, unanswered
                ended = 0  # phase ends this process saw
                if waiting and decision is None:
                    pass  # it stays paused until `evotrainer approve`
                elif snap.next:
                    reporter.info(f"resuming at node {snap.next[0]} (phase {snap.values.get('phase', 0)})")
                    rd.events.emit("resume", node=snap.next[0], phase=snap.values.get("phase", 0),
                                   decision=decision if waiting else None)
                    ended = _drive(rt, graph, Command(resume=decision) if waiting else None, run_thread)
                elif snap.values.get("phase", 0) < cfg.phases:
                    ended = _drive(rt, graph, {"phase": snap.values.get("phase", 0)}, run_thread)
                snap = graph.get_state(run_thread)
                values, waiting = snap.values, waiting_for(snap)
                if not ended and values.get("results"):  # e.g. killed between its last Librarian and the report
                    write_quietly(rd, values.get("phase", 0))
        if waiting:
            raise RunPaused(waiting.get("gate", "gate"), describe(waiting))
    except RunPaused as paused:  # the human gate, or a spent LLM budget: the state is kept, nothing failed
        rd.set_status("paused", waiting_for=paused.waiting_for, detail=paused.detail)
        rd.events.emit("run_paused", reason=paused.waiting_for, detail=paused.detail)
        reporter.info(f"[yellow]paused[/yellow]: {escape(paused.detail)}")
        return {}
    except KeyboardInterrupt:
        rd.set_status("paused", detail="interrupted; `evotrainer run` resumes where it stopped")
        rd.events.emit("run_paused", reason="interrupt")
        raise
    except Exception as err:
        rd.set_status("failed", error=f"{type(err).__name__}: {err}")
        rd.events.emit("run_failed", error=f"{type(err).__name__}: {err}")
        raise
    results = values.get("results", [])
    rd.set_status("done", phase=values.get("phase", 0), accuracy=[r.eval.accuracy for r in results],
                  wall_time_s=round(time.time() - t0, 1))
    rd.events.emit("run_done", phase=values.get("phase", 0), wall_time_s=round(time.time() - t0, 1))
    return values


def _drive(rt, graph, start, run_thread) -> int:
    """Run the graph from ``start`` (fresh input, a gate's answer, or None to resume), ending each phase after its
    Librarian step: the phase's summary, the report, the status. Returns how many phases it ended."""
    ended = 0
    for update in graph.stream(start, run_thread, stream_mode="updates", durability="sync"):
        if "librarian" in update:
            _phase_end(rt, RunState.model_validate(graph.get_state(run_thread).values))
            ended += 1
    return ended


def _phase_end(rt, state: RunState) -> None:
    """What a person reads when a phase ends: the summary on the console (and a ``phase_summary`` event),
    RUN_DIR/report.html (a failure is a ``report_error`` event, never a stop) and status.json's accuracies."""
    from evotrainer.loop.librarian import effects

    summary = {**summarize(state, effects(rt, state), rt.baseline), "mode": rt.cfg.evolution.mode,
               "round_waits": state.round_due and rt.cfg.evolution.mode != "static"}
    rt.reporter.phase_summary(summary)
    rt.emit("phase_summary", **summary)
    write_quietly(rt.rd, state.phase)
    rt.rd.set_status("running", phase=state.phase, node="librarian", accuracy=[r.eval.accuracy for r in state.results])


def _baseline(rd: RunDir, cfg, trainer, base: str, reporter: Reporter) -> dict[str, EvalResult]:
    """The starting policy's results on the held-out split (the report's phase 0) and on the dev split (what the
    Diagnostician compares with): measured by the trainer service once, then read from disk."""
    results = {split: rd.baseline(base, split) for split in ("held_out", "dev")}
    if None in results.values():
        t = time.time()
        with reporter.progress("evaluating the starting policy on the held-out and dev splits"):
            request = EvalRequest.make(cfg, str(rd.root), base)
            results = {split: trainer.evaluate(request.on(split), timeout_s=cfg.trainer.phase_timeout_s)
                       for split in results}
        rd.save_baseline(base, results)
        held_out = results["held_out"]
        rd.events.emit("baseline", checkpoint=base, accuracy=held_out.accuracy, n=held_out.n,
                       by_difficulty=held_out.by_difficulty, tolerant_accuracy=held_out.tolerant_accuracy,
                       dev_accuracy=results["dev"].accuracy,
                       dev_n=results["dev"].n, seconds=round(time.time() - t, 2))
    result = results["held_out"]
    tolerant = result.tolerant()
    reporter.info(f"starting policy: held-out accuracy {result.accuracy:.1%} (n={result.n}; by level "
                  + ", ".join(f"{k}: {v:.0%}" for k, v in result.by_difficulty.items()) + ")"
                  + (f", tolerant score {tolerant.accuracy:.1%}" if tolerant else ""))
    return results
