"""The chat seed's prompt self-test (it overlays the code seed's tests/test_prompt.py; the reward's and filters' tests
are the code seed's)."""

from prompt import make_prompt

TASK = {"id": "t", "difficulty": "1", "question": "", "signature": "def f(x):", "examples": "f(2) == 5, f(7) == 10",
        "tests": [{"call": "f(2)", "expected": 5}, {"call": "f(7)", "expected": 10}]}


def test_prompt_is_one_user_message_asking_for_the_expression():
    assert make_prompt(TASK) == [{"role": "user", "content": "Write the expression that completes this Python function "
                                 "so that f(2) == 5, f(7) == 10:\ndef f(x):\n    return ...\nReply with only the "
                                 "expression."}]
