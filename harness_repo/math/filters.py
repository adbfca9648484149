"""Which rollouts and groups train. A rollout is a sample (see rewards.py) plus reward, reward_components,
group_id and sample_idx; a group is the list of rollouts of one prompt. Dropped rollouts do not train.

The seed harness keeps everything.
"""


def keep_rollout(rollout: dict) -> bool:
    return True


def keep_group(group: list[dict]) -> bool:
    return True
