"""Replay throughput of the seed harness, in-process vs each sandbox backend, and a sandbox's start-up cost.

    python benchmarks/replay_throughput.py [--rollouts 100000] [--backends process,bwrap,unshare] [--starts 5] [--plain]

A backtest replays main and every candidate on the retained rollouts inside a sandbox (``evotrainer.judge.replay``).
This measures what the sandbox costs there. "in-process" runs the same replay with the harness called directly
in this process (the runner's ops without a process boundary, no JSON: what a replay would cost with no
isolation at all); each backend runs it through a real ``HarnessWorker``. For each it prints the whole replay's
rollouts per second and its share of in-process, and the time spent in harness calls alone (score, filter,
curriculum, diagnostics: where the sandbox's protocol cost shows, since the rest of a replay -- advantages,
groups -- is the framework's own work and the same everywhere). Start-up is one new sandbox per candidate:
create the worker, start the process, first answer (a ping), averaged over ``--starts`` starts.

``--plain`` sends rows as plain JSON objects, as the protocol did before column frames (``sandbox/frames.py``).
Rollouts are synthetic (groups of 4 with one right and three wrong answers, steps of 4 groups): the seed
harness's reward, filters and diagnostics are cheap, so this is the protocol's worst case.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evotrainer.harness.repo import seed_dir  # noqa: E402
from evotrainer.judge.replay import replay  # noqa: E402
from sandbox import BACKENDS, HarnessWorker, SandboxLimits, choose_backend, frames  # noqa: E402

OPS = ("score", "filter", "curriculum", "diagnostics")


def synthetic(n: int) -> tuple[list[dict], dict[str, dict]]:
    rows, tasks = [], {}
    for g in range(n // 4):
        tid = f"train-{1 + g % 4}-{g}"
        tasks[tid] = {"id": tid, "difficulty": str(1 + g % 4), "question": "", "expression": "4 + 5", "answer": "9"}
        for k, (completion, ok) in enumerate([("9", True), ("8", False), ("12", False), ("x", False)]):
            rows.append({"phase": 1, "step": 1 + g // 4, "harness_sha": "0" * 40, "group_id": f"g{g}",
                         "sample_idx": k, "task_id": tid, "difficulty": str(1 + g % 4), "prompt": "4+5=",
                         "completion": completion, "completion_tokens": len(completion) + 1, "truncated": False,
                         "reward": float(ok), "reward_components": {"correct": float(ok)}, "verified": ok,
                         "advantage": 0.0, "kept": True, "turns": 1, "tool_calls": 0, "extra": {}})
    return rows, tasks


class InProcess:
    """The runner's ops called directly in this process: a replay with no sandbox and no protocol."""

    def __init__(self, harness: Path) -> None:
        spec = importlib.util.spec_from_file_location("_bench_runner", ROOT / "sandbox" / "runner.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.path.insert(0, str(harness))
        self.runner = module.Runner(str(harness))

    def score(self, samples):
        return self.runner.op_score({"samples": samples})

    def filter(self, groups):
        return self.runner.op_filter({"groups": groups})

    def curriculum(self, levels, base, history):
        return self.runner.op_curriculum({"levels": levels, "base": base, "history": history})

    def diagnostics(self, rollouts):
        return self.runner.op_diagnostics({"rollouts": rollouts})


class Timed:
    """Wraps a harness (worker or in-process) and adds up the time of its calls."""

    def __init__(self, inner) -> None:
        self.inner, self.seconds = inner, 0.0

    def __getattr__(self, name):
        fn = getattr(self.inner, name)
        if name not in OPS:
            return fn

        def timed(*args):
            t = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.seconds += time.perf_counter() - t

        return timed


def measure(harness, seed: Path, rows: list[dict], tasks: dict) -> tuple[float, float]:
    timed = Timed(harness)
    t = time.perf_counter()
    replay(timed, seed, rows, tasks)
    return time.perf_counter() - t, timed.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--backends", default="", help="comma-separated (default: every available one)")
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--plain", action="store_true", help="rows as plain JSON, as before column frames")
    args = parser.parse_args()
    if args.plain:  # the protocol before sandbox/frames.py: every row a JSON object of its own
        frames.encode = lambda rows, grouped=False: rows
    seed = seed_dir("math")
    rows, tasks = synthetic(args.rollouts)
    limits = SandboxLimits(call_timeout_s=600)  # the default limits otherwise: 2 GiB for the whole sandbox
    wanted = [b for b in (args.backends.split(",") if args.backends else BACKENDS) if b]
    backends = []
    for name in wanted:
        try:
            backends.append(choose_backend(name))
        except RuntimeError as err:
            print(f"{name}: skipped ({err})")
    measure(InProcess(seed), seed, rows[:4000], tasks)  # warm-up: imports, first-call costs
    total, calls = measure(InProcess(seed), seed, rows, tasks)
    n = len(rows)
    print(f"{n} rollouts; replay = rewards, advantages, filters, curriculum, diagnostics (harness calls in brackets)")
    print(f"{'':10s} {'replay/s':>10s} {'share':>7s} {'replay s':>9s} {'calls s':>8s} {'start ms':>9s}")
    print(f"{'in-process':10s} {n / total:10,.0f} {'100%':>7s} {total:9.2f} {calls:8.2f} {'-':>9s}")
    for name in backends:
        starts = []
        for _ in range(args.starts):
            t = time.perf_counter()
            with HarnessWorker(seed, backend=name, limits=limits) as worker:
                worker.call("ping")
                starts.append(time.perf_counter() - t)
        with HarnessWorker(seed, backend=name, limits=limits) as worker:
            worker.call("ping")
            took, in_calls = measure(worker, seed, rows, tasks)
        print(f"{name:10s} {n / took:10,.0f} {total / took:7.0%} {took:9.2f} {in_calls:8.2f} "
              f"{statistics.median(starts) * 1000:9.0f}")


if __name__ == "__main__":
    main()
