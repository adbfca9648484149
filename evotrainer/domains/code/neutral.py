"""The code domain's neutral harness code (``evotrainer.domains.neutral``): its prompts are the evaluator's, and its
neutral filter leaves out only what the executor itself failed on.

``make_prompt`` written as harness code: the canonical prompt (``CodeDomain.canonical_prompt``: the examples without
spaces and a colon) for a plain policy, and the instruction (``CodeDomain.instruction``) as one user
message for a chat-template policy. The neutral ``keep_rollout`` keeps every rollout but a ``grader_error`` one: an
execution the executor could not finish says nothing about the code, and training it with its reward of 0 would score
it as a wrong answer (the domain's rule; the code seed's filter). ``keep_group`` and the curriculum keep the shared
neutral forms. ``tests/test_code_generated.py`` holds the prompts to the evaluator's and the seed to neutral.
Alone: ``python -c "from evotrainer.domains.code.neutral import NEUTRAL; print(NEUTRAL.prompt)"``.
"""

from evotrainer.domains.neutral import KEEP_ALL, Neutral

NEUTRAL = Neutral(
    prompt="def make_prompt(task: dict) -> str:\n"
           "    return task[\"examples\"].replace(\" \", \"\") + \":\"\n",
    chat_prompt="def make_prompt(task: dict) -> list[dict]:\n"
                "    text = (f\"Write the expression that completes this Python function so that \"\n"
                "            f\"{task['examples']}:\\n\"\n"
                "            f\"{task['signature']}\\n    return ...\\nReply with only the expression.\")\n"
                "    return [{\"role\": \"user\", \"content\": text}]\n",
    filters={**KEEP_ALL, "keep_rollout": "def keep_rollout(rollout: dict) -> bool:\n"
                                         "    return (rollout.get(\"execution\") or {}).get(\"status\") != "
                                         "\"grader_error\"\n"},
)
