"""Task -> prompt: ``make_prompt(task) -> str``. A task's fields: EvoTrainer's harness_repo/README.md, "prompt.py".

The tiny character-level policy reads the compact expression followed by '='.
"""


def make_prompt(task: dict) -> str:
    return task["expression"].replace(" ", "") + "="
