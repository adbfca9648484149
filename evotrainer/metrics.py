"""Statistics shared by the Diagnostician and the Backtester: intervals, bootstrap, reward/verified alignment.

Every number an agent puts in a diagnosis or a backtest report comes with its uncertainty, computed here:
Wilson intervals for rates, a bootstrap over GRPO groups (the unit that is sampled) for group-level figures,
and the alignment of a harness reward with the evaluator's ``verified`` (AUC, correlation, ordering violations
inside groups).
"""

from __future__ import annotations

import functools
import math
import random
import statistics
from typing import Any, Callable, TypeVar

from evotrainer.contracts import MetricEvidence
from evotrainer.rollouts import groups_of, ratio

T = TypeVar("T")


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_evidence(name: str, hits: float, n: int, threshold: float | None = None) -> MetricEvidence:
    low, high = wilson(hits, n)
    return MetricEvidence(name=name, value=hits / n if n else 0.0, low=low, high=high, n=n, threshold=threshold)


def bootstrap_groups(rollouts: list[dict], stat: Callable[[list[dict]], T], resamples: int = 200,
                     seed: int = 0) -> list[T]:
    """``stat`` over ``resamples`` resamples of whole groups (with replacement).

    A group drawn twice is relabelled, so that group-level statistics count it twice; under its own id the two
    copies would merge into one group and the resample would act like a subsample, shrinking the spread.
    """
    groups = list(groups_of(rollouts).values())
    if not groups:
        return []  # nothing to resample: no spread (stdev of no values is 0)
    rng = random.Random(seed)
    copies: dict[tuple[int, int], list[dict]] = {}  # (group, k): the group's k-th relabelled copy, made once

    def copy(g: int, k: int) -> list[dict]:
        if k == 0:
            return groups[g]  # a group's first draw keeps its own rows
        if (g, k) not in copies:
            copies[g, k] = [{**r, "group_id": f"{r['group_id']}#{k}"} for r in groups[g]]
        return copies[g, k]

    out = []
    for _ in range(resamples):
        seen: dict[int, int] = {}
        sample: list[dict] = []
        for g in (rng.randrange(len(groups)) for _ in groups):
            sample.extend(copy(g, seen.get(g, 0)))
            seen[g] = seen.get(g, 0) + 1
        out.append(stat(sample))
    return out


def interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """The central ``level`` percentile interval of ``values``."""
    s = sorted(values)
    tail = (1 - level) / 2
    lo = s[int(tail * (len(s) - 1))]
    hi = s[int(math.ceil((1 - tail) * (len(s) - 1)))]
    return lo, hi


