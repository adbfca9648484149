"""The prompt's self-test, apart from the reward's and the filters' (tests/test_harness.py) so that a seed for another
policy form (harness_repo/code_chat: chat messages) overlays only this file and prompt.py."""

from prompt import make_prompt

TASK = {"id": "t", "difficulty": "1", "question": "", "signature": "def f(x):", "examples": "f(2) == 5, f(7) == 10",
        "tests": [{"call": "f(2)", "expected": 5}, {"call": "f(7)", "expected": 10}]}


def test_prompt_is_the_examples_without_spaces_and_a_colon():
    assert make_prompt(TASK) == "f(2)==5,f(7)==10:"
