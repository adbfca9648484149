"""Replay: what a harness decides about fixed rollouts, computed exactly as training computes it.

The completions of a phase are fixed (the policy generated them); what a harness decides about them is replayed
in the sandbox: reward components and totals, GRPO advantages per generated batch, which rollouts the filters
keep (and dynamic sampling's capacity), the advantages the kept ones train with, which truncated ones are masked,
the curriculum's level mix, and the diagnostics registry. Totals,
advantages and the "did it train" rule are ``evotrainer.judge.scoring``'s, the same functions training calls, so a
replay of the harness a phase trained on reproduces that phase's log
(``tests/test_trainer.py::test_replay_reproduces_what_training_logged``).

The figures below (``METRICS``) are computed on replayed rows; the backtest compares main's with a candidate's.
Harness code never sees ``verified``: the metrics that use it run here, in the framework.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Callable

from evotrainer.harness.knobs import read_knobs
from evotrainer.judge.scoring import batch_advantages, capacity_cut, masked, total_reward, trains
from evotrainer.metrics import alignment, bootstrap_groups, stdev
from evotrainer.rollouts import (RATIO_FIGURES, TURN_DEFAULTS, group_parts, groups_of, harness_view, level_history,
                                 ratio)
from sandbox import HarnessError, HarnessWorker


def _batches(rows: list[dict]) -> list[list[list[dict]]]:
    """Rows as generated batches (one training step of one phase), each a list of groups in generation order."""
    batches: dict[tuple, list[list[dict]]] = defaultdict(list)
    for group in groups_of(rows).values():
        batches[(group[0]["phase"], group[0]["step"])].append(sorted(group, key=lambda r: r["sample_idx"]))
    for (phase, step), groups in batches.items():
        if len({len(g) for g in groups}) != 1:
            raise ValueError(f"phase {phase} step {step}: groups of unequal sizes cannot be replayed")
    return list(batches.values())


def _set_advantages(groups: list[list[dict]], scale: str, kept: list[bool] | None = None) -> None:
    flat = [r for g in groups for r in g]
    for r, a in zip(flat, batch_advantages([r["reward"] for r in flat], len(groups[0]), scale, kept)):
        r["advantage"] = a


def replay(worker: HarnessWorker, harness_dir: Path, rollouts: list[dict], tasks: dict[str, dict]) -> dict:
    """Replay one harness on fixed rollouts: rows (with reward, kept, trained, advantage), level mix, registry.

    In training's order: rewards, advantages of the whole batch (what filters see), the filters' decisions,
    dynamic sampling's capacity, then the advantages the kept rollouts train with, recomputed among them.
    """
    knobs = read_knobs(harness_dir)
    rollouts = [{**TURN_DEFAULTS, **r} for r in rollouts]  # a store written before the turn fields: single-turn
    samples = [{"prompt": r["prompt"], "completion": r["completion"], "task": tasks[r["task_id"]],
                "truncated": r["truncated"], "completion_tokens": r["completion_tokens"], "turns": r["turns"],
                "tool_calls": r["tool_calls"], "tool_errors": r["tool_errors"], "hit_turn_cap": r["hit_turn_cap"]}
               for r in rollouts]
    for sample, r in zip(samples, rollouts):  # a code domain's visible-test run, as training's reward saw it
        execution = (r.get("extra") or {}).get("execution")
        if execution is not None:
            sample["execution"] = execution
    components = worker.score(samples)
    rows = [{**r, "reward": total_reward(comps, knobs), "reward_components": comps}
            for r, comps in zip(rollouts, components)]
    batches = _batches(rows)
    for groups in batches:
        _set_advantages(groups, knobs.scale_rewards)
    all_groups = [g for groups in batches for g in groups]
    flags = worker.filter([[harness_view(r, tasks[r["task_id"]]) for r in g] for g in all_groups])
    decided = iter(flags)
    for groups in batches:
        gflags = [[bool(k) for k in next(decided)] for _ in groups]
        room = capacity_cut([any(f) for f in gflags], knobs.oversample)
        kept = [k and fits for f, fits in zip(gflags, room) for k in f]
        refill = [k and not fits for f, fits in zip(gflags, room) for k in f]  # kept, beyond the step's prompts
        _set_advantages(groups, knobs.scale_rewards, kept)
        for r, keep, spare in zip((r for g in groups for r in g), kept, refill):
            r["kept"], r["spare"] = keep, spare
            r["trained"] = trains(keep, masked(r["truncated"], knobs))
            if not r["trained"]:
                r["advantage"] = 0.0
    # the levels training samples from (the RL pool's, which ``tasks`` holds), not only those the retained rollouts
    # hold: a curriculum that never sampled a level must still show a change of mix when an edit brings it back
    levels = sorted({str(t["difficulty"]) for t in tasks.values()} | {r["difficulty"] for r in rows})
    history = level_history(rollouts)
    mix = _mix(worker.curriculum(levels, knobs.curriculum_weights, history), levels)
    # the mix the curriculum would give after a phase unlike the last one (each level's reward mean turned over): two
    # harnesses whose curricula agree on both, and on everything else replay shows, train alike (``judge.checks.
    # training_signature``); a curriculum that adapts to the history shows it here
    turned = {lv: {**h, "reward_mean": 1.0 - h["reward_mean"]} for lv, h in history.items()}
    try:
        mix_turned = _mix(worker.curriculum(levels, knobs.curriculum_weights, turned), levels)
    except HarnessError:  # a history training never gave it: no verdict on the harness, only no signature
        mix_turned = None
    return {"rows": rows, "mix": mix, "mix_turned": mix_turned, "knobs": knobs,
            "registry": registry(worker, rows, tasks)}


def _mix(weights: dict[str, float], levels: list[str]) -> dict[str, float]:
    """A curriculum's weights over ``levels`` as shares summing to 1."""
    total = sum(weights.get(lv, 0.0) for lv in levels) or 1.0
    return {lv: weights.get(lv, 0.0) / total for lv in levels}


