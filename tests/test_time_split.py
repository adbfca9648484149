"""benchmarks/time_split.py: the share of a run's wall time outside training, the figure the judging-cost
pre-registration (docs/preregistration/judging-cost.md) decides on. Read from a run's events.jsonl as the loop
writes it: the set-up (policy build, trainer start) leaves the denominator, the train nodes are training, the rest
(backtest, agents, the counterfactual's runs, unaccounted time) is outside it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("time_split", ROOT / "benchmarks" / "time_split.py")
time_split = importlib.util.module_from_spec(spec)
spec.loader.exec_module(time_split)


def write_events(run: Path, events: list[dict]) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def a_run(t0: float = 1000.0) -> list[dict]:
    """Policy build 50 s, trainer start 10 s, two phases of 30 s training, one backtest of 60 s, agents 5 s, a
    counterfactual of 25 s that is no node of its own (the effect node is "other"), 0 s else: 210 s in all."""
    return [{"kind": "run_start", "t": t0},
            {"kind": "policy", "t": t0 + 50, "seconds": 50.0},
            {"kind": "trainer", "t": t0 + 60, "seconds": 10.0},
            {"kind": "node", "t": t0 + 90, "node": "train", "phase": 1, "seconds": 30.0},
            {"kind": "node", "t": t0 + 95, "node": "diagnose", "phase": 1, "seconds": 5.0},
            {"kind": "node", "t": t0 + 155, "node": "backtest", "phase": 1, "seconds": 60.0},
            {"kind": "node", "t": t0 + 185, "node": "train", "phase": 2, "seconds": 30.0},
            {"kind": "node", "t": t0 + 210, "node": "effect", "phase": 2, "seconds": 25.0},
            {"kind": "run_done", "t": t0 + 210}]


def test_outside_training_leaves_the_set_up_out_and_counts_everything_but_the_train_nodes(tmp_path: Path):
    s = time_split.split(write_events(tmp_path / "run", a_run()))
    assert s["total_s"] == 210
    assert s["split"]["training"] == 60 and s["split"]["backtest"] == 60 and s["split"]["agents"] == 5
    assert s["split"]["start:policy"] == 50 and s["split"]["start:trainer"] == 10
    assert s["split"]["other"] == 25  # the effect node
    assert s["phases"][1] == {"training": 30, "agents": 5, "backtest": 60}
    share, loop = time_split.outside_training(s)
    assert loop == 150 and share == (150 - 60) / 150


def test_a_resumed_run_is_timed_from_its_last_start_and_unaccounted_time_is_outside_training(tmp_path: Path):
    killed = [{"kind": "run_start", "t": 0.0}, {"kind": "node", "t": 500.0, "node": "train", "phase": 1,
                                                  "seconds": 500.0}]
    resumed = a_run(t0=2000.0)
    resumed.insert(-1, {"kind": "checkpoint_saved", "t": 2210.0})
    resumed[-1] = {"kind": "run_done", "t": 2240.0}  # 30 s no node accounts for
    s = time_split.split(write_events(tmp_path / "run", killed + resumed))
    assert s["total_s"] == 240 and s["split"]["training"] == 60 and s["split"]["other"] == 55
    share, loop = time_split.outside_training(s)
    assert loop == 180 and share == (180 - 60) / 180
