"""The rollout store: one parquet file per phase (``RUN_DIR/rollouts/phase-NNNN.parquet``), and group statistics.

One row per completion with the Rollout fields of DESIGN.md; ``reward_components`` and ``extra`` are stored as
JSON text so a phase whose harness adds a component needs no schema change. Files are written under a temporary
name and renamed, so a reader never sees half a phase. :func:`group_stats` is the one definition of the
training-signal figures (dead groups, kept fraction, ...) that the trainer, the Diagnostician and the
Backtester all report, so the numbers in the log, the diagnoses and the backtest reports agree.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import pandas as pd

from evotrainer.atomic import replacing
from evotrainer.contracts import Rollout

_JSON_COLUMNS = ("reward_components", "extra")
SPREAD_EPS = 1e-6

# What harness code (filters.py, diagnostics.py) sees of a rollout, the same in training and in the backtest's
# replay, so an edit judged on replay behaves the same way when it trains. Never the evaluator's ``verified``.
HARNESS_VIEW = ("phase", "step", "group_id", "sample_idx", "task", "task_id", "difficulty", "prompt", "completion",
                "completion_tokens", "truncated", "reward", "reward_components", "advantage", "turns", "tool_calls",
                "tool_errors", "hit_turn_cap")
TURN_DEFAULTS = {"turns": 1, "tool_calls": 0, "tool_errors": 0, "hit_turn_cap": False}  # a single-turn rollout's


def as_text(value: str | list[dict]) -> str:
    """A prompt or completion as text. prompt.py may return chat messages and TRL hands a chat-template policy's
    prompts and completions as messages: a prompt becomes ``role: content`` lines, a completion (one assistant
    message) its content."""
    if isinstance(value, str):
        return value
    if len(value) == 1 and value[0].get("role") == "assistant":
        return value[0]["content"]
    return "\n".join(f"{m['role']}: {m['content']}" for m in value)


def harness_view(row: dict, task: dict, *, decided: bool = False) -> dict:
    """One rollout as harness code sees it: the HARNESS_VIEW fields; with ``decided``, also ``kept`` and the advantage
    it trained with (what diagnostics see). ``task`` must be the harness's view of the training task
    (``Domain.harness_task``, as ``RunDir.harness_tasks`` gives it: answer included, evaluator-only fields never)."""
    view = {k: row.get(k, TURN_DEFAULTS.get(k)) if k in TURN_DEFAULTS else row[k]
            for k in HARNESS_VIEW if k not in ("task", "task_id", "difficulty")}
    view.update(task=task, task_id=task["id"], difficulty=task["difficulty"])
    execution = row.get("execution", (row.get("extra") or {}).get("execution"))  # a code domain's visible tests
    if execution is not None:
        view["execution"] = execution
    if decided:
        view["kept"] = bool(row["kept"])
    return view


def write_rollouts(rollouts: Iterable[Rollout], path: Path) -> None:
    rows = []
    for r in rollouts:
        row = r.model_dump()
        for col in _JSON_COLUMNS:
            row[col] = json.dumps(row[col], sort_keys=True)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(Rollout.model_fields))
    with replacing(path) as tmp:
        frame.to_parquet(tmp, index=False)


def read_rollouts(path: Path) -> list[dict]:
    """Rows as plain dicts (the form harness code and the agents work with)."""
    frame = pd.read_parquet(path)
    rows = frame.to_dict("records")
    for row in rows:
        for col in _JSON_COLUMNS:
            row[col] = json.loads(row[col]) if isinstance(row.get(col), str) else (row.get(col) or {})
        for key, default in TURN_DEFAULTS.items():  # a store written before these fields reads as single-turn
            row[key] = row.get(key, default)
        for key in ("truncated", "verified", "kept", "hit_turn_cap"):
            row[key] = bool(row[key])
        for key in ("phase", "step", "sample_idx", "completion_tokens", "turns", "tool_calls", "tool_errors"):
            row[key] = int(row[key])
        for key in ("reward", "advantage"):
            row[key] = float(row[key])
    return rows


def spread_batches(rows: list[dict], most: int) -> list[dict]:
    """The rows of at most ``most`` generated batches (one training step of one phase each), spread evenly over
    the batches in ``rows`` (always the first and the last), in their order: what bounds a replay's cost when
    phases are long. Rows of a batch are never split, so replayed advantages and refills stay as training had them.
    """
    steps = sorted({(r["phase"], r["step"]) for r in rows})
    if len(steps) <= most:
        return rows
    picked = {steps[round(i * (len(steps) - 1) / (most - 1))] for i in range(most)} if most > 1 else {steps[-1]}
    return [r for r in rows if (r["phase"], r["step"]) in picked]


def groups_of(rollouts: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rollouts:
        groups[r["group_id"]].append(r)
    return dict(groups)


def is_dead(group: list[dict]) -> bool:
    """A GRPO group whose rewards are all equal: every advantage in it is zero."""
    rewards = [r["reward"] for r in group]
    return not rewards or max(rewards) - min(rewards) < SPREAD_EPS


# the figures of group_stats that are ratios of per-group sums, and their value when no group counts (denominator 0)
RATIO_FIGURES = {"reward_mean": 0.0, "dead_group_ratio": 0.0, "kept_dead_ratio": 1.0, "kept_fraction": 0.0,
                 "signal_fraction": 0.0, "truncation_rate": 0.0, "verified_rate": 0.0, "completion_tokens_mean": 0.0}


def group_parts(group: list[dict]) -> dict[str, tuple[float, float]]:
    """One group's share of each ratio figure of :func:`group_stats`, as (numerator, denominator): over any set of
    whole groups a figure is the sum of their numerators over the sum of their denominators, so a bootstrap over
    groups only adds these up (``evotrainer.judge.replay.noise_floor``)."""
    n = float(len(group))
    kept = [r for r in group if r["kept"]]
    kept_dead = bool(kept) and is_dead(kept)
    return {
        "reward_mean": (sum(r["reward"] for r in group), n),
        "dead_group_ratio": (float(is_dead(group)), 1.0),
        "kept_dead_ratio": (float(kept_dead), float(bool(kept))),
        "kept_fraction": (float(len(kept)), n),
        "signal_fraction": (0.0 if kept_dead else float(len(kept)), n),
        "truncation_rate": (float(sum(r["truncated"] for r in group)), n),
        "verified_rate": (float(sum(r["verified"] for r in group)), n),
        "completion_tokens_mean": (float(sum(r["completion_tokens"] for r in group)), n),
    }


def ratio(parts: Iterable[tuple[float, float]], empty: float = 0.0) -> float:
    """Sum of numerators over sum of denominators; ``empty`` when the denominators add up to 0."""
    num = den = 0.0
    for a, b in parts:
        num, den = num + a, den + b
    return num / den if den else empty


def group_stats(rollouts: list[dict]) -> dict[str, float]:
    """Training-signal figures of a set of rollouts (rows with reward, kept, truncated, verified, group_id).

    dead_group_ratio   groups whose rewards are all equal (no GRPO advantage), over all groups
    kept_dead_ratio    among groups that still train, those whose kept rewards are all equal
    kept_fraction      rollouts the filters let train
    signal_fraction    rollouts that train with a non-zero advantage (kept, in a group with reward spread)

    Each ratio figure is built from the groups' :func:`group_parts`.
    """
    if not rollouts:
        return {k: 0.0 for k in (*RATIO_FIGURES, "groups", "kept_groups")}
    parts = [group_parts(g) for g in groups_of(rollouts).values()]
    out = {name: ratio((p[name] for p in parts), empty) for name, empty in RATIO_FIGURES.items()}
    return {**out, "groups": float(len(parts)), "kept_groups": sum(p["kept_dead_ratio"][1] for p in parts)}


def level_history(rollouts: list[dict]) -> dict[str, dict]:
    """Per difficulty level: what the curriculum sees of the last phase (no evaluator fields)."""
    out: dict[str, dict] = {}
    by_level: dict[str, list[dict]] = defaultdict(list)
    for r in rollouts:
        by_level[r["difficulty"]].append(r)
    for level, rows in sorted(by_level.items()):
        groups = groups_of(rows)
        rewards = [r["reward"] for r in rows]
        out[level] = {
            "n": len(rows),
            "reward_mean": sum(rewards) / len(rows),
            "dead_group_ratio": sum(is_dead(g) for g in groups.values()) / max(len(groups), 1),
        }
    return out
