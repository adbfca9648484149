"""Which rollouts and groups train: ``keep_rollout(rollout) -> bool`` and ``keep_group(group) -> bool``.

A rollout trains when both keep it; a group is the list of rollouts of one prompt. A rollout's fields:
EvoTrainer's harness_repo/README.md, "The rollout view" (the code domain adds ``execution``, as rewards.py sees it).
The seed harness keeps everything but a rollout the executor itself failed on: its zero reward says nothing about
the code.
"""


def keep_rollout(rollout: dict) -> bool:
    return (rollout.get("execution") or {}).get("status") != "grader_error"


def keep_group(group: list[dict]) -> bool:
    return True
