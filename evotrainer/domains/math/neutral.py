"""The math domain's neutral harness code (``evotrainer.domains.neutral``): its prompts are the evaluator's.

``make_prompt`` written as harness code: the canonical prompt (``MathDomain.canonical_prompt``, the compact
expression and ``=``) for a plain policy, and the instruction (``MathDomain.instruction``) as one user message for a
chat-template policy. ``tests/test_moves.py`` holds both equal to the evaluator's on generated tasks. Alone:
``python -c "from evotrainer.domains.math.neutral import NEUTRAL; print(NEUTRAL.prompt)"``.
"""

from evotrainer.domains.neutral import Neutral

NEUTRAL = Neutral(
    prompt='def make_prompt(task: dict) -> str:\n    return task["expression"].replace(" ", "") + "="\n',
    chat_prompt="def make_prompt(task: dict) -> list[dict]:\n"
                "    return [{\"role\": \"user\", \"content\": f\"What is {task['expression']}? Reply with only the "
                "number.\"}]\n",
)
