"""Training on from the best earlier checkpoint: how a repair can win when the damage is already done.

A harness defect (a learning rate that diverges, a reward the policy learned to game) harms the policy before the
loop sees it. A repair judged from the harmed checkpoint must undo that damage within a short trial before it can beat
main, and the next phase would train on from the damage anyway. When the last phase left the policy's dev accuracy
below an earlier checkpoint's beyond noise (:func:`harmed`; the starting policy counts as checkpoint 0), the round's
trials start from that best earlier checkpoint, main's arm too, so the comparison stays paired; a repair promoted
there trains on from it (:func:`plan`, then :func:`record` once merged: ``RunState.starts``, the ``trains_from`` event, a ``Trains-From`` trailer on
the promotion's merge commit, and a line on the console). Without a promotion nothing moves: the same harness from
an earlier checkpoint would only repeat the damage. Decisions read the dev split only.

Alone: ``python -c "from evotrainer.loop.resume import below_best; help(below_best)"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from evotrainer.contracts import EvalResult, PhaseResult
from evotrainer.metrics import accuracy_change

if TYPE_CHECKING:
    from evotrainer.loop.runtime import Runtime
    from evotrainer.loop.state import RunState

T = TypeVar("T")


def below_best(current: EvalResult, earlier: list[tuple[T, EvalResult]], level: float = 0.95
               ) -> tuple[T, dict] | None:
    """(the key of the best of ``earlier``'s dev results, the change from it to ``current``) when ``current`` fell
    below it beyond noise, else None. The change is paired per item where both scored the same items; the best of k
    earlier results is the largest of k noisy figures, so its interval is widened for the choice (Bonferroni: level
    1 - (1 - ``level``) / k), or a run at a standstill would be judged fallen far more often than 1 - ``level``."""
    if not earlier:
        return None
    key, best = max(earlier, key=lambda e: e[1].accuracy)
    change = accuracy_change(best, current, level=1 - (1 - level) / len(earlier))
    return (key, change) if change["high"] < 0 else None


def harmed(results: list[PhaseResult], baseline: EvalResult | None, level: float = 0.95) -> tuple[int, dict] | None:
    """(the earlier checkpoint with the best dev accuracy: a phase, or 0 for the starting policy; the change from it)
    when the last phase left the policy below it beyond noise (:func:`below_best`), else None.

    The policy was harmed: a repair judged from the harmed checkpoint would have to undo the damage within a short
    trial before it could win. So the trials of that round start from this checkpoint (main's arm too), and a repair
    promoted there trains on from it (``RunState.starts``): recorded in the promotion's commit and the run's log."""
    earlier = [(0, baseline)] if baseline is not None else []
    earlier += [(r.phase, r.dev) for r in results[:-1]]
    return below_best(results[-1].dev, earlier, level) if results else None


def trial_start(rt: Runtime, state: RunState) -> tuple[int, dict | None]:
    """(the checkpoint this phase's trials train from, the dev change that moved them there or None): this phase's
    own, or the best earlier one when this phase harmed the policy (:func:`harmed`). Only when trials run: without
    them nothing would judge a repair from there."""
    fell = harmed(state.results, rt.baseline_dev) if rt.cfg.backtest.trial_steps > 0 else None
    return (state.phase, None) if fell is None else fell


def plan(rt: Runtime, state: RunState) -> dict | None:
    """Where the next phase trains from when this round's promotion lands, if not this phase's checkpoint: the
    round's trials started from an earlier one (:func:`trial_start`). ``{"start", "why", "change", "dev_accuracy"}``,
    ``why`` being the promotion commit's ``Trains-From`` trailer; None otherwise. Pure: :func:`record` says it."""
    start, change = trial_start(rt, state)
    if start == state.phase:
        return None
    was, now = change["change"], state.results[-1].dev.accuracy
    where = "the starting policy" if start == 0 else f"phase {start}'s checkpoint"
    why = (f"phase {state.phase + 1} trains from {where}: phase {state.phase} left dev accuracy at {now:.1%}, "
           f"{-was * 100:.1f} points below it (interval of the change {change['low']:+.1%} to {change['high']:+.1%}, "
           "widened for choosing the best checkpoint), and the repair won its trial from there")
    return {"start": start, "why": why, "change": change, "dev_accuracy": now}


def record(rt: Runtime, state: RunState, starts: dict[str, int], moved: dict | None) -> dict[str, int]:
    """After the promotion merged: the run's ``starts`` with the next phase training from ``moved``'s checkpoint
    (:func:`plan`), the ``trains_from`` event and a console line; ``starts`` unchanged when ``moved`` is None."""
    if moved is None:
        return starts
    rt.emit("trains_from", phase=state.phase, next_phase=state.phase + 1, start=moved["start"],
            dev_accuracy=moved["dev_accuracy"], change=moved["change"])
    rt.reporter.info(f"policy: {moved['why']}")
    return {**starts, str(state.phase + 1): moved["start"]}
