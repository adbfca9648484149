"""Math domain: integer arithmetic chains from reasoning-gym's ``chain_sum`` generator at four difficulty levels.

Levels are sized for the tiny character-level policy of the demo (after its warm-up it solves roughly a quarter of
levels 1-2 and little of levels 3-4), which gives RL both solved and unsolved groups to work with. A real model can use the same levels or
harder ones. The canonical prompt is the compact expression (``"37-5+8="``); the verifier reads the completion
up to its first newline and accepts it when it is an integer literal equal to the answer.
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
        eval_tasks: list[Task] = []
        train_tasks: list[Task] = []
        for i, (level, settings) in enumerate(LEVELS.items()):
            ev = reasoning_gym.create_dataset(
                "chain_sum", size=per_eval * 3, seed=seed * 1000 + 17 + i, **settings
            )
            held_out = []
            seen = set()
            for entry in ev:
                expr = entry["metadata"]["expression"]
                if expr not in seen and len(held_out) < per_eval:
                    seen.add(expr)
                    held_out.append(self._task(f"eval-{level}-{len(held_out)}", level, entry))
            eval_tasks += held_out
            # the training pool never contains a held-out expression
            tr = reasoning_gym.create_dataset(
                "chain_sum", size=per_train * 2, seed=seed * 1000 + 500 + i, **settings
            )
            pool = []
            for entry in tr:
                if entry["metadata"]["expression"] in seen:
                    continue
                pool.append(self._task(f"train-{level}-{len(pool)}", level, entry))
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
