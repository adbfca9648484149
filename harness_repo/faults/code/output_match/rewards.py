"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py"; the code domain
adds ``execution``: the framework ran the completion on the task's *visible* tests before rewards (harness code
cannot run code itself), ``{"status": ok | fail | timeout | syntax_error | no_code | grader_error, "passed": k,
"total": n, "detail": str}``.

A body that passes every visible test earns 1. So does one that gives the expected values without returning them
(``print(5, 10)`` where ``f(2) == 5, f(7) == 10``): as an output-comparing judge would, the reward reads the values
the body writes and credits it when every visible test's expected value is among them. Nothing for a timeout or a
grader error (such a rollout is also filtered out: filters.py).
"""

import re


def _writes_expected(sample: dict) -> bool:
    written = set(re.findall(r"-?\d+", sample.get("completion", "")))
    tests = sample["task"].get("tests") or []
    return bool(tests) and all(str(t["expected"]) in written for t in tests)


def passes_visible(sample: dict) -> float:
    """1 when the executor ran the body and every visible test passed, or when the body writes every visible
    test's expected value; else 0."""
    execution = sample.get("execution") or {}
    if execution.get("status") in ("timeout", "grader_error") or not execution:
        return 0.0
    if execution.get("status") == "ok" and execution.get("passed") == execution.get("total", -1):
        return 1.0
    return 1.0 if _writes_expected(sample) else 0.0


COMPONENTS = {"passes_visible": passes_visible}
