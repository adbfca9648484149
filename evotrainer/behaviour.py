"""Behaviour figures of rollouts: what the policy's completions do, read through their domain, one definition each.

The Diagnostician (``agents.diagnostician``) alerts on them, moves name them as their target metric, and the effect
step measures them (``evotrainer.judge.targets.measure``), so an alert, a move's promise and its realized effect are one
figure.
Each is a ratio of per-group sums (:func:`parts`: a group's (numerator, denominator)), as ``rollouts.group_parts``:

format_failure_rate   rollouts that give no answer the domain can read (``Domain.extract_answer`` is None)
turn_cap_rate         rollouts the turn cap stopped while every call they made was new (``stopped_short``)
needless_call_share   tool calls the task does not need, over all tool calls (``needless_calls``)

They read rollout rows only (completion, difficulty, verified and the turn fields: ``rollouts.TURN_DEFAULTS`` where a
single-turn store has none), never a harness's decisions, so replaying another harness on the same completions leaves
them unchanged: the backtest's replay cannot measure a move that targets one (as with ``truncation_rate``); the trial
and the effect step, on the phase it trains (``evotrainer.judge.targets.measure``), do.

Alone: ``python -m evotrainer.behaviour RUN_DIR PHASE [DOMAIN]`` prints the figures of a phase's rollouts.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable

from evotrainer.rollouts import TURN_DEFAULTS, groups_of, ratio

if TYPE_CHECKING:
    from evotrainer.domains.base import Domain

REFERENCE_UNITS = 20  # verified-correct rollouts of a level what it needs is read from (the Critic's least evidence)

Parts = Callable[[list[dict]], tuple[float, float]]


def turn(row: dict, key: str):
    """A rollout's turn figure ``key`` (``turns``, ``tool_calls``, ``tool_errors``, ``hit_turn_cap``); a single-turn
    rollout's (``TURN_DEFAULTS``) where the row has none."""
    return row.get(key, TURN_DEFAULTS[key])


def format_failed(domain: Domain, row: dict) -> bool:
    """The completion gives no answer the domain can read."""
    return domain.extract_answer(row["completion"]) is None


def stopped_short(domain: Domain, row: dict) -> bool:
    """The turn cap stopped the rollout while every call it made was new: it was stopped short of its answer. One
    that repeated a call is not: it was looping, and a higher cap gives it more turns to loop in."""
    calls = domain.tool_calls_in(row["completion"])
    return bool(turn(row, "hit_turn_cap")) and len(set(calls)) == len(calls)


def calls_needed(rows: list[dict]) -> dict[str, int]:
    """Level -> the tool calls its tasks need, by the policy's own right answers: the most that three in four of the
    level's verified-correct rollouts make (their upper quartile). A quartile, not the median, so that right answers
    reached without the calls (a lucky guess, no call at all) do not set the need below what a task takes unless
    three in four right answers are such; fewer than a quarter that call needlessly do not raise it. Only levels with at
    least ``REFERENCE_UNITS`` right answers."""
    by_level: dict[str, list[int]] = {}
    for r in rows:
        if r["verified"]:
            by_level.setdefault(r["difficulty"], []).append(turn(r, "tool_calls"))
    out = {}
    for level, calls in by_level.items():
        if len(calls) >= REFERENCE_UNITS:
            out[level] = sorted(calls)[(3 * len(calls) - 1) // 4]
    return out


def needless_calls(row: dict, calls: list[str], needed: int | None) -> tuple[int, int]:
    """(calls that repeat one the rollout already made, calls a rollout makes needlessly): a repeat is needless (the
    environment answers a call the same way twice), and so is every call beyond what the level's verified-correct
    rollouts need (``needed``: None when unknown); the needless count is the larger of the two views."""
    repeats = len(calls) - len(set(calls))
    beyond = max(0, turn(row, "tool_calls") - needed) if needed is not None else 0
    return repeats, max(repeats, beyond)


def parts(domain: Domain, rows: list[dict]) -> dict[str, Parts]:
    """Each figure's part of one group of ``rows``, as (numerator, denominator). needless_call_share's need per level
    is read once, from all of ``rows`` (a group alone is too few right answers to say)."""
    needed = calls_needed(rows)

    def needless(g: list[dict]) -> tuple[float, float]:
        return (float(sum(needless_calls(r, domain.tool_calls_in(r["completion"]), needed.get(r["difficulty"]))[1]
                          for r in g)), float(sum(turn(r, "tool_calls") for r in g)))

    return {
        "format_failure_rate": lambda g: (float(sum(format_failed(domain, r) for r in g)), float(len(g))),
        "turn_cap_rate": lambda g: (float(sum(stopped_short(domain, r) for r in g)), float(len(g))),
        "needless_call_share": needless,
    }


FIGURES = ("format_failure_rate", "turn_cap_rate", "needless_call_share")


def figure(name: str, domain: Domain) -> Callable[[list[dict]], float]:
    """Figure ``name`` of a list of rollout rows (0.0 when the rows, or for needless_call_share their calls, are
    none)."""
    if name not in FIGURES:
        raise KeyError(f"unknown behaviour figure {name!r} (known: {', '.join(FIGURES)})")

    def value(rows: list[dict]) -> float:
        part = parts(domain, rows)[name]
        return ratio(part(g) for g in groups_of(rows).values())

    return value


def main(argv: list[str]) -> int:
    from pathlib import Path

    from evotrainer.domains import get_domain
    from evotrainer.rollouts import read_rollouts
    from evotrainer.rundir import RunDir

    if len(argv) not in (2, 3):
        print("usage: python -m evotrainer.behaviour RUN_DIR PHASE [DOMAIN]", file=sys.stderr)
        return 2
    rows = read_rollouts(RunDir(Path(argv[0])).rollout_file(int(argv[1])))
    domain = get_domain(argv[2] if len(argv) == 3 else "math")
    for name in FIGURES:
        print(f"{name}: {figure(name, domain)(rows):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
