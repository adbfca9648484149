"""What training learned on each difficulty level: the figure task levels must be calibrated on for the bench to
see anything (a harness can only amplify learning that training produces).

    evotrainer bench runs/learn --arms static --calibration --seeds 100,101,102 --phases 2 --set training.steps_per_phase=1000
    python benchmarks/learnability.py runs/learn/static-seed*        # any run directories that trained

For each run it prints, per level of the held-out split: the accuracy of the starting policy, after each phase, and
the gain from the start to the last phase paired per item with its 95% interval (``metrics.paired_gain``), per level
and over all levels; with several runs, also the gain pooled over them (runs as replicates, then items). A level whose interval holds 0
taught nothing at that budget. ``--tolerant`` reads the tolerant score instead (``EvalResult.tolerant``: formatting
slips such as the warm-up's trailing period forgiven), so a gain there is more than the answer's form
(docs/preregistration/tolerant-learning.md). ``--json PATH`` writes the figures. It reads the runs' files only:
nothing trains.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evotrainer.metrics import paired_gain
from evotrainer.report.history import phase_results
from evotrainer.rundir import RunDir


def run_levels(run_dir: Path, tolerant: bool = False) -> dict:
    """Per level of ``run_dir``'s held-out split: item scores at the start and after each trained phase (under the
    tolerant score with ``tolerant``)."""
    rd = RunDir(run_dir)
    start, results = rd.baseline(), phase_results(rd)
    if start is None or not results:
        raise SystemExit(f"{run_dir}: no starting evaluation or no trained phase (is it a run that trained?)")
    scored = [start, *(r.eval for r in results)]
    if tolerant:
        scored = [ev.tolerant() for ev in scored]
        if None in scored:
            raise SystemExit(f"{run_dir}: an evaluation without the tolerant score (made before it was measured): "
                             "train the run again to read it")
    level = {t["id"]: str(t["difficulty"]) for t in rd.eval_tasks()}
    stages = [("start", 0, scored[0].items)]
    for result, ev in zip(results, scored[1:]):
        stages.append((f"phase {result.phase}", stages[-1][1] + result.steps, ev.items))
    levels: dict[str, dict] = {}
    for name in sorted(set(level.values())):
        ids = [i for i, lv in level.items() if lv == name]
        scores = [{i: items[i] for i in ids} for _, _, items in stages]
        levels[name] = {"n": len(ids), "accuracy": [sum(s.values()) / len(ids) for s in scores], "scores": scores}
    return {"run": str(run_dir), "stages": [(name, n) for name, n, _ in stages], "levels": levels}


def every_level(run: dict) -> tuple[dict, dict]:
    """A run's item scores over all its levels at once: (at the start, after the last phase)."""
    return tuple({i: x for lv in run["levels"].values() for i, x in lv["scores"][k].items()} for k in (0, -1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--tolerant", action="store_true", help="the tolerant score (formatting slips forgiven)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    runs = [run_levels(r, a.tolerant) for r in a.runs]
    out: dict = {"score": "tolerant" if a.tolerant else "strict", "runs": [], "pooled": {}}
    if a.tolerant:
        print("tolerant score (formatting slips forgiven):")
    for run in runs:
        print(f"{run['run']}: " + ", ".join(f"{name} ({n} steps)" if n else name for name, n in run["stages"]))
        rows = {}
        for name, lv in run["levels"].items():
            gain = paired_gain([(lv["scores"][0], lv["scores"][-1])])
            rows[name] = {"n": lv["n"], "accuracy": lv["accuracy"], "gain": gain}
            path = " -> ".join(f"{acc:.1%}" for acc in lv["accuracy"])
            print(f"  level {name} (n={lv['n']}): {path}; gain {gain['diff']:+.1%} "
                  f"(95% CI {gain['low']:+.1%} to {gain['high']:+.1%})")
        whole = paired_gain([every_level(run)])
        print(f"  all levels: gain {whole['diff']:+.1%} (95% CI {whole['low']:+.1%} to {whole['high']:+.1%})")
        out["runs"].append({"run": run["run"], "stages": run["stages"], "levels": rows, "all": whole})
    if len(runs) > 1:
        print(f"pooled over {len(runs)} runs (runs, then items, resampled):")
        for name in sorted(set.intersection(*(set(r["levels"]) for r in runs))):
            pairs = [(r["levels"][name]["scores"][0], r["levels"][name]["scores"][-1]) for r in runs]
            if len({len(a) for a, _ in pairs}) > 1:  # other seeds drew other level sizes: pool by mean only
                diffs = [sum(b.values()) / len(b) - sum(a.values()) / len(a) for a, b in pairs]
                gain = {"diff": sum(diffs) / len(diffs), "low": min(diffs), "high": max(diffs), "n": None}
                how = "range over runs"
            else:
                gain, how = paired_gain(pairs), "95% CI"
            out["pooled"][name] = gain
            print(f"  level {name}: gain {gain['diff']:+.1%} ({how} {gain['low']:+.1%} to {gain['high']:+.1%})")
        # every level at once: the criterion's figure (docs/preregistration/learnability.md)
        gain = paired_gain([every_level(r) for r in runs])
        out["pooled"]["all"] = gain
        print(f"  all levels: gain {gain['diff']:+.1%} (95% CI {gain['low']:+.1%} to {gain['high']:+.1%})")
        by_seed: dict[int, list[float]] = {}
        for r in runs:
            final = sum(sum(lv["scores"][-1].values()) for lv in r["levels"].values()) / sum(
                lv["n"] for lv in r["levels"].values())
            by_seed.setdefault(RunDir(r["run"]).load_config().seed, []).append(final)
        twice = [v for v in by_seed.values() if len(v) > 1]
        if twice:  # pooled within-seed sd of the final accuracy: run-to-run noise on one seed
            ss = sum(sum((x - sum(v) / len(v)) ** 2 for x in v) for v in twice)
            sd = (ss / sum(len(v) - 1 for v in twice)) ** 0.5
            out["run_sd"] = sd
            print(f"  final accuracy, sd between runs of one seed (pooled over {len(twice)} seeds): {sd:.2%}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
