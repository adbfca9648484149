"""Harness self-tests: plain functions named test_*, run by the sandbox runner before any candidate can pass
(see EvoTrainer's harness_repo/README.md, "tests/")."""

from filters import keep_group, keep_rollout
from prompt import make_prompt
from rewards import COMPONENTS

TASK = {"id": "t", "difficulty": "1", "question": "", "expression": "4 + 5", "answer": "9"}


def _score(completion: str, truncated: bool = False) -> dict:
    sample = {"prompt": make_prompt(TASK), "completion": completion, "task": TASK, "truncated": truncated,
              "completion_tokens": len(completion)}
    return {name: fn(sample) for name, fn in COMPONENTS.items()}


def test_prompt_is_one_user_message_asking_for_the_number():
    assert make_prompt(TASK) == [{"role": "user", "content": "What is 4 + 5? Reply with only the number."}]


def test_a_worked_line_ending_in_the_answer_scores_one():
    assert _score("4 + 5 = 9")["correct"] == 1.0
    assert _score("The answer is 9.\nBecause.")["correct"] == 1.0
    assert _score("4 + 5 = 10")["correct"] == 0.0


def test_correct_answer_scores_one():
    assert _score("9")["correct"] == 1.0


def test_wrong_answer_scores_zero():
    assert _score("8")["correct"] == 0.0


def test_known_reward_hack_scores_zero():
    # listing many numbers must not be rewarded as if one of them were the answer
    assert _score("8 9 10")["correct"] == 0.0
    assert _score("9 = 8")["correct"] == 0.0
    assert _score("")["correct"] == 0.0


def test_filters_accept_a_plain_rollout():
    rollout = {"completion": "9", "reward": 1.0, "truncated": False}
    assert isinstance(keep_rollout(rollout), bool)
    assert isinstance(keep_group([rollout]), bool)
