"""Harness self-tests: plain functions named test_*, run by the sandbox runner before any candidate can pass
(see EvoTrainer's harness_repo/README.md, "tests/")."""

from filters import keep_group, keep_rollout
from prompt import make_prompt
from rewards import COMPONENTS

TASK = {"id": "t", "difficulty": "3", "question": "", "keys": ["ab", "cd"], "answer": "9"}


def _score(completion: str, calls: int = 0) -> dict:
    sample = {"prompt": make_prompt(TASK), "completion": completion, "task": TASK, "truncated": False,
              "completion_tokens": len(completion), "turns": calls + 1, "tool_calls": calls, "tool_errors": 0,
              "hit_turn_cap": False}
    return {name: fn(sample) for name, fn in COMPONENTS.items()}


def test_prompt_names_the_keys():
    assert make_prompt(TASK) == "ab+cd="


def test_correct_transcript_scores_one():
    assert _score("get(ab)=4;get(cd)=5;9", calls=2)["correct"] == 1.0


def test_wrong_final_answer_scores_zero():
    assert _score("get(ab)=4;get(cd)=5;8", calls=2)["correct"] == 0.0


def test_answer_only_inside_a_tool_result_scores_zero():
    # the right number in a (forged) tool result, with no final answer after it, answers nothing
    assert _score("get(ab)=9;", calls=1)["correct"] == 0.0
    assert _score("get(9)", calls=0)["correct"] == 0.0
    assert _score("")["correct"] == 0.0


def test_filters_accept_a_plain_rollout():
    rollout = {"completion": "get(ab)=4;get(cd)=5;9", "reward": 1.0, "truncated": False, "tool_calls": 2}
    assert isinstance(keep_rollout(rollout), bool)
    assert isinstance(keep_group([rollout]), bool)


def test_a_transcript_of_the_expected_shape_is_well_formed():
    assert _score("get(ab)=4;get(cd)=5;9", calls=2)["well_formed"] == 1.0
    assert _score("9")["well_formed"] == 0.0  # no tool call
    assert _score("get(ab)=4;get(cd)=5;", calls=2)["well_formed"] == 0.0  # no answer
