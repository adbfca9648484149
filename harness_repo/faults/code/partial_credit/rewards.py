"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py"; the code domain
adds ``execution``: the framework ran the completion on the task's *visible* tests before rewards (harness code
cannot run code itself), ``{"status": ok | fail | timeout | syntax_error | no_code | grader_error, "passed": k,
"total": n, "detail": str}``.

A body earns the share of the visible tests it passes, so that a body closer to right earns more than one that
passes nothing (a denser signal than all-or-nothing); nothing for a grader error (such a rollout is also filtered
out: filters.py).
"""


def passes_visible(sample: dict) -> float:
    """The share of visible tests the body passed (0 to 1); 0 when the executor could not run it."""
    execution = sample.get("execution") or {}
    if execution.get("status") == "grader_error" or not execution.get("total"):
        return 0.0
    return execution.get("passed", 0) / execution["total"]


COMPONENTS = {"passes_visible": passes_visible}
