"""The tools domain's neutral harness code (``evotrainer.domains.neutral``): its prompts are the evaluator's, and its
filters and curriculum the shared neutral forms.

``make_prompt`` written as harness code: the canonical prompt (``ToolsDomain.canonical_prompt``: the keys the question
names joined by ``+``, then ``=``) for a plain policy, and the instruction (``ToolsDomain.instruction``, the question)
as one user message for a chat-template policy. A tool error or a transcript stopped at the turn cap is the policy's
failure, scored by the reward like any wrong answer, so the neutral filters keep every rollout (``KEEP_ALL``).
``tests/test_moves.py`` holds the prompts to the evaluator's; ``tests/test_tools_generated.py`` holds the seed to
neutral and the move back to neutral to undoing every prompt and filter draw.
Alone: ``python -c "from evotrainer.domains.tools.neutral import NEUTRAL; print(NEUTRAL.prompt)"``.
"""

from evotrainer.domains.neutral import Neutral

NEUTRAL = Neutral(
    prompt='def make_prompt(task: dict) -> str:\n    return "+".join(task["keys"]) + "="\n',
    chat_prompt="def make_prompt(task: dict) -> list[dict]:\n"
                "    return [{\"role\": \"user\", \"content\": task[\"question\"]}]\n",
)
