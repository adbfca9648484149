"""What the run report costs: its size, and the time writing it adds to a phase.

    python benchmarks/report_cost.py RUN_DIR [--writes 5]           # a finished (or running) run
    python benchmarks/report_cost.py --build DIR [--phases 6]       # build a FAST run first (as the tests do)

``evotrainer run`` rewrites RUN_DIR/report.html at the end of every phase (``report.html.write_quietly``). This writes the
same report (``report.html.write``) to a temporary file, so the run's own page is left alone, and prints:

    size       the page's bytes, and how many of them are the charts' inline SVG
    first      the first write in this process: imports (matplotlib), every phase's rollouts and every candidate
               read from disk; what a run's first phase pays, and more (later phases read only what is new)
    cold       median of --writes writes with the report's caches emptied before each (rollout summaries,
               candidates, paired intervals): reading and drawing everything again, without the imports
    warm       median of --writes writes with the caches kept: what a later phase of a long run pays, plus the
               reading of its one new rollout file
    logged     the ``report`` events the run itself wrote (bytes, wall and CPU seconds per phase), when there are any

Times are wall and CPU seconds of this process, on whatever else the machine is doing. ``--build`` runs
``evotrainer init`` and ``evotrainer run`` through the CLI with the tests' FAST settings (tests/conftest.py): a
tiny policy on the CPU, about a minute per phase on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build(run: Path, phases: int) -> None:
    from tests.conftest import FAST  # the settings the tests' runs use (one definition)

    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    sets = [a for o in [*FAST, f"phases={phases}"] for a in ("--set", o)]
    for args in (["init", str(run), *sets], ["run", str(run)]):
        subprocess.run([sys.executable, "-m", "evotrainer.cli", *args], env=env, check=True,
                       stdout=subprocess.DEVNULL)


def timed(write, rd, out: Path) -> tuple[float, float]:
    t0, cpu0 = time.perf_counter(), time.process_time()
    write(rd, out)
    return time.perf_counter() - t0, time.process_time() - cpu0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, nargs="?", help="a run directory with at least one phase")
    ap.add_argument("--build", type=Path, help="build a FAST run here first (a new folder), then measure it")
    ap.add_argument("--phases", type=int, default=6, help="phases of the run --build makes")
    ap.add_argument("--writes", type=int, default=5, choices=range(1, 101), metavar="1..100",
                    help="writes per median")
    args = ap.parse_args()
    if bool(args.run_dir) == bool(args.build):
        ap.error("give RUN_DIR or --build DIR")
    run = args.run_dir or args.build
    if args.build:
        t0 = time.time()
        build(run, args.phases)
        print(f"built {run}: {args.phases} phases in {time.time() - t0:.0f} s")

    t0, cpu0 = time.perf_counter(), time.process_time()
    from evotrainer.report import collect
    from evotrainer.report import html as report
    from evotrainer.report.history import harness_log, phase_results
    from evotrainer.rundir import RunDir

    rd = RunDir(run)
    with tempfile.TemporaryDirectory(prefix="evo-report-cost-") as tmp:
        out = Path(tmp) / "report.html"
        report.write(rd, out)
        first = (time.perf_counter() - t0, time.process_time() - cpu0)
        cold, warm = [], []
        for _ in range(args.writes):
            collect.clear_caches()
            cold.append(timed(report.write, rd, out))
        for _ in range(args.writes):
            warm.append(timed(report.write, rd, out))
        page = out.read_text(encoding="utf-8")
    size = len(page.encode("utf-8"))
    svg = sum(len(m.encode("utf-8")) for m in re.findall(r'<svg class="chart".*?</svg>', page, re.S))
    phases = len(phase_results(rd))

    def median(rows: list[tuple[float, float]]) -> str:
        return (f"{statistics.median(w for w, _ in rows):.2f} s wall, {statistics.median(c for _, c in rows):.2f} s "
                f"CPU (median of {len(rows)})")

    print(f"run      {run} ({phases} phases, {len(harness_log(rd))} candidates)")
    print(f"size     {size:,} bytes ({size / 1024:.0f} KiB), of which chart SVG {svg:,} bytes ({svg / size:.0%})")
    print(f"first    {first[0]:.2f} s wall, {first[1]:.2f} s CPU (imports and every read included)")
    print(f"cold     {median(cold)}")
    print(f"warm     {median(warm)}")
    logged = [e for e in rd.events.read("report")]
    for e in logged:
        print(f"logged   phase {e['phase']}: {e['bytes']:,} bytes, {e['seconds']} s wall, {e.get('cpu_s', '-')} s CPU")
    print(json.dumps({"run": str(run), "phases": phases, "bytes": size, "svg_bytes": svg,
                      "first_s": round(first[0], 3), "cold_median_s": round(statistics.median(w for w, _ in cold), 3),
                      "warm_median_s": round(statistics.median(w for w, _ in warm), 3),
                      "logged": [{k: e.get(k) for k in ("phase", "bytes", "seconds", "cpu_s")} for e in logged]}))


if __name__ == "__main__":
    main()
