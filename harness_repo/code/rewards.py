"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py"; the code domain
adds ``execution``: the framework ran the completion on the task's *visible* tests before rewards (harness code
cannot run code itself), ``{"status": ok | fail | timeout | syntax_error | no_code | grader_error, "passed": k,
"total": n, "detail": str}``.

The seed harness pays a body that passes every visible test and nothing else: no partial credit, nothing for a
timeout, and nothing for a grader error (such a rollout is also filtered out: filters.py).
"""


def passes_visible(sample: dict) -> float:
    """1 when the executor ran the body and every visible test passed, else 0."""
    execution = sample.get("execution") or {}
    return 1.0 if execution.get("status") == "ok" and execution.get("passed") == execution.get("total", -1) else 0.0


COMPONENTS = {"passes_visible": passes_visible}
