"""Where the Diagnostician's entropy-collapse rule fires, per phase, at several thresholds: its calibration.

    python benchmarks/entropy_collapse.py BENCH [--thresholds 0.05,0.10,0.15,0.20]

Reads every run of a (fault) bench folder (``BENCH/<defect>/<arm>-seed<N>`` and ``BENCH/clean/...``). A phase's
per-step entropy and reward come from its ``PhaseResult.trajectory`` (state of runs made since it exists) or, for
older runs, from TRL's log lines in the run's ``trainer.log``: there a run that trained trials or counterfactuals
(they log to the same file) is read for phase 1 only, the steps before the first trial. Prints, per run and phase,
the entropy's and reward's first- and last-quarter means (``metrics.quarter_shift``) and at which thresholds the
rule fires (``agents.diagnostician.growing_certain``: a fall above the threshold, its interval clear of 0, the
reward's shift not clear of 0 upwards). The choice it informs: docs/preregistration/entropy-collapse.md.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.diagnostician import growing_certain  # noqa: E402
from evotrainer.bench.runner import phase_results  # noqa: E402
from evotrainer.metrics import quarter_shift  # noqa: E402
from evotrainer.rundir import RunDir  # noqa: E402
from evotrainer.trainer.grpo import TRAJECTORY  # noqa: E402


def _logged_steps(run: Path) -> list[dict]:
    """TRL's per-step log lines in ``trainer.log`` (dicts with a loss), in order."""
    text = (run / "trainer.log").read_text(errors="replace") if (run / "trainer.log").is_file() else ""
    return [ast.literal_eval(m) for m in re.findall(r"\{'loss'[^{}]*\}", text)]


def phases(run: Path, steps_per_phase: int) -> dict[int, dict[str, list[float]]]:
    """Per phase, its per-step entropy and reward: from the phase results' trajectories, else from trainer.log."""
    rd = RunDir(run)
    results = phase_results(rd)
    if results and all(r.trajectory.get("entropy") for r in results):
        return {r.phase: r.trajectory for r in results}
    rows = _logged_steps(run)
    judged = any(next(rd.events.read(kind), None) for kind in ("trial", "counterfactual"))
    out = {}
    for p in range(1, (1 if judged else len(results)) + 1):
        chunk = rows[(p - 1) * steps_per_phase: p * steps_per_phase]
        if len(chunk) == steps_per_phase:
            out[p] = {name: [float(r[key]) for r in chunk if key in r] for name, key in TRAJECTORY.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", type=Path)
    ap.add_argument("--thresholds", default="0.05,0.10,0.15,0.20")
    args = ap.parse_args(argv)
    thresholds = [float(t) for t in args.thresholds.split(",")]
    print(f"{'run':42} phase  entropy first->last (change)  reward first->last  fires at")
    for run in sorted(p.parent for p in args.bench.glob("*/*/config.yaml")):
        steps = RunDir(run).load_config().training.steps_per_phase
        for phase, traj in sorted(phases(run, steps).items()):
            e, r = quarter_shift(traj.get("entropy", [])), quarter_shift(traj.get("reward", []))
            if e is None or r is None:
                continue
            at = [f"{t:g}" for t in thresholds if growing_certain(traj, t)]
            change = (e[1] - e[0]) / e[0]
            print(f"{str(run.relative_to(args.bench)):42} {phase:5}  {e[0]:.3f} -> {e[1]:.3f} ({change:+.0%})"
                  f"          {r[0]:.3f} -> {r[1]:.3f}       {', '.join(at) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
