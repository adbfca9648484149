"""Escalation: what the loop does after ``evolution.escalate_after`` phases in a row with nothing promoted.

    engineer step   :func:`instruct` tells the Engineer the run is stalled: the next round must edit a harness
                    layer not edited during the stall (rewards, filters, curriculum, knobs, prompt, diagnostics), or
                    propose a subtraction (undo an earlier promotion); the Engineers enforce it, and an edit offered
                    as a subtraction must be one (:func:`evotrainer.harness.edits.subtraction_problem`: it reverts
                    an earlier promotion, or it only deletes)
    phase end       :func:`rollback` moves main back to the last known-good harness (the one that trained the phase
                    with the best dev accuracy) by a new commit (:meth:`HarnessRepo.restore`), never rewriting
                    history, when the current phase's accuracy fell below it beyond the sampling margin

Both are safe to re-run after a kill: the rollback is skipped when main already holds that harness.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agents.move_kit import layer_of
from evotrainer.harness.repo import parse_trailers
from evotrainer.contracts import PhaseResult
from evotrainer.loop.resume import below_best

if TYPE_CHECKING:
    from evotrainer.loop.runtime import Runtime
    from evotrainer.loop.state import RunState


def stalled(state: RunState, through: int) -> int:
    """Phases up to ``through`` (inclusive) since the last one after which something was promoted."""
    last = max((p.phase for p in state.promotions if p.phase <= through), default=0)
    return max(0, through - last)


def stall_layers(rt: Runtime, phases: range) -> list[str]:
    """The harness layers the candidates of ``phases`` edited (read from their commits' Variable trailers)."""
    layers = set()
    for branch in rt.repo.branches():
        m = re.search(r"phase-(\d+)-\d+$", branch)
        if m and int(m.group(1)) in phases:
            variable = parse_trailers(rt.repo.message(branch)).get("Variable", "")
            if variable:
                layers.add(layer_of(variable))
    return sorted(layers)


def instruct(rt: Runtime, state: RunState) -> tuple[str, list[str]]:
    """(what the Engineer is told, the layers to avoid); ("", []) when the run is not stalled."""
    n, after = stalled(state, state.phase - 1), rt.cfg.evolution.escalate_after
    if not after or n < after:
        return "", []
    layers = stall_layers(rt, range(state.phase - n, state.phase + 1))
    return (f"The run is stalled: nothing was promoted in the last {n} phases. This round must change layer "
            "(edit a harness layer not edited during the stall) or propose a subtraction (undo an earlier edit)."
            ), layers


def fell_below_known_good(results: list[PhaseResult], level: float = 0.95) -> tuple[PhaseResult, dict] | None:
    """(the known-good phase, the change from it) when the last phase's dev accuracy fell below the best earlier
    phase's beyond noise (:func:`below_best`), else None: the harness escalation rolls main back to."""
    return below_best(results[-1].dev, [(r, r.dev) for r in results[:-1]], level)


def rollback(rt: Runtime, state: RunState) -> str | None:
    """Roll main back to the last known-good harness by a new commit, when stalled and accuracy fell; its sha."""
    after = rt.cfg.evolution.escalate_after
    if not after or stalled(state, state.phase) < after or len(state.results) < 2:
        return None
    fell = fell_below_known_good(state.results)
    if fell is None:
        return None
    (best, change), cur = fell, state.results[-1]
    a0, a1, margin = best.dev.accuracy, cur.dev.accuracy, change["high"] - change["change"]
    sha = rt.repo.restore(
        best.harness_sha, f"Roll back main to the harness of phase {best.phase} (last known-good)",
        f"Nothing was promoted in {stalled(state, state.phase)} phases and dev accuracy fell to {a1:.1%} from "
        f"{a0:.1%} (phase {best.phase}), beyond the {margin:.1%} margin ({change['method']}, widened for choosing the "
        f"best of {len(state.results) - 1} earlier phases). This commit restores the harness "
        f"{best.harness_sha[:8]} that trained phase {best.phase}; history is kept.",
        {"Reason": "escalation: stalled and below the known-good accuracy"})
    if sha is None:  # main already holds that harness (a re-run after a kill)
        return None
    rt.emit("rollback", phase=state.phase, main_sha=sha, to=best.harness_sha, to_phase=best.phase,
            accuracy=a1, known_good_accuracy=a0, margin=margin)
    return sha
