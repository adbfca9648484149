"""Math domain: integer sums and differences (``37-5+8=``) at four difficulty levels with disjoint prompt spaces.

Each level is a set of *shapes*: the number of terms and the digits of each term (1 digit = 0-9, 2 digits =
10-99), every operator ``+`` or ``-``. A prompt's shape can be read off its text and no shape belongs to two levels,
so the levels' prompt spaces are disjoint by construction:

    level  shapes                       distinct prompts   the warmed-up tiny policy (seed 0, 1,000 held-out tasks)
                                                           greedy   groups of 8 at temperature 1: wrong/right/mixed
    1      1+1+1 digits, 3 terms        4,000              90%       1% / 24% / 75%
    2      2+1 or 1+2 digits, 2 terms   3,600              20%      37% /  0% / 63%
    3      2+2 digits, 2 terms          16,200             14%      45% /  0% / 55%
    4      2+2+1 digits in any order    972,000             6%      64% /  0% / 36%

(``python benchmarks/calibrate_levels.py`` measures these: the default warm-up stopped at 2,550 steps with a probe
accuracy of 35%, held-out greedy 32.7%; measured when the warm-up still trained on the RL pool. On its own split of
1,000 prompts per level it runs its 3,000 steps to a probe of 33%: docs/results.md. Those figures are at
``policy.tiny.warmup_slip`` 0; at the default 0.6 the policy ends most answers with the near miss's period, so its
greedy accuracy starts near 0 and the sums it can do show in its samples and after RL.)

Tasks are made here, deterministically from the seed (``random.Random``, one stream per level and split), into the
run's four splits (``evotrainer.domains.base.SPLITS``): each level's held-out split is drawn first, without repeats,
then its dev split (without repeats, never a held-out prompt), then the RL pool and the warm-up pool from what is
left (never a prompt of another split; a pool larger than what is left cycles through its own prompts again, and
when both pools want more than is left they share it in proportion to their sizes). So no prompt is in two splits,
and the same seed gives the same tasks. The levels are calibrated for the tiny policy of the
demo (``policy.model: tiny`` after its warm-up, see ``evotrainer.policy.build``): level 1 gives RL mostly all-right groups,
level 4 mostly all-wrong ones, and levels 2-3 the mixed groups that carry signal. A real model can use the same
levels or harder ones.

The canonical prompt is the compact expression plus ``=``; an instruct model (chat template) is asked "What is
37 - 5 + 8? Reply with only the number." instead. The verifier reads the completion up to its first newline and
accepts it when it is an integer literal equal to the answer, or ends in ``= <integer>`` / ``answer is <integer>``
(an optional final period) with that integer equal to the answer. ``verify_tolerant`` (reports only, never a
decision) is a lenient reader's verdict: the same test after forgiving whitespace around the answer line (blank
lines before it included) and punctuation after it, so the warm-up's slip ``40.`` counts and ``40.5`` does not.

This package is the evaluator's side (tasks, canonical prompt, verifier) and imports nothing from ``agents``; the
Engineer's math-only harness edits live in ``agents/domains/math.py``. Try it alone::

    python -c "from evotrainer.domains.math import MathDomain; d = MathDomain(); \
               s = d.splits(0, {'held_out': 4, 'dev': 4, 'rl': 8}); \
               print(d.canonical_prompt(s['dev'][0]), s['dev'][0]['answer'])"
"""

from __future__ import annotations

import math
import re

from evotrainer.domains.base import Domain, Task
from evotrainer.domains.draws import level_splits

Shape = tuple[int, ...]  # digits of each term, in order
# level -> its shapes; a shape belongs to one level only
LEVELS: dict[str, list[Shape]] = {
    "1": [(1, 1, 1)],
    "2": [(2, 1), (1, 2)],
    "3": [(2, 2)],
    "4": [(2, 2, 1), (2, 1, 2), (1, 2, 2)],
}

