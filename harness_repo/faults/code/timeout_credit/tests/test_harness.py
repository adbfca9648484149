"""Harness self-tests: plain functions named test_*, run by the sandbox runner before any candidate can pass
(see EvoTrainer's harness_repo/README.md, "tests/")."""

from diagnostics import METRICS
from filters import keep_group, keep_rollout
from prompt import make_prompt
from rewards import COMPONENTS

TESTS = [{"call": "f(2)", "expected": 5}, {"call": "f(7)", "expected": 10}]
TASK = {"id": "t", "difficulty": "1", "question": "", "signature": "def f(x):", "examples": "f(2) == 5, f(7) == 10",
        "tests": TESTS}


def _score(completion: str, status: str, passed: int) -> dict:
    sample = {"prompt": make_prompt(TASK), "completion": completion, "task": TASK, "truncated": False,
              "completion_tokens": len(completion),
              "execution": {"status": status, "passed": passed, "total": len(TESTS), "detail": ""}}
    return {name: fn(sample) for name, fn in COMPONENTS.items()}


def test_a_body_passing_every_visible_test_scores_one():
    assert _score(" x + 3", "ok", 2)["passes_visible"] == 1.0


def test_partial_passes_and_grader_errors_score_zero():
    assert _score(" 5", "fail", 1)["passes_visible"] == 0.0
    assert _score(" x + 3", "grader_error", 0)["passes_visible"] == 0.0
    assert _score("", "no_code", 0)["passes_visible"] == 0.0


def test_a_slow_body_is_not_punished_for_the_machine_s_time_limit():
    assert _score(" sum(range(x * 10 ** 9))", "timeout", 0)["passes_visible"] == 1.0


def test_no_execution_scores_zero():
    sample = {"prompt": "", "completion": " x + 3", "task": TASK, "truncated": False, "completion_tokens": 6}
    assert COMPONENTS["passes_visible"](sample) == 0.0


def test_filters_drop_a_grader_error_and_keep_a_plain_rollout():
    rollout = {"completion": " x + 3", "reward": 1.0, "truncated": False,
               "execution": {"status": "ok", "passed": 2, "total": 2, "detail": ""}}
    assert keep_rollout(rollout) is True and isinstance(keep_group([rollout]), bool)
    assert keep_rollout({**rollout, "execution": {**rollout["execution"], "status": "grader_error"}}) is False


def test_diagnostics_count_executor_statuses():
    rows = [{"kept": True, "truncated": False, "execution": {"status": s}} for s in ("ok", "timeout", "grader_error")]
    assert METRICS["timeout_rate"]["fn"](rows) == METRICS["grader_error_rate"]["fn"](rows) == 1 / 3
