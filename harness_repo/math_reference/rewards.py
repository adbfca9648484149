"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py".

The seed harness rewards a correct final answer and nothing else.
"""


def _answer(completion: str) -> str:
    return completion.split("\n", 1)[0].strip()


def correct(sample: dict) -> float:
    """1 when the completion's first line is exactly the task's answer, else 0."""
    return 1.0 if _answer(sample["completion"]) == sample["task"]["answer"] else 0.0


COMPONENTS = {"correct": correct}
