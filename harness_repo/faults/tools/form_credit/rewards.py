"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py".

Two components, weighed in harness.yaml: ``correct``, a correct final answer (the text after the last tool result
``=VALUE;``), and ``well_formed``, a transcript of the expected shape (the tool called, then an integer answer), so
that the policy learns the protocol before it gets answers right.
"""

import re

_RESULT = re.compile(r"=[^;]*;")


def _final(completion: str) -> str:
    results = list(_RESULT.finditer(completion))
    return completion[results[-1].end():].strip() if results else completion.strip()


def correct(sample: dict) -> float:
    """1 when the completion's final answer is exactly the task's answer, else 0."""
    return 1.0 if _final(sample["completion"]) == sample["task"]["answer"] else 0.0


def well_formed(sample: dict) -> float:
    """1 when the rollout called the tool and ended on an integer answer after the last tool result, else 0."""
    called = sample.get("tool_calls", 0) > 0 and _RESULT.search(sample["completion"]) is not None
    return 1.0 if called and re.fullmatch(r"-?\d+", _final(sample["completion"])) else 0.0


COMPONENTS = {"correct": correct, "well_formed": well_formed}