def registry(worker: HarnessWorker, rows: list[dict], tasks: dict[str, dict]) -> dict:
    """The worker's harness's diagnostics over rows whose filter decisions are made (``kept`` is set)."""
    return worker.diagnostics([harness_view(r, tasks[r["task_id"]], decided=True) for r in rows])


# --- figures of replayed rows -----------------------------------------------------------------------------------
def _trained_view(rows: list[dict]) -> list[dict]:
    """group_stats counts what trains: treat masked rollouts as not kept."""
    return [{**r, "kept": r["trained"]} for r in rows]


def _stats_part(figure: str, trained: bool) -> Callable[[list[dict]], tuple[float, float]]:
    return lambda g: group_parts(_trained_view(g) if trained else g)[figure]


def _cut(g: list[dict]) -> list[dict]:
    return [r for r in g if r["truncated"] and r["trained"]]


def _cut_advantage(g: list[dict]) -> tuple[float, float]:
    cut = _cut(g)
    return sum(r["advantage"] for r in cut), float(len(cut))


def _dropped(g: list[dict]) -> tuple[float, float]:
    """verified_dropped's part of a group: (verified-correct rollouts that do not train toward themselves, verified-
    correct rollouts). A rollout does not when it is filtered, masked, or trains with an advantage <= 0.

    A correct rollout in an all-correct group has zero advantage on any harness, so dropping that group loses
    nothing; a correct rollout that loses its positive advantage is a real loss of signal. Rollouts the filters kept
    but dynamic sampling had no room for (``spare``: with ``oversample: k`` a step generates k times the groups it
    trains) are not a loss: in training they are the extra generation, not signal the batch would have had.
    """
    correct = [r for r in g if r["verified"]]
    lost = sum(not (r["trained"] and r["advantage"] > 1e-9 or r.get("spare")) for r in correct)
    return float(lost), float(len(correct))


