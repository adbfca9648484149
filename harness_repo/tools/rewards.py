"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py".

The seed harness rewards a correct final answer (the text after the last tool result ``=VALUE;``) and nothing else:
no credit per tool call, none for an answer written anywhere but at the end.
"""

import re

_RESULT = re.compile(r"=[^;]*;")


def _final(completion: str) -> str:
    results = list(_RESULT.finditer(completion))
    return completion[results[-1].end():].strip() if results else completion.strip()


def correct(sample: dict) -> float:
    """1 when the completion's final answer is exactly the task's answer, else 0."""
    return 1.0 if _final(sample["completion"]) == sample["task"]["answer"] else 0.0


COMPONENTS = {"correct": correct}
