"""How hard each math level is for the warmed-up starting policy: the figures the levels are calibrated on.

    python benchmarks/calibrate_levels.py                      # calibration seeds 100 101 102, the default config
    python benchmarks/calibrate_levels.py --seeds 100 policy.tiny.warmup_target_accuracy=0.5

For each seed it makes the run's four splits (``evotrainer.rundir.split_sizes``), builds and warms up the tiny
policy on the warm-up split exactly as ``evotrainer init``/``run`` do (cached under ``$EVOTRAINER_CACHE``; use a private one,
e.g. ``EVOTRAINER_CACHE=/tmp/calib-cache``, to time a fresh warm-up), and prints per level: the distinct prompts of
its RL pool, the greedy accuracy on the held-out split, and how groups of 8 samples at temperature 1 fall on
``--tasks`` RL-pool tasks (what RL sees) and held-out tasks: all wrong (no signal), all right (no signal),
mixed. It also times the held-out evaluation (greedy and sampled). ``--json PATH`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from evotrainer.bench.arms import CALIBRATION_SEEDS
from evotrainer.config import apply_overrides, parse
from evotrainer.domains import get_domain


def group_shares(items: dict[str, float]) -> dict[str, float]:
    """Shares of items (groups) whose samples were all wrong, all right, or mixed."""
    n = max(len(items), 1)
    wrong = sum(v == 0 for v in items.values()) / n
    right = sum(v == 1 for v in items.values()) / n
    return {"all_wrong": wrong, "all_right": right, "mixed": 1 - wrong - right}


def per_level(tasks: list[dict], k: int) -> list[dict]:
    by: dict[str, list[dict]] = {}
    for t in tasks:
        by.setdefault(t["difficulty"], []).append(t)
    return [t for level in sorted(by) for t in by[level][:k]]


def calibrate(seed: int, overrides: list[str], n_tasks: int, group: int, log=print) -> dict:
    import torch

    from evotrainer.policy.build import ensure_base_policy
    from evotrainer.trainer.model import evaluate, load_policy

    cfg = apply_overrides(parse({"seed": seed}), overrides)
    if cfg.training.threads:
        torch.set_num_threads(cfg.training.threads)
    domain = get_domain(cfg.domain, cfg.executor)
    from evotrainer.rundir import split_sizes

    splits = domain.splits(seed, split_sizes(cfg))
    train, held_out = splits["rl"], splits["held_out"]
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        path = ensure_base_policy(cfg, Path(tmp), splits["warmup"], domain.canonical_prompt, log=log,
                                  near_miss=domain.near_miss)
        build_s = time.time() - t0
        warmup = json.loads((Path(path) / "warmup.json").read_text())
        model, tokenizer, _ = load_policy(path, "cpu", "float32", False, 0)
    max_new = cfg.training.eval_max_new_tokens
    t0 = time.time()
    greedy = evaluate(model, tokenizer, domain, held_out, max_new, "cpu")
    greedy_s = time.time() - t0
    t0 = time.time()
    sampled_eval = evaluate(model, tokenizer, domain, per_level(held_out, n_tasks), max_new, "cpu", samples=group)
    sampled_s = time.time() - t0
    sampled_train = evaluate(model, tokenizer, domain, per_level(train, n_tasks), max_new, "cpu", samples=group)
    levels = {}
    for level in domain.levels:
        pool = [t for t in train if t["difficulty"] == level]
        ids = {t["id"] for t in held_out + train if t["difficulty"] == level}
        levels[level] = {
            "distinct_train_prompts": len({domain.canonical_prompt(t) for t in pool}),
            "train_pool": len(pool),
            "greedy_held_out": greedy.by_difficulty.get(level, 0.0),
            "groups_train": group_shares({i: v for i, v in sampled_train.items.items() if i in ids}),
            "groups_held_out": group_shares({i: v for i, v in sampled_eval.items.items() if i in ids}),
        }
    return {"seed": seed, "warmup": warmup, "policy_s": round(build_s, 1), "greedy_accuracy": greedy.accuracy,
            "eval_n": greedy.n, "eval_greedy_s": round(greedy_s, 1),
            "eval_sampled_s_per_item": round(sampled_s / max(sampled_eval.n, 1), 4), "levels": levels}


def table(result: dict, group: int) -> str:
    w = result["warmup"]
    lines = [f"seed {result['seed']}: warm-up {w['steps']} steps, probe {w['probe_accuracy']:.1%}, {w['seconds']} s "
             f"(policy ready in {result['policy_s']} s); held-out greedy {result['greedy_accuracy']:.1%} on "
             f"{result['eval_n']} tasks in {result['eval_greedy_s']} s; sampled eval "
             f"{result['eval_sampled_s_per_item'] * 1000:.1f} ms per task at k={group}",
             "level  distinct  greedy   train groups: wrong/right/mixed   held-out groups: wrong/right/mixed"]
    for level, r in result["levels"].items():
        g, h = r["groups_train"], r["groups_held_out"]
        lines.append(f"{level:>5}  {r['distinct_train_prompts']:>8}  {r['greedy_held_out']:>6.1%}   "
                     f"{g['all_wrong']:>6.0%} {g['all_right']:>6.0%} {g['mixed']:>6.0%}"
                     f"              {h['all_wrong']:>6.0%} {h['all_right']:>6.0%} {h['mixed']:>6.0%}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value (as for evotrainer init)")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(CALIBRATION_SEEDS))
    ap.add_argument("--tasks", type=int, default=100, help="tasks per level for the group shares")
    ap.add_argument("--group", type=int, default=8, help="samples per group")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    results = []
    for seed in args.seeds:
        results.append(calibrate(seed, args.overrides, args.tasks, args.group, log=lambda m: print(m, file=sys.stderr)))
        print(table(results[-1], args.group), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
