"""Task -> prompt. A task is a dict with id, difficulty, question, expression and answer (training split only).

The tiny character-level policy reads the compact expression followed by '='.
"""


def make_prompt(task: dict) -> str:
    return task["expression"].replace(" ", "") + "="
