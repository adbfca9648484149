"""Where a run's wall time went: training, agents, backtest, other — read from its events.jsonl.

    python benchmarks/time_split.py runs/demo [RUN ...]

Prints one line per phase and a total split. "training" is the train node (GRPO steps + held-out eval in the
trainer service); "agents" is diagnose, critique, engineer and librarian; "backtest" is the backtest node
(replays in the sandbox and pilot runs); "start:*" are the policy build, the trainer service's start and the
starting policy's held-out eval; "other" is everything else (promotion, process start; task generation at init
is not counted). Figures are wall-clock seconds of the last uninterrupted run. Then the share outside training (the
wall time without the policy build and the trainer's start, minus training, over that time), and for several runs
its median.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

GROUPS = {"train": "training", "diagnose": "agents", "critique": "agents", "engineer": "agents",
          "librarian": "agents", "backtest": "backtest", "promote": "other"}


def split(run_dir: Path) -> dict:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    starts = [i for i, e in enumerate(events) if e["kind"] == "run_start"]
    events = events[starts[-1]:] if starts else events
    end = next((e for e in events if e["kind"] == "run_done"), None)
    total = (end["t"] if end else events[-1]["t"]) - events[0]["t"]
    by_group: dict[str, float] = defaultdict(float)
    by_phase: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in events:
        if e["kind"] == "node":
            g = GROUPS.get(e["node"], "other")
            by_group[g] += e["seconds"]
            by_phase[e["phase"]][g] += e["seconds"]
        elif e["kind"] in ("policy", "trainer", "baseline") and "seconds" in e:
            by_group[f"start:{e['kind']}"] += e["seconds"]
    accounted = sum(by_group.values())
    by_group["other"] += max(total - accounted, 0.0)
    return {"total_s": total, "split": dict(by_group), "phases": {p: dict(v) for p, v in by_phase.items()}}


def outside_training(s: dict) -> tuple[float, float]:
    """(share of the time outside training, the time it is a share of): the run's wall time without the policy
    build and the trainer's start (set-up), minus its train nodes, over that same time (issue 26's measure, as
    docs/preregistration/judging-cost.md defines it)."""
    loop = s["total_s"] - s["split"].get("start:policy", 0.0) - s["split"].get("start:trainer", 0.0)
    return (loop - s["split"].get("training", 0.0)) / loop if loop > 0 else 0.0, loop


def main() -> None:
    shares = []
    for arg in sys.argv[1:] or ["runs/demo"]:
        s = split(Path(arg))
        if len(sys.argv) > 2:
            print(f"== {arg}")
        for phase, parts in sorted(s["phases"].items()):
            print(f"phase {phase}: " + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(parts.items())))
        print(f"total {s['total_s']:.1f} s: " + ", ".join(
            f"{k} {v:.1f} s ({v / s['total_s']:.0%})" for k, v in sorted(s["split"].items())))
        share, loop = outside_training(s)
        shares.append(share)
        print(f"outside training: {share:.0%} of {loop:.0f} s (the wall time without the policy build and the "
              "trainer's start)")
    if len(shares) > 1:
        print(f"median outside training over {len(shares)} runs: {statistics.median(shares):.0%} "
              f"({min(shares):.0%} to {max(shares):.0%})")


if __name__ == "__main__":
    main()
