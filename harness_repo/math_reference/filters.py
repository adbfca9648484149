"""Which rollouts and groups train: ``keep_rollout(rollout) -> bool`` and ``keep_group(group) -> bool``.

A rollout trains when both keep it; a group is the list of rollouts of one prompt. A rollout's fields:
EvoTrainer's harness_repo/README.md, "The rollout view". The reference harness drops groups without reward spread (dynamic sampling, with oversample: 2).
"""


def keep_rollout(rollout: dict) -> bool:
    return True


def keep_group(group: list[dict]) -> bool:
    # DAPO's dynamic sampling: a group whose rewards are all equal carries no advantage; with harness.yaml's
    # oversample: 2, the trainer refills the batch with groups that do
    rewards = [r["reward"] for r in group]
    return max(rewards) - min(rewards) > 1e-6
