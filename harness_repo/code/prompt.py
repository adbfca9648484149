"""Task -> prompt: ``make_prompt(task) -> str``. A task's fields: EvoTrainer's harness_repo/README.md, "prompt.py";
the code domain's add ``signature`` (``def f(x):``), ``examples`` (``f(2) == 5, f(7) == 10``) and ``tests`` (the
visible tests, ``[{"call": "f(2)", "expected": 5}, ...]``).

The tiny character-level policy reads the examples without spaces and a colon (``f(2)==5,f(7)==10:``); it writes the
body of ``def f(x): return ...`` (``x+3``).
"""


def make_prompt(task: dict) -> str:
    return task["examples"].replace(" ", "") + ":"
