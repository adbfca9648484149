"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py".

The harness rewards a correct final answer (the text after the last tool result ``=VALUE;``) and, so that the
policy learns to look its facts up rather than answer from memory, each tool call the rollout made (``tool_use``,
weighed in harness.yaml).
"""

import re

_RESULT = re.compile(r"=[^;]*;")


def _final(completion: str) -> str:
    results = list(_RESULT.finditer(completion))
    return completion[results[-1].end():].strip() if results else completion.strip()


def correct(sample: dict) -> float:
    """1 when the completion's final answer is exactly the task's answer, else 0."""
    return 1.0 if _final(sample["completion"]) == sample["task"]["answer"] else 0.0


def tool_use(sample: dict) -> float:
    """The number of tool calls the rollout made."""
    return float(sample.get("tool_calls", 0))


COMPONENTS = {"correct": correct, "tool_use": tool_use}
