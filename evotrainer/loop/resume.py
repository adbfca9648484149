"""Training on from an earlier checkpoint: how a repair can win when the damage is already done.

A harness defect (a learning rate that diverges, a reward the policy learned to game) harms the policy before the
loop sees it. A repair judged from the harmed checkpoint must undo that damage within a short trial before it can beat
main, and the next phase would train on from the damage anyway. Two signs move the round's trials to an earlier
checkpoint (:func:`trial_start`), main's arm too, so the comparison stays paired:

* the last phase left the policy's dev accuracy below an earlier checkpoint's beyond noise (:func:`harmed`; the
  starting policy counts as checkpoint 0): the trials start from that best earlier checkpoint;
* a confirmed diagnosis says the phase's own update overshot (:func:`overshot`: ``agents.roles.OVERSHOOT_MODES``,
  e.g. the policy grew certain without reward), though accuracy need not have fallen yet (it may still be above a
  starting policy that scored nothing): the trials start from the checkpoint that phase trained from, before the
  damage.

A repair promoted there trains on from it (:func:`plan`, then :func:`record` once merged: ``RunState.starts``, the
``trains_from`` event, a ``Trains-From`` trailer on the promotion's merge commit, and a line on the console), provided
its trial there reached at least the dev accuracy of the checkpoint it replaces (otherwise the next phase trains on
from the current checkpoint, and the log says why). Without a promotion nothing moves: the same harness from an
earlier checkpoint would only repeat the damage. Decisions read the dev split only.

Alone: ``python -c "from evotrainer.loop.resume import below_best; help(below_best)"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from agents.roles import OVERSHOOT_MODES
from evotrainer.contracts import BacktestReport, Diagnosis, EvalResult, PhaseResult
from evotrainer.judge.checks import TRIAL
from evotrainer.loop.state import start_of
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


def overshot(state: RunState) -> Diagnosis | None:
    """This phase's confirmed diagnosis that its own update overshot (``agents.roles.OVERSHOOT_MODES``), if any."""
    return next((d for d in state.diagnoses if d.status == "confirmed" and d.failure_mode in OVERSHOOT_MODES), None)


def trial_start(rt: Runtime, state: RunState) -> tuple[int, dict | None]:
    """(the checkpoint this phase's trials train from, why it is not this phase's own or None): this phase's own;
    the best earlier one when this phase harmed the policy (:func:`harmed`; ``{"cause": "harmed", "change"}``); else
    the one this phase trained from when a confirmed diagnosis says its update overshot (:func:`overshot`;
    ``{"cause": "overshoot", "diagnosis", "failure_mode", "statement"}``). Only when trials run: without them
    nothing would judge a repair from there."""
    if rt.cfg.backtest.trial_steps <= 0 or not state.results:
        return state.phase, None
    if (fell := harmed(state.results, rt.baseline_dev)) is not None:
        return fell[0], {"cause": "harmed", "change": fell[1]}
    if (d := overshot(state)) is not None:
        return start_of(state.phase, state.starts), {"cause": "overshoot", "diagnosis": d.id,
                                                     "failure_mode": d.failure_mode, "statement": d.statement}
    return state.phase, None


def plan(rt: Runtime, state: RunState, report: BacktestReport | None = None) -> dict | None:
    """Where the next phase trains from when this round's promotion (``report``, its backtest) lands, if not this
    phase's checkpoint: the round's trials started from an earlier one (:func:`trial_start`) and the repair's trial
    there reached at least this phase's dev accuracy (the trial's mean probe accuracy; the probe is the dev split or
    part of it). ``{"start", "why", "cause", "change", "dev_accuracy"}`` when it moves, ``why`` being the promotion
    commit's ``Trains-From`` trailer; ``{"start": None, "why"}`` when the trial fell short (the next phase trains on
    from this phase's checkpoint, and the log says why); None otherwise. Pure: :func:`record` says it."""
    start, reason = trial_start(rt, state)
    if start == state.phase:
        return None
    now = state.results[-1].dev.accuracy
    where = "the starting policy" if start == 0 else f"phase {start}'s checkpoint"
    trial = next((c for c in (report.checks if report else []) if c.name == TRIAL), None)
    if trial is not None and trial.candidate is not None and trial.candidate < now:
        return {"start": None, "why": f"phase {state.phase + 1} trains on from phase {state.phase}'s checkpoint: the "
                f"repair's trial from {where} reached {trial.candidate:.1%} on the probe, below the {now:.1%} dev "
                f"accuracy phase {state.phase} left"}
    won = "and the repair won its trial from there"
    if reason["cause"] == "harmed":
        was = reason["change"]
        why = (f"phase {state.phase + 1} trains from {where}: phase {state.phase} left dev accuracy at {now:.1%}, "
               f"{-was['change'] * 100:.1f} points below it (interval of the change {was['low']:+.1%} to "
               f"{was['high']:+.1%}, widened for choosing the best checkpoint), {won}")
    else:
        said = reason["statement"].rstrip(".")
        why = (f"phase {state.phase + 1} trains from {where}, the checkpoint phase {state.phase} trained from: its "
               f"update overshot ({reason['diagnosis']}, {reason['failure_mode']}: {said}), {won}"
               + (f" (reaching {trial.candidate:.1%} on the probe; phase {state.phase} left {now:.1%} on dev)"
                  if trial is not None and trial.candidate is not None else ""))
    return {"start": start, "why": why, "cause": reason["cause"], "change": reason.get("change"),
            "dev_accuracy": now}


def record(rt: Runtime, state: RunState, starts: dict[str, int], moved: dict | None) -> dict[str, int]:
    """After the promotion merged: the run's ``starts`` with the next phase training from ``moved``'s checkpoint
    (:func:`plan`), the ``trains_from`` event and a console line; when the repair's trial fell short of this phase's
    dev accuracy, ``starts`` unchanged, the ``trains_on`` event and the line saying why; nothing when ``moved`` is
    None."""
    if moved is None:
        return starts
    rt.reporter.info(f"policy: {moved['why']}")
    if moved["start"] is None:
        rt.emit("trains_on", phase=state.phase, next_phase=state.phase + 1, why=moved["why"])
        return starts
    rt.emit("trains_from", phase=state.phase, next_phase=state.phase + 1, start=moved["start"],
            cause=moved["cause"], dev_accuracy=moved["dev_accuracy"], change=moved["change"])
    return {**starts, str(state.phase + 1): moved["start"]}
