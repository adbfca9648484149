"""Step 1: train one phase on main, through the trainer service.

Tags main as ``phase-N`` (the harness that trained phase N), sends the phase request (from the previous phase's
checkpoint, or the base policy), waits with a progress bar, and records the PhaseResult. A new phase starts with
an empty per-phase state (diagnoses, candidates, reports) and frees the evidence of phases no longer in view.
Safe to re-run after a kill: the service never trains a published phase twice.

Routers: ``after`` sends the run on to the phase's evolution round, or, after the last phase (unless
``evolution.final_round``), straight to the Librarian: nothing would train on what that round promotes. The round
then waits (``round_due``), and ``start`` runs it first when ``evotrainer run --phases N`` raises the budget (the
keep/discard loop, ``loop/keep_discard.py``, waits the same way for its next edit).
"""

from __future__ import annotations

from rich.markup import escape

from evotrainer.judge.safety import attempts_check
from evotrainer.loop.runtime import Runtime, none_follows
from evotrainer.loop.state import RunState


def step(rt: Runtime, state: RunState) -> dict:
    phase = state.phase + 1
    rt.repo.recover()
    sha = rt.repo.sha("main")
    rt.repo.tag(f"phase-{phase}", sha, f"harness that trained phase {phase}")
    rt.emit("node_start", node="train", phase=phase, harness_sha=sha)
    steps = rt.cfg.training.steps_per_phase
    with rt.reporter.progress(f"phase {phase}: training at main@{sha[:8]}", steps) as bar:
        init = rt.checkpoint_for(phase, state.starts)  # the previous phase's, or where a promoted repair resumes
        result = rt.trainer.run_phase(rt.request(phase, sha, steps, init=init), on_progress=bar,
                                      timeout_s=rt.cfg.trainer.phase_timeout_s)
    rt.emit("node_end", node="train", phase=phase, accuracy=result.eval.accuracy, wall_time_s=result.wall_time_s,
            train=result.train, rollouts=result.rollout_path)
    if result.sandbox_attempts:  # main's own code: already promoted, so evidence for the reviewer, not a verdict
        check = attempts_check(result.sandbox_attempts)
        rt.emit("sandbox_attempts", phase=phase, harness_sha=sha, attempts=result.sandbox_attempts[:50])
        rt.reporter.info(f"[yellow]warning:[/] main@{sha[:8]}'s harness code tried forbidden operations while phase "
                         f"{phase} trained (denied by the sandbox): {escape(check.detail)}")
    keep = max(rt.cfg.backtest.retained_phases, rt.cfg.evolution.max_evidence_rounds + 1)
    rt.evidence.forget_before(phase - keep + 1)
    return {"phase": phase, "results": [*state.results, result], "diagnoses": [], "evidence_round": 0,
            "engineer_round": 0, "candidates": [], "round_branches": [], "reports": [], "held": {},
            "round_due": rt.cfg.evolution.mode != "static"}


def after(rt: Runtime, state: RunState) -> str:
    """The next step after training: the evolution round when a later phase will train on it, else the phase's end
    (the realized effect, then the Librarian)."""
    mode = rt.cfg.evolution.mode
    if mode == "evolve" and none_follows(rt.cfg, state.phase):
        return "effect"
    return {"evolve": "diagnose", "static": "effect", "keep_discard": "keep_discard"}[mode]


def start(rt: Runtime, state: RunState) -> str:
    """Where a run (or a raised budget) starts: the round the last phase left waiting, else the next phase."""
    if not state.round_due:
        return "train"
    return "keep_discard" if rt.cfg.evolution.mode == "keep_discard" else "diagnose"
