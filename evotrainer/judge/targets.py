"""A candidate's target metric: the names a candidate may declare as the figure its edit moves, and how each is
measured on rollout rows. One list (:func:`measurable`) for the Engineers that declare a target (the LLM Engineer is
offered it and held to it) and one reader (:func:`measure`) for the effect step that measures it on the phase the
edit trains (``evotrainer.loop.effect``). The backtest measures the replay figures on replay as well
(``judge.replay.METRICS``); the behaviour figures (``evotrainer.behaviour``) read completions only, so replay cannot
move them and only a phase that trains on the edit shows them.

Alone: ``python -c "from evotrainer.judge.targets import measurable; print(measurable())"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evotrainer import behaviour
from evotrainer.judge.replay import METRICS
from evotrainer.rollouts import group_stats

if TYPE_CHECKING:
    from evotrainer.domains import Domain


def measurable() -> list[str]:
    """Every target metric :func:`measure` reads (a candidate may name any as the metric it moves): the replay
    figures, the behaviour figures and the figures of ``group_stats``."""
    return sorted({*METRICS, *behaviour.FIGURES, *group_stats([])})


def measure(metric: str, rows: list[dict], domain: Domain | None = None) -> float | None:
    """A target metric of rollout rows (with ``trained`` set): a replay figure (``judge.replay.METRICS``), a figure of
    ``group_stats``, or, with the rows' domain, a behaviour figure (``evotrainer.behaviour``); None for another name."""
    if metric in METRICS:
        return METRICS[metric](rows)
    if metric in behaviour.FIGURES:
        if domain is None:
            raise ValueError(f"{metric} reads the completions through their domain: pass it")
        return behaviour.figure(metric, domain)(rows)
    return group_stats(rows).get(metric)
