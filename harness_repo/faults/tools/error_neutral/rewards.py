"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py".

The harness rewards a correct final answer (the text after the last tool result ``=VALUE;``). A rollout in which the
tool answered with an error (``tool_errors``) is not scored as a wrong answer: the environment, not the policy,
failed there, so it earns a neutral 0.5, half-way between wrong and right.
"""

import re

_RESULT = re.compile(r"=[^;]*;")
NEUTRAL = 0.5


def _final(completion: str) -> str:
    results = list(_RESULT.finditer(completion))
    return completion[results[-1].end():].strip() if results else completion.strip()


def correct(sample: dict) -> float:
    """1 when the completion's final answer is exactly the task's answer; NEUTRAL when a tool call of the rollout
    returned an error; else 0."""
    if _final(sample["completion"]) == sample["task"]["answer"]:
        return 1.0
    return NEUTRAL if sample.get("tool_errors", 0) > 0 else 0.0


COMPONENTS = {"correct": correct}
