"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py".

The seed harness of instruct models rewards a correct final answer on the first line, given alone ("40") or at
the end of a worked line ("37 - 5 + 8 = 40", "The answer is 40."), and nothing else.
"""

import re

_ALONE = re.compile(r"[+-]?\d+")
_FINAL = re.compile(r"(?:=|answer is:?)\s*([+-]?\d+)\.?$", re.IGNORECASE)


def _answer(completion: str) -> str | None:
    line = completion.split("\n", 1)[0].strip()
    if _ALONE.fullmatch(line):
        return line
    final = _FINAL.search(line)
    return final.group(1) if final else None


def correct(sample: dict) -> float:
    """1 when the first line gives the task's answer (alone or after a final '='), else 0."""
    answer = _answer(sample["completion"])
    return 1.0 if answer is not None and int(answer) == int(sample["task"]["answer"]) else 0.0


COMPONENTS = {"correct": correct}
