"""Task -> prompt: ``make_prompt(task) -> str``. A task's fields: EvoTrainer's harness_repo/README.md, "prompt.py".

The tiny character-level policy reads the keys the question names joined by '+', then '=' (``abc+def=``); its
transcript follows: tool calls ``get(KEY)``, the environment's ``=VALUE;`` after each, then the answer.
"""


def make_prompt(task: dict) -> str:
    return "+".join(task["keys"]) + "="
