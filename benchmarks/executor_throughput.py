"""How fast the policy-code executor runs a generated batch: programs per second, each child forked from the batch
worker (the default) or started as a new interpreter (``fork=False``), by one batch worker or by one per CPU core side
by side (``ExecLimits.workers``: 0, the default, is one per core), on one batch of the code domain's right and wrong
bodies, each distinct (a training step's reward executions at the default batch: 32 prompts x 8 completions = 256
programs; a real batch repeats bodies, and a repeat runs once).

    python benchmarks/executor_throughput.py [--programs 256] [--repeats 3]

Prints, per mode, the median wall time of the batch and the milliseconds per program, and checks that every mode
gives every program the same execution (status and tests passed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from evotrainer.domains.code import CodeDomain
    from evotrainer.domains.execute import ExecLimits, run_batch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    domain = CodeDomain()
    tasks = domain.splits(0, {"dev": a.programs})["dev"][: a.programs]
    bodies = [t["answer"] if i % 2 else domain.near_miss(t) or " 0" for i, t in enumerate(tasks)]  # right and wrong
    jobs = [(domain.program(t, b) + f"# {i}\n", t["tests"]) for i, (t, b) in enumerate(zip(tasks, bodies))]
    modes = {"fork, one worker": (True, 1), "fork, one worker per core": (True, 0), "spawn, one worker": (False, 1)}
    results = {}
    for name, (fork, workers) in modes.items():
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            results[name] = run_batch(jobs, ExecLimits(workers=workers), fork=fork)
            times.append(time.perf_counter() - t0)
        wall = statistics.median(times)
        print(f"{name}: {len(jobs)} programs in {wall:.2f} s (median of {a.repeats}), "
              f"{1000 * wall / len(jobs):.1f} ms a program")
    seen = {tuple((e.status, e.passed) for e in r) for r in results.values()}
    print("the same execution for every program in every mode" if len(seen) == 1 else "MODES DISAGREE")
    return 0 if len(seen) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
