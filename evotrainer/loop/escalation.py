"""Escalation: what the loop does after ``evolution.escalate_after`` phases in a row with nothing promoted.

    engineer step   :func:`instruct` tells the Engineer the run is stalled: the next round must edit a harness
                    layer not edited during the stall (rewards, filters, curriculum, knobs, prompt, diagnostics), or
                    propose a subtraction (undo an earlier promotion); the Engineers enforce it, and an edit offered
                    as a subtraction must be one (:func:`subtraction_problem`: it reverts an earlier promotion, or
                    it only deletes)
    phase end       :func:`rollback` moves main back to the last known-good harness (the one that trained the phase
                    with the best held-out accuracy) by a new commit, never rewriting history, when the current
                    phase's accuracy fell below it beyond the sampling margin

Both are safe to re-run after a kill: the rollback is skipped when main already holds that harness.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Callable

from agents.playbook import layer_of
from evotrainer.contracts import Promotion
from evotrainer.harness.repo import BOT, HarnessRepo, format_message, parse_trailers

if TYPE_CHECKING:  # annotations only: an Engineer checks subtractions without loading the loop's runtime
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


def _only_deletes(before: str | None, after: str) -> bool:
    """Whether ``after`` is ``before`` with some lines removed and none added or changed (order kept)."""
    if before is None:
        return False
    old, new = [line.rstrip() for line in before.splitlines()], [line.rstrip() for line in after.splitlines()]
    rest = iter(old)
    return len(new) < len(old) and all(line in rest for line in new)


def subtraction_problem(repo: HarnessRepo, edits: dict[str, str], before: Callable[[str], str | None],
                        promotions: list[Promotion]) -> str | None:
    """Why an edit offered as a subtraction is not one, or None when it is: it reverts an earlier promotion (every
    file it changes goes back to its text before that promotion's merge), or it only deletes (every file it
    changes loses lines and gains or changes none: changing a value, even by deleting characters, is no
    subtraction). ``edits`` is {file: new text}; ``before(file)`` the file at the base."""
    for promo in reversed(promotions):
        restored = repo.files_before(promo.main_sha, promo.candidate.files)
        if all(f in restored and restored[f] == t for f, t in edits.items()):
            return None
    grows = sorted(f for f, t in edits.items() if not _only_deletes(before(f), t))
    if not grows:
        return None
    return (f"it neither reverts an earlier promotion nor only deletes lines: it adds or changes lines in (or removes "
            f"none from) {', '.join(grows)}; a subtraction deletes lines or undoes a promoted edit")


def rollback(rt: Runtime, state: RunState) -> str | None:
    """Roll main back to the last known-good harness by a new commit, when stalled and accuracy fell; its sha."""
    after = rt.cfg.evolution.escalate_after
    if not after or stalled(state, state.phase) < after or len(state.results) < 2:
        return None
    cur = state.results[-1]
    best = max(state.results[:-1], key=lambda r: r.eval.accuracy)
    a0, a1 = best.eval.accuracy, cur.eval.accuracy
    margin = 1.96 * math.sqrt(a0 * (1 - a0) / max(best.eval.n, 1) + a1 * (1 - a1) / max(cur.eval.n, 1))
    repo = rt.repo
    repo.recover()
    main = repo.sha("main")
    tree = repo.repo.commit(best.harness_sha).tree.hexsha
    if a0 - a1 <= margin or repo.repo.commit(main).tree.hexsha == tree:
        return None
    message = format_message(
        f"Roll back main to the harness of phase {best.phase} (last known-good)",
        f"Nothing was promoted in {stalled(state, state.phase)} phases and held-out accuracy fell to {a1:.1%} from "
        f"{a0:.1%} (phase {best.phase}), beyond the {margin:.1%} sampling margin. This commit restores the harness "
        f"{best.harness_sha[:8]} that trained phase {best.phase}; history is kept.",
        {"Rollback-To": best.harness_sha, "Reason": "escalation: stalled and below the known-good accuracy"})
    g = repo.repo.git
    sha = g.commit_tree(tree, "-p", main, "-m", message,
                        env={"GIT_AUTHOR_NAME": BOT.name, "GIT_AUTHOR_EMAIL": BOT.email,
                             "GIT_COMMITTER_NAME": BOT.name, "GIT_COMMITTER_EMAIL": BOT.email})
    g.update_ref("refs/heads/main", sha, main)
    g.reset("--hard", "main")
    rt.emit("rollback", phase=state.phase, main_sha=sha, to=best.harness_sha, to_phase=best.phase,
            accuracy=a1, known_good_accuracy=a0, margin=margin)
    return sha
