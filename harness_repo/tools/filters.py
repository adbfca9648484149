"""Which rollouts and groups train: ``keep_rollout(rollout) -> bool`` and ``keep_group(group) -> bool``.

A rollout trains when both keep it; a group is the list of rollouts of one prompt. A rollout's fields:
EvoTrainer's harness_repo/README.md, "The rollout view". The seed harness keeps everything.
"""


def keep_rollout(rollout: dict) -> bool:
    return True


def keep_group(group: list[dict]) -> bool:
    return True
