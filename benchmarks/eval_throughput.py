"""How fast the evaluator scores a checkpoint, by completions per generate call (``training.eval_batch_size``).

Every phase scores its checkpoint on the held-out and dev splits, and every trial arm and counterfactual run on the
dev probe (2,000 tasks). This script loads one checkpoint, scores the same tasks at each batch size, checks that
every size gives the same per-task scores (greedy decoding; padding must not change an answer), and prints tasks
per second. On the tiny policy and 2 idle CPU cores every size from 128 to 1024 took 0.42-0.48 s for 2,000 tasks
(docs/results.md, 2026-11-27): the evaluation is no cost driver there; the knob matters for large models' memory.

    python benchmarks/eval_throughput.py runs/demo/checkpoints/phase-0001 --run-dir runs/demo \\
        [--sizes 128,256,512,1024] [--split dev] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--run-dir", type=Path, required=True, help="the run whose split is scored")
    ap.add_argument("--split", default="dev", choices=["dev", "held_out"])
    ap.add_argument("--sizes", default="128,256,512,1024")
    ap.add_argument("--repeats", type=int, default=2, help="timings per size (the best is printed)")
    a = ap.parse_args()

    from evotrainer.domains import get_domain
    from evotrainer.rundir import RunDir
    from evotrainer.trainer.model import evaluate, load_policy

    rd = RunDir(a.run_dir)
    cfg = rd.load_config()
    tasks = rd.dev_tasks() if a.split == "dev" else rd.eval_tasks()
    model, tokenizer, _ = load_policy(str(a.checkpoint), "cpu", cfg.policy.dtype, False, 8)
    domain = get_domain(cfg.domain, cfg.executor)
    evaluate(model, tokenizer, domain, tasks[:64], cfg.training.eval_max_new_tokens, "cpu")  # warm-up, untimed
    first = None
    for size in (int(s) for s in a.sizes.split(",")):
        best = float("inf")
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            result = evaluate(model, tokenizer, domain, tasks, cfg.training.eval_max_new_tokens, "cpu",
                              batch_size=size, chat=cfg.policy.chat)
            best = min(best, time.perf_counter() - t0)
        first = first or result
        same = result.items == first.items
        print(f"batch {size:5d}: {best:6.2f} s for {len(tasks)} tasks ({len(tasks) / best:7.1f} tasks/s), accuracy "
              f"{result.accuracy:.2%}, per-task scores {'identical' if same else 'DIFFERENT'} to the first size",
              flush=True)


if __name__ == "__main__":
    main()
