"""Task -> prompt: ``make_prompt(task)`` returns chat messages. A task's fields: EvoTrainer's harness_repo/README.md,
"prompt.py"; the code domain's add ``signature``, ``examples`` and ``tests`` (the visible tests).

The seed harness of instruct models (a policy with a chat template) on the code domain: one user message asking for
the expression that completes the function (the evaluator's instruction, so training sees what is evaluated).
"""


def make_prompt(task: dict) -> list[dict]:
    text = (f"Write the expression that completes this Python function so that "
            f"{task['examples']}:\n"
            f"{task['signature']}\n    return ...\nReply with only the expression.")
    return [{"role": "user", "content": text}]
