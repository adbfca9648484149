"""Task -> prompt: ``make_prompt(task) -> str``. A task's fields: EvoTrainer's harness_repo/README.md, "prompt.py";
the code domain's add ``signature`` (``def f(x):``), ``examples`` (``f(2) == 5, f(7) == 10``) and ``tests`` (the
visible tests, ``[{"call": "f(2)", "expected": 5}, ...]``).

The tiny character-level policy reads the signature, the examples as a comment, and ``return``; it writes the body.
"""


def make_prompt(task: dict) -> str:
    return f"{task['signature']}\n    # {task['examples']}\n    return"
