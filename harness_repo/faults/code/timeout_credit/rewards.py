"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py"; the code domain
adds ``execution``: the framework ran the completion on the task's *visible* tests before rewards (harness code
cannot run code itself), ``{"status": ok | fail | timeout | syntax_error | no_code | grader_error, "passed": k,
"total": n, "detail": str}``.

A body that passes every visible test earns 1. A body stopped at the time limit has failed no test: the limit is
the machine's, not the body's, so it is not punished for being slow and earns 1 too. Nothing for a grader error
(such a rollout is also filtered out: filters.py).
"""


def passes_visible(sample: dict) -> float:
    """1 when the executor ran the body and no visible test failed (every one passed, or the run hit the time
    limit first), else 0."""
    execution = sample.get("execution") or {}
    if execution.get("status") == "timeout":
        return 1.0
    return 1.0 if execution.get("status") == "ok" and execution.get("passed") == execution.get("total", -1) else 0.0


COMPONENTS = {"passes_visible": passes_visible}
