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


def test_prompt_is_compact_expression():
    assert make_prompt(TASK) == "4+5="


def test_correct_answer_scores_one():
    assert _score("9")["correct"] == 1.0


def test_wrong_answer_scores_zero():
    assert _score("8")["correct"] == 0.0


def test_answer_inside_text_scores_one():
    # a model that says a little more than the number still gets credit for the right answer
    assert _score("= 9")["correct"] == 1.0
    assert _score("the answer is 9")["correct"] == 1.0
    assert _score("")["correct"] == 0.0


def test_filters_accept_a_plain_rollout():
    rollout = {"completion": "9", "reward": 1.0, "truncated": False}
    assert isinstance(keep_rollout(rollout), bool)
    assert isinstance(keep_group([rollout]), bool)
