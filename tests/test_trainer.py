"""The trainer's GRPO phase, in process: the harness group filter really changes what trains.

TRL's GRPOTrainer has no hook for group filters; ``evotrainer.trainer.grpo`` adds one. Here a harness whose
``keep_group`` drops every group must leave the weights exactly as they were (and log every rollout as not
kept, with zero advantage), while the seed harness, on the same tasks, changes them. Both phases log every
rollout with the evaluator's ``verified`` flag and publish a checkpoint and result atomically.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evotrainer import config as C
from evotrainer.harness import HarnessRepo
from evotrainer.rollouts import read_rollouts
from evotrainer.rundir import RunDir
from tests.conftest import FAST


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, policy_cache) -> RunDir:
    import os

    os.environ["EVOTRAINER_CACHE"] = str(policy_cache)
    rd = RunDir(tmp_path_factory.mktemp("trainer") / "run")
    rd.init(C.apply_overrides(C.parse({}), FAST), log=lambda _: None)
    rd.ensure_policy(log=lambda _: None)
    return rd


def _weights(path: str) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}


def _request(rd: RunDir, phase: int, sha: str):
    from evotrainer.trainer.grpo import PhaseRequest

    return PhaseRequest(run_dir=str(rd.root), phase=phase, harness_sha=sha,
                        init_checkpoint=str(rd.root / "policy" / "base"), steps=3, prompts_per_step=4, seed=0,
                        eval_max_new_tokens=8, sandbox_backend="process")


def test_group_filter_decides_what_trains(run_dir: RunDir):
    from evotrainer.trainer.grpo import run_phase

    repo = HarnessRepo(run_dir.harness)
    src = repo.show_file("main", "filters.py").replace(
        "def keep_group(group: list[dict]) -> bool:\n    return True",
        "def keep_group(group: list[dict]) -> bool:\n    return False")
    drop_all = repo.commit_candidate("candidates/test-drop-all", repo.sha("main"), {"filters.py": src},
                                     "filters.keep_group: drop every group", "test", {})
    base = _weights(str(run_dir.root / "policy" / "base"))

    dropped = run_phase(_request(run_dir, 1, drop_all))
    rows = read_rollouts(Path(dropped.rollout_path))
    assert len(rows) == 3 * 4 * 8 and not any(r["kept"] for r in rows)
    assert all(r["advantage"] == 0.0 for r in rows) and dropped.skipped_batches == 3
    assert {r["verified"] for r in rows} <= {True, False} and all(r["harness_sha"] == drop_all for r in rows)
    after = _weights(dropped.checkpoint_path)
    assert all(torch.equal(base[k], after[k]) for k in base), "a filtered-out batch still changed the weights"

    kept = run_phase(_request(run_dir, 2, repo.sha("main")))
    rows = read_rollouts(Path(kept.rollout_path))
    assert all(r["kept"] for r in rows) and kept.skipped_batches == 0
    trained = _weights(kept.checkpoint_path)
    assert any(not torch.equal(base[k], trained[k]) for k in base), "the seed harness did not train"
    assert 0.0 <= kept.eval.accuracy <= 1.0 and kept.eval.n == 40
    # a finished phase is never trained twice: asking again returns the published result
    assert run_phase(_request(run_dir, 2, repo.sha("main"))).wall_time_s == kept.wall_time_s


def test_any_local_model_path_is_used_as_is(run_dir: RunDir):
    from evotrainer.policy import ensure_base_policy

    cfg = C.parse({"policy": {"model": str(run_dir.root / "policy" / "base")}})
    assert ensure_base_policy(cfg, run_dir.root, [], str) == str(run_dir.root / "policy" / "base")
