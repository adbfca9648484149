"""The evaluator's side of a domain: tasks, the held-out split, and the ground-truth verifier.

This code is framework-owned and fixed. Harness code (prompts, rewards, filters) never imports it and never
sees the eval split: training tasks reach the harness as plain dicts, and the ``verified`` field of every
rollout is filled here, in the trainer service, after the harness has scored it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from evotrainer.atomic import write_text

Task = dict[str, Any]  # keys: id, question, answer, difficulty, plus domain-specific fields


class Domain(ABC):
    name: str
    levels: list[str]

    @abstractmethod
    def generate(self, seed: int, train_size: int, eval_size: int) -> tuple[list[Task], list[Task]]:
        """Return (training pool, held-out eval split), disjoint, deterministic in ``seed``."""

    @abstractmethod
    def canonical_prompt(self, task: Task) -> str:
        """The evaluator's prompt for a task: used for held-out eval, so scores stay comparable across harnesses."""

    def instruction(self, task: Task) -> str:
        """The evaluator's question to an instruct model (one user message through its chat template)."""
        return task["question"]

    @abstractmethod
    def extract_answer(self, completion: str) -> str | None:
        """The answer a completion gives, or None when it gives none in the domain's format."""

    @abstractmethod
    def verify(self, task: Task, completion: str) -> bool:
        """Ground truth: does the completion answer the task correctly?"""


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
