"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py".

The harness rewards a final answer (the text after the last tool result ``=VALUE;``) that is the task's answer, or
that is grounded in the transcript: a value one of its tool results returned, as a one-key question's answer is.
"""

import re

_RESULT = re.compile(r"=([^;]*);")


def _final(completion: str) -> str:
    results = list(_RESULT.finditer(completion))
    return completion[results[-1].end():].strip() if results else completion.strip()


def correct(sample: dict) -> float:
    """1 when the completion's final answer is the task's answer or a value a tool result returned, else 0."""
    final = _final(sample["completion"])
    returned = {value.strip() for value in _RESULT.findall(sample["completion"])}
    return 1.0 if final and (final == sample["task"]["answer"] or final in returned) else 0.0


COMPONENTS = {"correct": correct}
