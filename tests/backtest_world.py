"""A run directory to backtest in, without training: ``RunDir.init`` (tasks, evaluator split, harness repo) and one
phase of synthetic rollouts on real tasks of its training pool, written where a trained phase writes them.

The rollouts show failures a fix can cure: right answers written ``+12`` or ``012`` (verified correct, scored 0 by
the seed's exact string match), mixed groups, all-wrong and all-right groups. Used by ``test_backtest_cli.py``
and ``test_backtest_step.py``; building one takes about a second.
"""

from __future__ import annotations

from pathlib import Path

from evotrainer import config as C
from evotrainer.contracts import Rollout
from evotrainer.rollouts import write_rollouts
from evotrainer.rundir import RunDir
from tests.conftest import FAST

# rewards.py of a numeric answer match, written by hand: "+12" and "012" score like "12"; "8 9 10" still scores 0
NUMERIC_REWARDS = '''def _answer(completion: str) -> str:
    return completion.split("\\n", 1)[0].strip()


def correct(sample: dict) -> float:
    """1 when the completion's first line is the task's answer as a number (+12, 012 and 12 alike), else 0."""
    try:
        return 1.0 if int(_answer(sample["completion"])) == int(sample["task"]["answer"]) else 0.0
    except ValueError:
        return 0.0


COMPONENTS = {"correct": correct}
'''
# a reward hack: any completion that contains the answer scores (main's test_known_reward_hack fails on it)
HACK_REWARDS = '''def correct(sample: dict) -> float:
    return 1.0 if sample["task"]["answer"] in sample["completion"] else 0.0


COMPONENTS = {"correct": correct}
'''


def make_run(root: Path, overrides: list[str] = ()) -> RunDir:
    """A fresh run directory (FAST settings plus ``overrides``) with phase 1's rollouts and no trained policy."""
    rd = RunDir(root)
    rd.init(C.apply_overrides(C.parse({}), [*FAST, "backtest.bootstrap=50", "backtest.test_timeout_s=20",
                                            *overrides]), log=lambda _: None)
    write_rollouts([Rollout(**r) for r in phase_rows(rd, 1)], rd.rollout_file(1))
    return rd


def phase_rows(rd: RunDir, phase: int, groups: int = 40) -> list[dict]:
    tasks = [t for t in rd.train_tasks() if t["answer"].isdigit()][:groups]
    rows = []
    for g, t in enumerate(tasks):
        a, wrong = t["answer"], str(int(t["answer"]) + 1)
        members = [[(a, True), (wrong, False), (a, True), (wrong, False)],
                   [("+" + a, True), ("0" + a, True), (a, True), (wrong, False)],
                   [(wrong, False)] * 4,
                   [(a, True)] * 4,
                   [(a, True), (wrong, False), (wrong, False), (wrong, False)]][g % 5]
        for k, (completion, ok) in enumerate(members):
            rows.append({
                "phase": phase, "step": 1 + g // 4, "harness_sha": "0" * 40, "group_id": f"p{phase}-g{g}",
                "sample_idx": k, "task_id": t["id"], "difficulty": t["difficulty"],
                "prompt": t["expression"].replace(" ", "") + "=", "completion": completion,
                "completion_tokens": len(completion) + 1, "truncated": False, "reward": float(completion == a),
                "reward_components": {"correct": float(completion == a)}, "verified": ok, "advantage": 0.0,
                "kept": True, "turns": 1, "tool_calls": 0, "extra": {},
            })
    return rows