# figures that are a ratio of per-group sums: one group's (numerator, denominator), and the figure's value when the
# denominators add up to 0. The figure is computed from these parts, and so is its noise floor (``noise_floor``)
PARTS: dict[str, tuple[Callable[[list[dict]], tuple[float, float]], float]] = {
    "dead_group_ratio": (_stats_part("dead_group_ratio", False), RATIO_FIGURES["dead_group_ratio"]),
    **{name: (_stats_part(name, True), RATIO_FIGURES[name]) for name in ("kept_dead_ratio", "signal_fraction",
                                                                          "kept_fraction")},
    "trained_truncated_rate": (lambda g: (float(len(_cut(g))), float(len(g))), 0.0),
    "truncated_advantage": (_cut_advantage, 0.0),
    "verified_dropped": (_dropped, 0.0),  # share of verified-correct rollouts that stop training toward themselves
}


def _by_parts(name: str) -> Callable[[list[dict]], float]:
    part, empty = PARTS[name]
    return lambda rows: ratio((part(g) for g in groups_of(rows).values()), empty) if rows else 0.0


METRICS: dict[str, Callable[[list[dict]], float]] = {
    **{name: _by_parts(name) for name in PARTS},
    "reward_verified_auc": lambda rs: alignment(rs)["reward_verified_auc"],
    "ordering_violations": lambda rs: alignment(rs)["ordering_violations"],
}


def present_weights(mix: dict[str, float] | None, present) -> dict[str, float] | None:
    """``mix`` restricted to the levels ``present`` in the rows and renormalised: a level the rows do not hold cannot
    be replayed, so its weight is left out rather than counted as zero. None when ``mix`` is None or weighs none of
    them (then the rows' own mix stands)."""
    if mix is None:
        return None
    weights = {lv: mix.get(lv, 0.0) for lv in present}
    total = sum(weights.values())
    return {lv: w / total for lv, w in weights.items()} if total > 0 else None


def mixed(rows: list[dict], stat: Callable[[list[dict]], float], mix: dict[str, float] | None) -> float:
    """``stat`` over rows, re-weighting difficulty levels to ``mix`` (None = the rows' own mix;
    :func:`present_weights`)."""
    by_level: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_level[r["difficulty"]].append(r)
    weights = present_weights(mix, by_level)
    if weights is None:
        return stat(rows)
    return sum(weights[lv] * stat(rs) for lv, rs in by_level.items())


def noise_floor(rows: list[dict], metric: str, mix: dict[str, float] | None, resamples: int, seed: int = 0) -> float:
    """1.96 x the standard deviation of ``mixed(rows, METRICS[metric], mix)`` over ``resamples`` resamples of whole
    groups. A figure of ``PARTS`` is a ratio of per-group sums: each group is reduced to its parts once and a
    resample only adds them up, per difficulty level (0.3 s for 200 resamples of a 30,720-rollout replay, against
    15 s recomputing the figure on each resample's rows, which any other figure does: ``metrics.bootstrap_groups``).
    """
    if metric not in PARTS:
        return 1.96 * stdev(bootstrap_groups(rows, lambda rs: mixed(rs, METRICS[metric], mix), resamples, seed))
    part, empty = PARTS[metric]
    parts = [(g[0]["difficulty"], *part(g)) for g in groups_of(rows).values()]
    if not parts:
        return 0.0

    def figure(sample: list[tuple[str, float, float]]) -> float:
        by_level: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for level, a, b in sample:
            by_level[level].append((a, b))
        weights = present_weights(mix, by_level)
        if weights is None:
            return ratio(((a, b) for _, a, b in sample), empty)
        return sum(weights[level] * ratio(ps, empty) for level, ps in by_level.items())

    rng = random.Random(seed)
    return 1.96 * stdev([figure(rng.choices(parts, k=len(parts))) for _ in range(resamples)])
