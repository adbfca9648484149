"""Which rollouts and groups train: ``keep_rollout(rollout) -> bool`` and ``keep_group(group) -> bool``.

A rollout trains when both keep it; a group is the list of rollouts of one prompt. A rollout's fields:
EvoTrainer's harness_repo/README.md, "The rollout view" (the code domain adds ``execution``, as rewards.py sees it).
This harness trains on executions that went through cleanly: a rollout whose execution did not end ``ok`` (a test
that did not pass, an exception, a timeout, no code, an executor failure) is left out, so that what went wrong in
the run does not reach the update as noise.
"""


def keep_rollout(rollout: dict) -> bool:
    return (rollout.get("execution") or {}).get("status") == "ok"


def keep_group(group: list[dict]) -> bool:
    return True