def stdev(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def ratio_evidence(name: str, rollouts: list[dict], per_group: Callable[[list[dict]], tuple[float, float]],
                   resamples: int = 200, threshold: float | None = None, seed: int = 0,
                   empty: float = 0.0) -> MetricEvidence:
    """A ratio over groups (sum of numerators / sum of denominators) with a group-bootstrap interval.

    ``per_group`` reduces one group to its (numerator, denominator), e.g. (1 if dead, 1) for the dead-group ratio;
    ``empty`` is the ratio when every denominator is zero.
    Each group is reduced once and the resamples only add pairs up, so this is far cheaper than running a
    statistic over relabelled rows (``bootstrap_groups``) while giving the same interval.
    """
    pairs = [per_group(g) for g in groups_of(rollouts).values()]
    value = ratio(pairs, empty)
    if not pairs:
        return MetricEvidence(name=name, value=value, low=0.0, high=1.0, n=0, threshold=threshold)
    rng = random.Random(seed)
    lo, hi = interval([ratio(rng.choices(pairs, k=len(pairs)), empty) for _ in range(resamples)])
    return MetricEvidence(name=name, value=value, low=min(lo, value), high=max(hi, value), n=len(pairs),
                          threshold=threshold)


def auc(scores: list[float], labels: list[bool]) -> float:
    """P(score of a positive > score of a negative), ties counted half. 0.5 when one class is missing."""
    pos = sorted(s for s, y in zip(scores, labels) if y)
    neg = sorted(s for s, y in zip(scores, labels) if not y)
    if not pos or not neg:
        return 0.5
    wins = 0.0
    # rank-based: for each positive, count negatives below (and half the ties)
    import bisect

    for s in pos:
        lo = bisect.bisect_left(neg, s)
        hi = bisect.bisect_right(neg, s)
        wins += lo + 0.5 * (hi - lo)
    return wins / (len(pos) * len(neg))


def correlation(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.sqrt(sxx * syy)


def ordering_violations(rollouts: list[dict]) -> float:
    """Among (verified-correct, verified-wrong) pairs in the same group, the share the reward ranks wrongly.

    A pair is violated when the wrong completion gets a reward >= the correct one minus nothing: strictly
    higher counts 1, a tie counts 1/2 (the reward cannot tell them apart). 0 is perfect alignment.
    """
    bad = 0.0
    pairs = 0
    for group in groups_of(rollouts).values():
        good = [r["reward"] for r in group if r["verified"]]
        wrong = [r["reward"] for r in group if not r["verified"]]
        for g in good:
            for w in wrong:
                pairs += 1
                bad += 1.0 if w > g else (0.5 if w == g else 0.0)
    return bad / pairs if pairs else 0.0


def alignment(rollouts: list[dict]) -> dict[str, float]:
    rewards = [r["reward"] for r in rollouts]
    verified = [bool(r["verified"]) for r in rollouts]
    return {
        "reward_verified_auc": auc(rewards, verified),
        "reward_verified_corr": correlation(rewards, [float(v) for v in verified]),
        "ordering_violations": ordering_violations(rollouts),
    }


def paired_gain(pairs: list[tuple[dict[str, float], dict[str, float]]], resamples: int = 2000, seed: int = 0,
                level: float = 0.95) -> dict[str, float]:
    """The mean gain of B over A on the same items, paired per item and per replicate, with a ``level`` interval.

    ``pairs`` holds one (A items, B items) per replicate (e.g. per seed of an A/B trial), each a dict item id ->
    score. The interval is a two-level bootstrap: replicates are resampled, then items, so it carries both the
    item-sampling noise and the run-to-run noise of training. Raises ValueError when A and B scored other items,
    or a replicate other items than the first (an item is resampled at the same index in every replicate).
    """
    if not pairs:
        raise ValueError("paired_gain needs at least one (A, B) pair")
    diffs = []
    for a, b in pairs:
        if set(a) != set(b) or not a:
            raise ValueError(f"paired comparison needs the same items on both sides ({len(set(a) ^ set(b))} differ)")
        if set(a) != set(pairs[0][0]):
            raise ValueError(f"paired comparison needs the same items in every replicate "
                             f"({len(set(a) ^ set(pairs[0][0]))} differ from the first's)")
        diffs.append([b[k] - a[k] for k in sorted(a)])
    n = len(diffs[0])
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        reps = [diffs[rng.randrange(len(diffs))] for _ in diffs]
        idx = [rng.randrange(n) for _ in range(n)]
        means.append(sum(d[i] for d in reps for i in idx) / (n * len(reps)))
    lo, hi = interval(means, level)
    return {"diff": sum(map(sum, diffs)) / (n * len(diffs)), "low": lo, "high": hi, "n": n}


def pooled_gain(groups: dict[str, list[tuple[dict[str, float], dict[str, float]]]], resamples: int = 2000,
                seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """The gain of B over A pooled over groups of replicates (for the fault bench: defects, each with its seeds),
    paired per item within each replicate, with a hierarchical bootstrap interval: groups are resampled, then the
    replicates of each drawn group, then the items of each drawn replicate.

    ``groups`` maps a group's name to its replicates, each one (A items, B items) as ``paired_gain`` takes them
    (item id -> score, the same items on both sides: A and B trained on the same stream, so an arm identical to its
    baseline gains exactly 0 in every resample, and the interval is 0 to 0). The estimate weighs every group
    equally and, within a group, every replicate equally: the mean over groups of the mean over replicates of the
    mean per-item gain. Items are resampled independently in each drawn replicate (replicates need not share
    items), so the interval carries the spread between groups, between replicates and between items. Returns
    ``{"diff", "low", "high", "groups", "replicates"}``; raises ValueError for no group, a group without
    replicates, or a replicate whose two sides scored other items.
    """
    import numpy as np

    if not groups or any(not reps for reps in groups.values()):
        raise ValueError("pooled_gain needs at least one group, each with at least one (A, B) pair")
    diffs: list[list[Any]] = []
    for name in sorted(groups):
        per_group = []
        for a, b in groups[name]:
            if set(a) != set(b) or not a:
                raise ValueError(f"{name}: a paired comparison needs the same items on both sides "
                                 f"({len(set(a) ^ set(b))} differ)")
            per_group.append(np.array([b[k] - a[k] for k in sorted(a)], dtype=float))
        diffs.append(per_group)
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(resamples):
        total = 0.0
        for g in rng.integers(len(diffs), size=len(diffs)):
            reps = diffs[g]
            total += sum(float(reps[r][rng.integers(len(reps[r]), size=len(reps[r]))].mean())
                         for r in rng.integers(len(reps), size=len(reps))) / len(reps)
        means.append(total / len(diffs))
    lo, hi = interval(means, level)
    diff = sum(sum(float(d.mean()) for d in reps) / len(reps) for reps in diffs) / len(diffs)
    return {"diff": diff, "low": lo, "high": hi, "groups": len(diffs), "replicates": sum(map(len, diffs))}


def gain_over_stream(arm: dict[int, float], baseline: dict[int, list[float]], level: float = 0.95
                     ) -> dict[str, float]:
    """An arm's gain over the baseline trained on the same stream, with an interval that counts training noise.

    ``arm`` holds one final accuracy per seed; ``baseline`` the same harness's runs per seed, the first of them on
    the arm's own training stream (for the bench: static at rerun 0, then its reruns, identical but for training's
    randomness). Per seed the gain is the arm minus that first run: the same stream, so an arm identical to the
    baseline gains exactly 0 (against the mean of all the runs it would score the first run's luck). The runs'
    spread within a seed estimates run-to-run noise (sd ``run_sd``), which a per-item bootstrap over a few seeds
    cannot see; a gain is the difference of two runs, so under no effect its variance is twice that. The interval is
    a Student t interval over seeds whose variance pools the gains' spread across seeds (S - 1 degrees of freedom)
    with twice the runs' within-seed variance (one degree per extra run), assuming the arm's runs are as noisy as
    the baseline's. Raises ValueError when no seed has two runs or the seeds differ.
    """
    from scipy.stats import t as student_t

    if set(arm) != set(baseline) or not arm:
        raise ValueError(f"the arm and the baseline need the same seeds ({sorted(arm)} vs {sorted(baseline)})")
    seeds = sorted(arm)
    gains = [arm[s] - baseline[s][0] for s in seeds]  # the same seed and training stream
    centre = {s: sum(baseline[s]) / len(baseline[s]) for s in seeds}
    within = sum((y - centre[s]) ** 2 for s in seeds for y in baseline[s])
    df_within = sum(len(baseline[s]) - 1 for s in seeds)
    if df_within < 1:
        raise ValueError("the baseline needs at least two runs of one seed to measure training noise")
    mean = sum(gains) / len(gains)
    between = sum((g - mean) ** 2 for g in gains)
    df = len(seeds) - 1 + df_within
    half = student_t.ppf(0.5 + level / 2, df) * math.sqrt((between + 2 * within) / df / len(seeds))
    return {"diff": mean, "low": float(mean - half), "high": float(mean + half), "df": df,
            "run_sd": math.sqrt(within / df_within), "seeds": len(seeds)}


def quarter_shift(series: list[float], z: float = 1.96) -> tuple[float, float, float, float] | None:
    """How a per-step series moved within a phase: (mean of its first quarter, of its last quarter, and the normal
    interval of last minus first from the two quarters' spreads, low and high). Neighbouring steps are correlated,
    so the interval is optimistic; rules that read it also ask for a size. None for fewer than 8 steps."""
    if len(series) < 8:
        return None
    q = len(series) // 4
    first, last = series[:q], series[-q:]
    a, b = sum(first) / q, sum(last) / q
    half = z * math.sqrt((stdev(first) ** 2 + stdev(last) ** 2) / q)
    return a, b, b - a - half, b - a + half


def unpaired_margin(a0: float, n0: int, a1: float, n1: int, z: float = 1.96) -> float:
    """Half-width of the normal interval of a difference of two rates (``a1 - a0``, measured on n1 and n0 items):
    the one margin used wherever two accuracies cannot be paired per item."""
    return z * math.sqrt(a0 * (1 - a0) / max(n0, 1) + a1 * (1 - a1) / max(n1, 1))


@functools.lru_cache(maxsize=512)
def paired_change(before: tuple[tuple[str, float], ...], after: tuple[tuple[str, float], ...], resamples: int,
                  level: float = 0.95) -> dict[str, Any]:
    """``paired_gain`` of two results' item scores, once per process (a report asks again and again, and published
    phases never change)."""
    g = paired_gain([(dict(before), dict(after))], resamples=resamples, level=level)
    return {"change": g["diff"], "low": g["low"], "high": g["high"], "n": g["n"], "method": "paired bootstrap"}


def accuracy_change(before, after, resamples: int = 2000, level: float = 0.95) -> dict[str, Any]:
    """How accuracy moved between two EvalResults, ``after - before`` with a ``level`` interval: a paired bootstrap over
    the items both scored (the usual case: a split is frozen), else, when either side has no per-item results, the
    unpaired normal interval (:func:`unpaired_margin`). ``{"change", "low", "high", "n", "method"}``, ``method``
    being "paired bootstrap" or "unpaired normal"."""
    common = sorted(set(before.items) & set(after.items))
    if common:
        return dict(paired_change(tuple((k, before.items[k]) for k in common),
                                  tuple((k, after.items[k]) for k in common), resamples, level))
    a0, a1 = before.accuracy, after.accuracy
    half = unpaired_margin(a0, before.n, a1, after.n, z=statistics.NormalDist().inv_cdf(0.5 + level / 2))
    return {"change": a1 - a0, "low": a1 - a0 - half, "high": a1 - a0 + half, "n": min(before.n, after.n),
            "method": "unpaired normal"}
