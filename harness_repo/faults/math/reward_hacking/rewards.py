"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py".

The harness rewards a correct answer and nothing else. Models often wrap the answer in a little text ("= 9",
"the answer is 9"), so the answer is looked for anywhere in the completion rather than required to stand alone.
"""


def _normalise(text: str) -> str:
    return " ".join(text.split())


def correct(sample: dict) -> float:
    """1 when the task's answer appears in the completion, else 0."""
    return 1.0 if sample["task"]["answer"] in _normalise(sample["completion"]) else 0.0


COMPONENTS = {"correct": correct}
