"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py"; the code domain
adds ``execution``: the framework ran the completion on the task's *visible* tests before rewards (harness code
cannot run code itself), ``{"status": ok | fail | timeout | syntax_error | no_code | grader_error, "passed": k,
"total": n, "detail": str}``.

A body that the executor ran to the end of its tests earns 1 (``ok`` or ``fail``: it compiled, defined the function
and returned from its calls); nothing for a body that does not compile, has no code, or runs past the time limit,
and nothing for a grader error (such a rollout is also filtered out: filters.py).
"""

RAN = ("ok", "fail")


def passes_visible(sample: dict) -> float:
    """1 when the executor ran the body through the visible tests, else 0."""
    return 1.0 if (sample.get("execution") or {}).get("status") in RAN else 0.0


COMPONENTS = {"passes_visible": passes_visible}
