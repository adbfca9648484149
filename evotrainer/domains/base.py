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
from evotrainer.domains.execute import ExecLimits

Task = dict[str, Any]  # keys: id, question, answer, difficulty, plus domain-specific fields

# A run's four disjoint splits, in the order a domain draws them (so the held-out split never depends on the others'
# sizes, nor the dev split on the training pools'):
#   held_out  reports only: each phase's score and the bench's final score; no decision of the loop reads it
#   dev       every decision: A/B trials (their probe), realized effect and its rollback, escalation, keep/discard,
#             the Diagnostician's rules
#   rl        the pool the harness samples RL tasks from
#   warmup    the tiny policy's supervised warm-up (a real model has none: size 0)
SPLITS = ("held_out", "dev", "rl", "warmup")
ID_PREFIX = {"held_out": "eval", "dev": "dev", "rl": "train", "warmup": "warmup"}  # task ids say their split


class Domain(ABC):
    name: str
    levels: list[str]
    # task fields only the evaluator reads (hidden tests, a grader's private data): never in ``harness_task``
    hidden_fields: tuple[str, ...] = ()
    # null probes that run until a limit stops them (a program that never ends): the reward pentest scores them on
    # its first few tasks only (``judge.pentest.SLOW_PROBE_TASKS``), so each costs a few time limits, not one a task
    slow_probes: tuple[str, ...] = ()
    # held-out sets the domain reads from an installed package (``tasks.held_out``), in place of its generator's
    benchmarks: tuple[str, ...] = ()

    def __init__(self, limits: ExecLimits | None = None) -> None:
        # the limits of the policy's own code (the run's ``executor`` section): a domain that runs it reads them
        self.limits = limits or ExecLimits()

    def harness_task(self, task: Task) -> Task:
        """The only view of a task harness code (prompts, rewards, filters, diagnostics) and the agents ever get: the
        task less ``hidden_fields``. Training tasks carry their answer (a reward must check it); held-out tasks never
        reach harness code at all."""
        return {k: v for k, v in task.items() if k not in self.hidden_fields}

    def reference_completion(self, task: Task) -> str:
        """A completion the verifier accepts for ``task``: what a correct answer earns in the reward pentest
        (``evotrainer.judge.pentest``)."""
        return str(task["answer"])

    def null_probes(self, task: Task) -> dict[str, str]:
        """Completions that answer nothing and must earn no reward (probe name -> completion): the reward pentest
        rejects a reward that pays any of them at least half of what ``reference_completion`` earns. These hold for
        any domain; a domain adds its own (a wrong answer in the right form, several answers at once, ...)."""
        return {"empty": "", "prompt_echoed": self.canonical_prompt(task),
                "filler": "Let me think about this step by step. I am not sure."}

    def benchmark(self, name: str, seed: int, n: int) -> list[Task]:
        """At most ``n`` tasks of the published held-out set ``name`` (one of ``benchmarks``; ``seed`` picks them when
        the set is larger): the run's held-out split when ``tasks.held_out`` names it. ValueError for another name."""
        raise ValueError(f"the {self.name} domain publishes no held-out set {name!r}"
                         + (f" (it has: {', '.join(self.benchmarks)})" if self.benchmarks else " (it has none)"))

    @abstractmethod
    def splits(self, seed: int, sizes: dict[str, int]) -> dict[str, list[Task]]:
        """The run's splits (``SPLITS``: held_out, dev, rl, warmup), ``sizes[name]`` tasks each: no prompt in two
        splits, deterministic in ``seed``. A split whose size is 0 or missing is empty."""

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

    def verify_batch(self, tasks: list[Task], completions: list[str]) -> list[bool | None]:
        """``verify`` for one generated batch (a domain that runs code runs it in one executor call); None where the
        grader itself failed: never a wrong answer, counted apart (``Rollout.extra["grader_error"]``)."""
        return [self.verify(t, c) for t, c in zip(tasks, completions)]

    def verify_tolerant_batch(self, tasks: list[Task], completions: list[str],
                              strict: list[bool | None] | None = None) -> list[bool | None]:
        """``verify_tolerant`` for one batch; None where the grader itself failed. ``strict``: the batch's
        ``verify_batch`` verdicts when the caller has them (a domain that runs code need not run them again)."""
        return [self.verify_tolerant(t, c) for t, c in zip(tasks, completions)]

    def reward_executions(self, tasks: list[Task], completions: list[str]) -> list[dict] | None:
        """What harness code cannot do itself (it may not spawn processes): each completion run on its task's
        *visible* tests, once per batch before rewards, handed to harness code as ``sample["execution"]``
        (``{"status", "passed", "total", "detail"}``) and kept in the rollout store so replay sees the same sample.
        None: the domain runs no code (math)."""
        return None

    def score_batch(self, tasks: list[Task], completions: list[str]) -> tuple[list[dict] | None, list[bool | None]]:
        """What training needs of one generated batch: ``reward_executions`` (the reward's evidence) and
        ``verify_batch`` (the log's ``verified``). A domain that runs code answers both from one run of each program
        (code: ``CodeDomain.score_batch``)."""
        return self.reward_executions(tasks, completions), self.verify_batch(tasks, completions)

    def verdict_on_view(self, task: Task, completion: str) -> bool | None:
        """The verifier's verdict on a completion for a task as harness code sees it (``harness_task``: a self-test's
        sample, in the evaluator's arbitration, ``judge.arbitrate``), or None where that view cannot settle it. By
        default ``verify`` itself (math's view carries the answer); None when it cannot run on the view."""
        try:
            return bool(self.verify(task, completion))
        except Exception:  # noqa: BLE001 - a view without what the verifier needs: no verdict on a guess
            return None

    def verify_tolerant(self, task: Task, completion: str) -> bool:
        """A lenient reader's verdict: the same right answer, with the formatting slips such a reader forgives
        (math: a trailing period or other punctuation, surrounding whitespace), never another answer. It reports
        only (``EvalResult.tolerant_accuracy``: whether training taught the skill or only the answer's form); no
        decision reads it. By default the strict verdict: a domain without forgivable slips need not override it."""
        return self.verify(task, completion)

    def tool_calls_in(self, completion: str) -> list[str]:
        """The tool calls a completion makes, in order, each as the policy wrote it with its arguments
        (``get(abc)``): two equal ones are one call repeated. A single-turn domain has none. The Diagnostician reads
        repeated calls from it (``tool_spam``)."""
        return []

    def near_miss(self, task: Task) -> str | None:
        """A common wrong answer to the task (a slip a learner makes), or None when the domain names none. Only the
        tiny policy's warm-up uses it (``policy.tiny.warmup_slip``); never the verifier."""
        return None


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
