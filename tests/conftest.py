"""Shared fixtures: synthetic rollouts for the unit tests, and a fast, shared tiny policy for the run tests.

The run tests start the real ``evotrainer`` command, which starts the real trainer service. They share one
policy cache per test session (``EVOTRAINER_CACHE``) so the tiny policy's warm-up is paid once, and use
``FAST`` config overrides so a phase takes seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evotrainer.bench.faults import BUDGET
from evotrainer.rollouts import HARNESS_VIEW

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "harness_repo" / "math"
EVOTRAINER = [sys.executable, "-m", "evotrainer.cli"]

# a run small enough for tests: a short warm-up, short phases, a small eval split, short pilots
FAST = [
    # no warm-up slip: a short warm-up's greedy answers are then sometimes right, so accuracy can decide something
    # (the slip itself: tests/test_warmup_slip.py)
    "policy.tiny.warmup_steps=60", "policy.tiny.warmup_target_accuracy=1.0", "policy.tiny.warmup_slip=0",
    "training.steps_per_phase=6", "training.prompts_per_step=4", "training.eval_size=40", "training.dev_size=40",
    "training.train_pool_size=400", "backtest.trial_steps=2", "backtest.trial_seeds=1", "backtest.probe_size=40",
    "backtest.screen_steps=1",  # the race's screen shorter than its confirmation, as at the defaults
    "backtest.race_entrants=2",  # a screen of one rung (the halving itself: tests/test_backtest_step.py's race)
    "evolution.final_round=true",  # one-phase tests of the loop need the round after their only phase
    # the loop's every step: the fault bench's judging (a second Engineer round, the counterfactual),
    # which the defaults leave off to keep judging cheap (evotrainer.bench.faults.BUDGET)
    *[o for o in BUDGET if not o.startswith("training.")],
]


# filters.py that fails (an AssertionError in the sandbox) unless it gets exactly the harness view of a rollout:
# run in a training phase and in a backtest replay, it holds both to the one definition
VIEW_CHECKING_FILTERS = '''
EXPECTED = %r


def keep_rollout(rollout):
    assert sorted(rollout) == EXPECTED, sorted(rollout)
    assert rollout["task"]["difficulty"] == rollout["difficulty"] and rollout["task"]["id"] == rollout["task_id"]
    assert "answer" in rollout["task"] and isinstance(rollout["advantage"], float)
    return True


def keep_group(group):
    return all(keep_rollout(r) for r in group) and len({r["group_id"] for r in group}) == 1
''' % sorted(HARNESS_VIEW)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on (for servers the tests start, and for ones they don't)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def task(i: int, level: str = "1", answer: str = "9") -> dict:
    return {"id": f"train-{level}-{i}", "difficulty": level, "question": "", "expression": "4 + 5",
            "answer": answer}


def rollouts(groups: list[list[tuple[str, bool]]], phase: int = 1, truncated: bool = False) -> list[dict]:
    """Rollout rows (DESIGN.md's Rollout) from groups of (completion, verified); reward = verified."""
    rows = []
    for g, members in enumerate(groups):
        for k, (completion, ok) in enumerate(members):
            rows.append({
                "phase": phase, "step": 1 + g // 4, "harness_sha": "0" * 40, "group_id": f"p{phase}-g{g}",
                "sample_idx": k, "task_id": f"train-1-{g}", "difficulty": str(1 + g % 4), "prompt": "4+5=",
                "completion": completion, "completion_tokens": len(completion) + (0 if truncated else 1),
                "truncated": truncated, "reward": 1.0 if ok else 0.0, "reward_components": {"correct": float(ok)},
                "verified": ok, "advantage": 0.0, "kept": True, "turns": 1, "tool_calls": 0, "extra": {},
            })
    return rows


def tasks_for(rows: list[dict]) -> dict[str, dict]:
    return {r["task_id"]: task(int(r["task_id"].rsplit("-", 1)[1]), r["task_id"].split("-")[1]) for r in rows}


@pytest.fixture(scope="session")
def policy_cache(tmp_path_factory) -> Path:
    """One EVOTRAINER_CACHE for the session: the tiny policy is built once and reused by every run test."""
    path = tmp_path_factory.mktemp("evotrainer-cache")
    return path


@pytest.fixture
def cli_env(policy_cache: Path) -> dict:
    env = {**os.environ, "EVOTRAINER_CACHE": str(policy_cache), "PYTHONPATH": str(ROOT),
           "COLUMNS": "200", "TOKENIZERS_PARALLELISM": "false"}
    return env


def cli(args: list[str], env: dict, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*EVOTRAINER, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"evotrainer {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc
