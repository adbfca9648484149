"""The statistics behind every interval and noise floor: the group bootstrap must have the spread of the truth."""

from __future__ import annotations

import math
import random

import pytest

from evotrainer.metrics import bootstrap_groups, ratio_evidence, stdev, wilson
from evotrainer.rollouts import group_stats, is_dead


def groups(n: int, dead_share: float, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for g in range(n):
        dead = rng.random() < dead_share
        for k in range(8):
            rows.append({"group_id": f"g{g}", "reward": 0.0 if dead else float(k % 2), "kept": True,
                         "verified": not dead and k % 2 == 1, "truncated": False, "completion_tokens": 3})
    return rows


def dead(rs: list[dict]) -> float:
    return group_stats(rs)["dead_group_ratio"]


def test_group_bootstrap_has_the_binomial_spread_of_a_group_share():
    rows = groups(200, 0.3)
    p = dead(rows)
    expected = math.sqrt(p * (1 - p) / 200)  # each group is one Bernoulli draw
    assert stdev(bootstrap_groups(rows, dead, 400)) == pytest.approx(expected, rel=0.15)


def test_ratio_evidence_matches_the_row_level_bootstrap():
    rows = groups(200, 0.3)
    ev = ratio_evidence("dead", rows, lambda g: (is_dead(g), 1), resamples=400)
    half = 1.96 * math.sqrt(ev.value * (1 - ev.value) / 200)
    assert ev.value == dead(rows) and ev.n == 200
    assert ev.low == pytest.approx(ev.value - half, abs=0.02) and ev.high == pytest.approx(ev.value + half, abs=0.02)
    assert ratio_evidence("none", [], lambda g: (1, 1)).n == 0


def test_wilson_interval_contains_the_estimate_and_shrinks_with_n():
    lo, hi = wilson(30, 100)
    assert lo < 0.3 < hi
    lo2, hi2 = wilson(300, 1000)
    assert hi2 - lo2 < hi - lo and wilson(0, 0) == (0.0, 1.0)


def _item_scores(probs: dict[str, float], rng: random.Random, k: int = 1) -> dict[str, float]:
    """Per item, the share of k samples that come out right (k = 1: greedy-like 0/1 items)."""
    return {i: sum(rng.random() < p for _ in range(k)) / k for i, p in probs.items()}


def test_paired_comparison_detects_a_real_gain_that_an_unpaired_interval_misses():
    from evotrainer.metrics import paired_gain

    rng = random.Random(0)
    a = {f"eval-{i}": float(rng.random() < 0.4) for i in range(300)}
    wrong = [i for i, v in a.items() if v == 0]
    b = {**a, **{i: 1.0 for i in rng.sample(wrong, 12)}}  # 12 of 300 items fixed: +4 points, nothing broken
    got = paired_gain([(a, b)])
    assert got["diff"] == pytest.approx(12 / 300) and got["n"] == 300
    assert 0 < got["low"] < got["diff"] < got["high"]
    unpaired_half = 1.96 * math.sqrt(2 * 0.4 * 0.6 / 300)  # ~ +-7.8 points: would call this noise
    assert got["diff"] < unpaired_half and got["high"] - got["low"] < unpaired_half


def test_paired_comparison_of_equal_checkpoints_straddles_zero():
    from evotrainer.metrics import paired_gain

    rng = random.Random(1)
    probs = {f"eval-{i}": rng.choice([0.0, 0.1, 0.5, 0.9, 1.0]) for i in range(300)}
    misses = 0
    for trial in range(30):  # two samples of one policy, sampled pass@1 with k = 4
        a, b = _item_scores(probs, rng, 4), _item_scores(probs, rng, 4)
        got = paired_gain([(a, b)], resamples=300, seed=trial)
        assert 0 < got["diff"] - got["low"] and 0 < got["high"] - got["diff"]
        misses += not got["low"] <= 0 <= got["high"]
    assert misses <= 4  # a 95% interval: about 1.5 of 30 expected


def test_paired_comparison_refuses_different_items():
    from evotrainer.metrics import paired_gain

    a = {"eval-1-0": 1.0, "eval-1-1": 0.0}
    with pytest.raises(ValueError, match="same items"):
        paired_gain([(a, {"eval-1-0": 1.0, "eval-1-2": 0.0})])
    with pytest.raises(ValueError):
        paired_gain([({}, {})])
    more = {**a, "eval-1-2": 1.0, "eval-1-3": 1.0}  # a second replicate scored on more items than the first
    with pytest.raises(ValueError, match="same items in every replicate"):
        paired_gain([(a, a), (more, more)])
    with pytest.raises(ValueError, match="same items in every replicate"):
        paired_gain([(more, more), (a, a)])


def _fixed(a: dict[str, float], k: int, rng: random.Random) -> dict[str, float]:
    """``a`` with ``k`` of its wrong items made right: a gain of exactly k / len(a)."""
    return {**a, **{i: 1.0 for i in rng.sample([i for i, v in a.items() if v == 0], k)}}


def test_pooled_gain_of_an_arm_identical_to_its_baseline_is_exactly_zero():
    """The fault bench pools evotrainer - static over defects, seeds and items: equal arms give 0, interval 0."""
    from evotrainer.metrics import pooled_gain

    rng = random.Random(0)
    groups = {}
    for d in ("truncation", "divergence", "starvation"):
        reps = [{f"eval-{i}": float(rng.random() < 0.3) for i in range(200)} for _ in range(3)]
        groups[d] = [(a, dict(a)) for a in reps]
    got = pooled_gain(groups, resamples=300)
    assert got == {"diff": 0.0, "low": 0.0, "high": 0.0, "groups": 3, "replicates": 9}


def test_pooled_gain_recovers_a_known_shift_and_its_interval_spans_the_defects():
    """Defect d1 gains 10 points on every seed, d2 20: the pooled gain is 15 exactly (defects weigh equally), and
    resampling the defects puts the interval's ends near 10 and 20 (plus the items' noise)."""
    from evotrainer.metrics import pooled_gain

    rng = random.Random(1)

    def seeds(k: int, n: int = 400) -> list[tuple[dict, dict]]:
        out = []
        for _ in range(3):
            a = {f"eval-{i}": float(rng.random() < 0.3) for i in range(n)}
            out.append((a, _fixed(a, k, rng)))
        return out

    got = pooled_gain({"d1": seeds(40), "d2": seeds(80)}, resamples=1000)
    assert got["diff"] == pytest.approx(0.15) and got["groups"] == 2 and got["replicates"] == 6
    assert 0.05 < got["low"] < 0.11 and 0.19 < got["high"] < 0.25  # the defects' spread, not only the items'
    one = pooled_gain({"d1": seeds(40)}, resamples=1000)  # one defect: seeds and items only, a narrow interval
    assert one["diff"] == pytest.approx(0.10) and 0.07 < one["low"] < 0.10 < one["high"] < 0.13
    # defects weigh equally whatever their number of seeds; items need not be shared between replicates
    uneven = pooled_gain({"d1": seeds(40)[:1], "d2": seeds(80, n=200)}, resamples=200)
    assert uneven["diff"] == pytest.approx((0.10 + 0.40) / 2)


def test_pooled_gain_refuses_what_it_cannot_pair():
    from evotrainer.metrics import pooled_gain

    a = {"eval-0": 1.0, "eval-1": 0.0}
    with pytest.raises(ValueError, match="d1: a paired comparison needs the same items"):
        pooled_gain({"d1": [(a, {"eval-0": 1.0})]})
    for empty in ({}, {"d1": []}):
        with pytest.raises(ValueError, match="at least one group"):
            pooled_gain(empty)


def _runs(rng: random.Random, effect: float, noise: float, seeds: int = 3, replicates: int = 2):
    """One arm run and ``replicates`` baseline runs per seed: a seed's level, plus training noise per run."""
    level = {s: rng.uniform(0.15, 0.35) for s in range(seeds)}
    arm = {s: level[s] + effect + rng.gauss(0, noise) for s in level}
    return arm, {s: [level[s] + rng.gauss(0, noise) for _ in range(replicates)] for s in level}


def test_gain_over_stream_counts_training_noise_at_its_nominal_rate():
    from evotrainer.metrics import gain_over_stream

    rng = random.Random(2)
    misses = 0
    for _ in range(2000):  # no effect, 2 points of training noise per run, 3 seeds: covers 0 about 95% of the time
        got = gain_over_stream(*_runs(rng, 0.0, 0.02))
        misses += not got["low"] <= 0 <= got["high"]
    assert 0.035 <= misses / 2000 <= 0.065
    found = sum(gain_over_stream(*_runs(rng, 0.08, 0.02))["low"] > 0 for _ in range(200))
    assert found >= 180  # a gain of 4 run sds is seen
    # the bench of stop 20 (static, static_rerun and evotrainer at 3 seeds), worked by hand: gains -2.0, 0, 0 points
    # over static on the same stream (over the static runs' means they were -0.8, +0.9, +0.9: static's own luck);
    # within-seed spread 6.12e-4 (3 df); a gain is two runs apart: twice that; t(0.975, 5 df) = 2.5706
    got = gain_over_stream({0: .343, 1: .188, 2: .283}, {0: [.363, .339], 1: [.188, .170], 2: [.283, .265]})
    half = 2.5706 * math.sqrt((0.00026667 + 2 * 0.000612) / 5 / 3)
    assert got["diff"] == pytest.approx(-0.006667, abs=1e-6) and got["df"] == 5
    assert got["high"] - got["diff"] == pytest.approx(half, rel=1e-3) and got["run_sd"] == pytest.approx(0.01428, 1e-3)


def test_an_arm_identical_to_static_on_its_stream_gains_exactly_zero():
    from evotrainer.metrics import gain_over_stream

    static = {0: [0.30, 0.27, 0.33], 1: [0.21, 0.25, 0.20], 2: [0.28, 0.31, 0.29]}  # static first, then its reruns
    got = gain_over_stream({s: runs[0] for s, runs in static.items()}, static)
    assert got["diff"] == 0.0 and got["low"] < 0 < got["high"]


def test_gain_over_stream_needs_replicates_and_the_same_seeds():
    from evotrainer.metrics import gain_over_stream

    with pytest.raises(ValueError, match="at least two runs"):
        gain_over_stream({0: 0.3, 1: 0.2}, {0: [0.3], 1: [0.25]})
    with pytest.raises(ValueError, match="same seeds"):
        gain_over_stream({0: 0.3}, {1: [0.3, 0.31]})


def _replayed(n_groups: int, seed: int) -> list[dict]:
    """Replayed rows of four levels: kept/trained/truncated decisions and advantages drawn at random."""
    rng = random.Random(seed)
    rows = []
    for g in range(n_groups):
        level = str(1 + g % 4)
        p = {"1": 0.9, "2": 0.4, "3": 0.2, "4": 0.05}[level]
        keep_group = rng.random() < 0.8
        for k in range(4):
            right = rng.random() < p
            kept = keep_group and rng.random() < 0.9
            agrees = rng.random() < 0.9  # the harness's reward disagrees with the verifier on a tenth
            rows.append({"group_id": f"g{g}", "difficulty": level, "reward": float(right == agrees), "verified": right,
                         "kept": kept, "trained": kept and rng.random() < 0.95, "truncated": rng.random() < 0.1,
                         "advantage": rng.uniform(-1, 1), "completion_tokens": rng.randrange(1, 9)})
    return rows


def test_figures_built_from_group_parts_are_the_figures_over_rows():
    from evotrainer.judge.replay import METRICS, PARTS

    rows = _replayed(120, seed=3)
    trained_view = [{**r, "kept": r["trained"]} for r in rows]
    cut = [r for r in rows if r["truncated"] and r["trained"]]
    expected = {
        "dead_group_ratio": sum(is_dead(g) for g in _groups(rows)) / 120,
        "kept_dead_ratio": group_stats(trained_view)["kept_dead_ratio"],
        "signal_fraction": group_stats(trained_view)["signal_fraction"],
        "kept_fraction": sum(r["trained"] for r in rows) / len(rows),
        "trained_truncated_rate": len(cut) / len(rows),
        "truncated_advantage": sum(r["advantage"] for r in cut) / len(cut),
        "verified_dropped": sum(not (r["trained"] and r["advantage"] > 1e-9) for r in rows if r["verified"])
        / sum(r["verified"] for r in rows),
    }
    assert sorted(PARTS) == sorted(expected)
    assert {k: METRICS[k](rows) for k in expected} == pytest.approx(expected, rel=1e-12)
    kept = [g for g in _groups(trained_view) if any(r["kept"] for r in g)]
    assert expected["kept_dead_ratio"] == pytest.approx(
        sum(is_dead([r for r in g if r["kept"]]) for g in kept) / len(kept))
    assert {k: METRICS[k]([]) for k in expected} == {k: 0.0 for k in expected}
    none_trained = [{**r, "trained": False} for r in rows]
    assert METRICS["kept_dead_ratio"](none_trained) == 1.0 and METRICS["truncated_advantage"](none_trained) == 0.0


def _groups(rows: list[dict]) -> list[list[dict]]:
    from evotrainer.rollouts import groups_of

    return list(groups_of(rows).values())


@pytest.mark.parametrize("metric", ["dead_group_ratio", "kept_dead_ratio", "trained_truncated_rate",
                                    "truncated_advantage", "verified_dropped"])
@pytest.mark.parametrize("mix", [None, {"1": 0.1, "2": 0.4, "3": 0.4, "4": 0.1}])
def test_the_noise_floor_from_group_parts_has_the_spread_of_the_row_bootstrap(metric, mix):
    """The backtest's noise floor of a figure made of group parts adds the parts of each resample up; recomputing
    the figure on each resample's rows (the generic path, for any figure) gives the same spread."""
    from evotrainer.judge.replay import METRICS, mixed, noise_floor

    rows = _replayed(400, seed=5)
    fast = noise_floor(rows, metric, mix, resamples=400)
    slow = 1.96 * stdev(bootstrap_groups(rows, lambda rs: mixed(rs, METRICS[metric], mix), 400, seed=1))
    assert fast > 0 and fast == pytest.approx(slow, rel=0.15)
    assert noise_floor([], metric, mix, 50) == 0.0
    # a figure without parts takes the generic path
    assert noise_floor(rows, "reward_verified_auc", mix, 50) > 0
