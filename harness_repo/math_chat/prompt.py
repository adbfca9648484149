"""Task -> prompt: ``make_prompt(task)`` returns chat messages. A task's fields: EvoTrainer's harness_repo/README.md,
"prompt.py".

The seed harness of instruct models (a policy with a chat template): one user message asking for the number.
"""


def make_prompt(task: dict) -> list[dict]:
    return [{"role": "user", "content": f"What is {task['expression']}? Reply with only the number."}]
