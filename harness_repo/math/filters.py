"""Which rollouts and groups train. A rollout is a dict with the same fields in training and in the backtest:
phase, step, group_id, sample_idx, task (the training task, answer included), task_id, difficulty, prompt,
completion, completion_tokens, truncated, reward, reward_components, and advantage (its GRPO advantage before
filtering). A group is the list of rollouts of one prompt. Dropped rollouts do not train.

The seed harness keeps everything.
"""


def keep_rollout(rollout: dict) -> bool:
    return True


def keep_group(group: list[dict]) -> bool:
    return True
