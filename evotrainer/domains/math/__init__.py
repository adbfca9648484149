"""Math domain: integer arithmetic chains from reasoning-gym's ``chain_sum`` generator at four difficulty levels.

Levels are sized for the tiny character-level policy of the demo (after its warm-up it solves roughly a quarter
of levels 1-2 and little of levels 3-4), which gives RL both solved and unsolved groups to work with. A real
model can use the same levels or harder ones. The canonical prompt is the compact expression (``"37-5+8="``);
the verifier reads the completion up to its first newline and accepts it when it is an integer literal equal to
the answer.

This package is the evaluator's side (tasks, canonical prompt, verifier). Beside it, ``interventions.py`` holds
the Engineer's math-only harness edits; only ``agents.playbook`` imports it, lazily, so nothing here imports
``agents``. Try it alone::

    python -c "from evotrainer.domains.math import MathDomain; d = MathDomain(); \
               tr, ev = d.generate(0, 8, 4); print(d.canonical_prompt(ev[0]), ev[0]['answer'])"
"""

from __future__ import annotations

import re

from evotrainer.domains.base import Domain, Task

# level -> chain_sum settings
LEVELS: dict[str, dict[str, int]] = {
    "1": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
    "2": dict(min_terms=3, max_terms=3, min_digits=1, max_digits=1),
    "3": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2),
    "4": dict(min_terms=2, max_terms=2, min_digits=2, max_digits=2),
}

_INT = re.compile(r"[+-]?\d+")


class MathDomain(Domain):
    name = "math"
    levels = list(LEVELS)

    def generate(self, seed: int, train_size: int, eval_size: int) -> tuple[list[Task], list[Task]]:
        import warnings

        with warnings.catch_warnings():  # one of its dependencies has invalid escape/`is` literals
            warnings.simplefilter("ignore", SyntaxWarning)
            import reasoning_gym  # heavy import (~5 s): only when tasks are made, at `evotrainer init`

        per_eval = -(-eval_size // len(LEVELS))
        per_train = -(-train_size // len(LEVELS))
        # Held-out first, for every level, then the training pools. Levels overlap (every level-1 sum is also a
        # level-3 one), so "never in training" is checked on the prompt across all levels, not within a level.
        eval_tasks: list[Task] = []
        held_out: set[str] = set()
        for i, (level, settings) in enumerate(LEVELS.items()):
            ev = reasoning_gym.create_dataset("chain_sum", size=per_eval * 3, seed=seed * 1000 + 17 + i, **settings)
            n = 0
            for entry in ev:
                task = self._task(f"eval-{level}-{n}", level, entry)
                prompt = self.canonical_prompt(task)
                if prompt not in held_out and n < per_eval:
                    held_out.add(prompt)
                    eval_tasks.append(task)
                    n += 1
        train_tasks: list[Task] = []
        for i, (level, settings) in enumerate(LEVELS.items()):
            tr = reasoning_gym.create_dataset("chain_sum", size=per_train * 2, seed=seed * 1000 + 500 + i, **settings)
            pool = []
            for entry in tr:
                task = self._task(f"train-{level}-{len(pool)}", level, entry)
                if self.canonical_prompt(task) in held_out:
                    continue
                pool.append(task)
                if len(pool) == per_train:
                    break
            train_tasks += pool
        return train_tasks, eval_tasks

    @staticmethod
    def _task(task_id: str, level: str, entry: dict) -> Task:
        return {
            "id": task_id,
            "difficulty": level,
            "question": entry["question"],
            "expression": entry["metadata"]["expression"],
            "answer": str(entry["answer"]),
        }

    def canonical_prompt(self, task: Task) -> str:
        return task["expression"].replace(" ", "") + "="

    def extract_answer(self, completion: str) -> str | None:
        text = completion.split("\n", 1)[0].strip()
        return text if _INT.fullmatch(text) else None

    def verify(self, task: Task, completion: str) -> bool:
        answer = self.extract_answer(completion)
        return answer is not None and int(answer) == int(task["answer"])
