"""Reward components. Each takes one sample and returns a float; harness.yaml's reward_weights combine them.

A sample is a dict: prompt, completion, task (the training task, answer included), truncated,
completion_tokens. The seed harness rewards a correct final answer and nothing else.
"""


def _answer(completion: str) -> str:
    return completion.split("\n", 1)[0].strip()


def correct(sample: dict) -> float:
    """1 when the completion's first line is exactly the task's answer, else 0."""
    return 1.0 if _answer(sample["completion"]) == sample["task"]["answer"] else 0.0


COMPONENTS = {"correct": correct}