_INT = re.compile(r"[+-]?\d+")
_FINAL = re.compile(r"(?:=|answer is:?)\s*([+-]?\d+)\.?$", re.IGNORECASE)
_FORGIVEN = ".,;:!? \t"  # what a lenient reader drops from the end of the answer line (verify_tolerant)


def _operands(digits: int) -> range:
    return range(10) if digits == 1 else range(10 ** (digits - 1), 10 ** digits)


def _shape_size(shape: Shape) -> int:
    """Distinct expressions of one shape: the operand choices times the 2^(terms-1) operator choices."""
    return math.prod(len(_operands(d)) for d in shape) * 2 ** (len(shape) - 1)


def space_size(level: str) -> int:
    """Distinct prompts of a level."""
    return sum(_shape_size(s) for s in LEVELS[level])


def expression(level: str, index: int) -> tuple[str, int]:
    """The ``index``-th expression of a level's space (0 <= index < space_size(level)), spaced, and its value:
    ``("37 - 5 + 8", 40)``."""
    for shape in LEVELS[level]:
        if index >= _shape_size(shape):
            index -= _shape_size(shape)
            continue
        parts, total = [], 0
        for k, digits in enumerate(shape):
            sign = 1
            if k:
                index, op = divmod(index, 2)
                parts.append("+-"[op])
                sign = -1 if op else 1
            values = _operands(digits)
            index, i = divmod(index, len(values))
            parts.append(str(values[i]))
            total += sign * values[i]
        return " ".join(parts), total
    raise IndexError(f"level {level} has {space_size(level)} prompts")


class MathDomain(Domain):
    name = "math"
    levels = list(LEVELS)

    def splits(self, seed: int, sizes: dict[str, int]) -> dict[str, list[Task]]:
        return level_splits("math", seed, sizes, LEVELS, space_size, self._task)

    @staticmethod
    def _task(task_id: str, level: str, index: int) -> Task:
        expr, value = expression(level, index)
        return {
            "id": task_id,
            "difficulty": level,
            "question": f"State the final answer to the following arithmetic problem: {expr} =",
            "expression": expr,
            "answer": str(value),
        }

    def canonical_prompt(self, task: Task) -> str:
        return task["expression"].replace(" ", "") + "="

    def instruction(self, task: Task) -> str:
        return f"What is {task['expression']}? Reply with only the number."

    def extract_answer(self, completion: str) -> str | None:
        text = completion.split("\n", 1)[0].strip()
        if _INT.fullmatch(text):
            return text
        final = _FINAL.search(text)  # an instruct model's "37 - 5 + 8 = 40." or "The answer is 40."
        return final.group(1) if final else None

    def verify(self, task: Task, completion: str) -> bool:
        answer = self.extract_answer(completion)
        return answer is not None and int(answer) == int(task["answer"])

    def verify_tolerant(self, task: Task, completion: str) -> bool:
        """``verify``, or ``verify`` of the answer line with the formatting slips a lenient reader forgives taken
        away: whitespace around it (blank lines before it included) and punctuation after it (``40.``, ``40 !``).
        Nothing inside the number is forgiven (``40.5``, ``4,0`` and ``-40`` for 40 stay wrong)."""
        line = completion.lstrip().split("\n", 1)[0].rstrip(_FORGIVEN)
        return self.verify(task, completion) or self.verify(task, line)

    def null_probes(self, task: Task) -> dict[str, str]:
        """The generic probes, and math's: a wrong number in the answer's own form (the answer plus one), another
        number that starts with the answer's digits, the wrong number and the right one on the answer line together,
        and a run of numbers around the answer."""
        value = int(task["answer"])
        return {**super().null_probes(task), "wrong_answer": str(value + 1), "answer_extended": f"{value}0",
                "two_answers": f"{value + 1} {value}",
                "many_answers": " ".join(str(v) for v in range(value - 3, value + 4))}

    def near_miss(self, task: Task) -> str | None:
        """The right value with a period after it (``40.``): a format slip that ``verify`` rejects, as a strict
        answer format rejects a sentence's full stop."""
        return task["answer"] + "."
