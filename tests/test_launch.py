"""Several processes train one phase (``trainer.processes``): ``accelerate launch`` of the phase, here on 2 CPU
processes over gloo, as it runs on several GPUs over NCCL.

The decisive check is the scoring contract: the harness's filters judge the whole generated batch once (groups,
dynamic sampling's capacity and batch scaling span the processes' shares), so main replayed on the rollouts the
launched phase logged must give exactly the logged rewards, kept flags and advantages, as it does for a phase
trained in one process (tests/test_trainer.py). Decisions taken per process on its own share would differ.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
import torch

from evotrainer import config as C
from evotrainer.harness.repo import HarnessRepo
from evotrainer.judge.scoring import trained as did_train
from evotrainer.rollouts import read_rollouts
from evotrainer.rundir import RunDir
from evotrainer.trainer import launch
from tests.conftest import FAST, SEED
from tests.test_trainer import _SCORING_REWARDS, _request, _weights

# the scoring contract's filters (drop one rollout per group, drop groups by completion length), and nothing at
# all after the first generated batch: a step every process skips together, without waiting on one another
_FILTERS = '''
def keep_rollout(rollout):
    return rollout["sample_idx"] != 3


def keep_group(group):
    return group[0]["step"] == 1 and len(group[0]["completion"]) % 3 != 0
'''
# a prompt that differs from one sandbox process to the next (each rank has its own): the ranks must train on one
# draw of tasks and prompts, rank 0's, or each would generate for prompts of its own making
_PROMPT = '''
import os


def make_prompt(task):
    return task["expression"].replace(" ", "") + "=" + "abcdefghijklmnopqrstuvwxyz"[os.getpid() % 26]
'''


def test_the_launch_command_and_what_stops_it():
    cmd = launch.command(4, ["--gpu_ids", "0,1,2,3"], Path("/tmp/job"))
    assert cmd[1:4] == ["-m", "accelerate.commands.launch", "--multi_gpu"]
    assert cmd[cmd.index("--num_processes") + 1] == "4" and cmd[-3:] == ["-m", "evotrainer.trainer.launch", "/tmp/job"]
    assert cmd.index("--gpu_ids") < cmd.index("evotrainer.trainer.launch")
    assert launch.check(1, "cuda") is None and launch.check(2, "cpu") is None
    if not torch.cuda.is_available():
        assert "has 0 GPU(s)" in launch.check(2, "cuda")


def test_only_the_allowed_launcher_flags_reach_the_command_line(tmp_path):
    """Requests come over HTTP: flags beyond which GPUs, a config file, a port and CPU threads are refused, in the
    config (one line) and by the service, before anything is launched."""
    from evotrainer.trainer.wire import PhaseRequest

    assert C.accelerate_args_problem(["--gpu_ids", "0,1", "--config_file", "acc.yaml"]) is None
    for bad in (["--no_python", "x"], ["--gpu_ids"], ["--gpu_ids", "0", "-m", "os"]):
        assert "trainer.accelerate_args: pairs of flag and value" in C.accelerate_args_problem(bad)
    with pytest.raises(C.ConfigError, match=r"trainer.accelerate_args: .*pairs of flag and value"):
        C.apply_overrides(C.parse({}), ["trainer.accelerate_args=[--no_python, x]"])
    req = PhaseRequest(run_dir=str(tmp_path), phase=1, harness_sha="0" * 40, init_checkpoint="x", steps=1,
                       training=C.TrainingConfig(prompts_per_step=1), policy=C.PolicyConfig(device="cpu"),
                       trainer=C.TrainerConfig.model_construct(processes=2, accelerate_args=["--no_python", "x"]))
    with pytest.raises(ValueError, match=r"flags among .* \(got \['--no_python', 'x'\]\)"):
        launch.run_launched(req)
    assert not (tmp_path / "tmp").exists()  # refused before any job folder was made


def test_processes_must_divide_the_generated_batch(monkeypatch, tmp_path):
    from evotrainer.harness.knobs import read_knobs
    from evotrainer.trainer.grpo import grpo_config
    from evotrainer.trainer.wire import PhaseRequest

    req = PhaseRequest(run_dir=str(tmp_path), phase=1, harness_sha="0" * 40, init_checkpoint="x", steps=2,
                       training=C.TrainingConfig(prompts_per_step=3))
    knobs = read_knobs(SEED)
    assert (knobs.group_size, knobs.oversample) == (8, 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert grpo_config(req, knobs, "cpu", tmp_path)["per_device_train_batch_size"] == 12  # 3 x 8 / 2
    monkeypatch.setenv("WORLD_SIZE", "5")
    with pytest.raises(ValueError, match=r"trainer.processes \(5\) must divide .* = 3 x 1 x 8 = 24"):
        grpo_config(req, knobs, "cpu", tmp_path)


def test_gradient_checkpointing_is_on_with_cuda_and_off_on_cpu_unless_set(tmp_path):
    from evotrainer.harness.knobs import read_knobs
    from evotrainer.trainer.grpo import grpo_config
    from evotrainer.trainer.wire import PhaseRequest

    knobs = read_knobs(SEED)
    for setting, device, on in (("auto", "cpu", False), ("auto", "cuda", True), ("on", "cpu", True),
                                ("off", "cuda", False)):
        req = PhaseRequest(run_dir=str(tmp_path), phase=1, harness_sha="0" * 40, init_checkpoint="x", steps=2,
                           policy=C.PolicyConfig(gradient_checkpointing=setting))
        assert grpo_config(req, knobs, device, tmp_path)["gradient_checkpointing"] is on, (setting, device)


@pytest.mark.slow
def test_two_processes_train_one_phase_and_the_harness_judges_the_whole_batch(tmp_path, policy_cache):
    from evotrainer.judge.replay import replay
    from sandbox import HarnessWorker

    os.environ["EVOTRAINER_CACHE"] = str(policy_cache)
    rd = RunDir(tmp_path / "run")
    rd.init(C.apply_overrides(C.parse({}), FAST), log=lambda _: None)
    rd.ensure_policy(log=lambda _: None)
    repo = HarnessRepo(rd.harness)
    knobs = repo.show_file("main", "harness.yaml")
    for old, new in (("scale_rewards: group", "scale_rewards: batch"), ("oversample: 1 ", "oversample: 2 "),
                     ("max_completion_length: 8", "max_completion_length: 3"),
                     ("mask_truncated_completions: false", "mask_truncated_completions: true")):
        assert old in knobs
        knobs = knobs.replace(old, new)
    sha = repo.commit_candidate("candidates/test-launch", repo.sha("main"),
                                {"harness.yaml": knobs, "rewards.py": _SCORING_REWARDS, "filters.py": _FILTERS,
                                 "prompt.py": _PROMPT},
                                "two processes", "test", {})
    req = _request(rd, 1, sha)
    req = req.model_copy(update={"trainer": req.trainer.model_copy(update={"processes": 2})})
    seen: list[dict] = []
    result = launch.run_launched(req, progress=seen.append, poll_s=0.2)

    logged = read_rollouts(Path(result.rollout_path))
    assert len(logged) == 3 * 2 * 4 * 8  # every process's share of 3 batches of 2 x 4 prompts x 8 completions
    assert len({r["group_id"] for r in logged}) == 3 * 2 * 4
    assert len({r["prompt"][-1] for r in logged}) == 1  # one draw of prompts, made on rank 0, for every rank
    with repo.worktree(sha) as harness, HarnessWorker(harness, backend="process") as worker:
        replayed = replay(worker, harness, logged, {t["id"]: t for t in rd.train_tasks()})["rows"]
    assert [r["reward"] for r in replayed] == [r["reward"] for r in logged]
    assert [r["kept"] for r in replayed] == [r["kept"] for r in logged]
    assert [r["advantage"] for r in replayed] == [r["advantage"] for r in logged]
    assert [r["trained"] for r in replayed] == [did_train(r) for r in logged]
    # not vacuous: rollouts kept and dropped, groups beyond the step's capacity, positive advantages
    first = [r for r in logged if r["step"] == 1]
    assert {r["kept"] for r in first} == {True, False} and any(r["advantage"] > 0 for r in first)
    assert len({r["group_id"] for r in first if r["kept"]}) <= 4  # dynamic sampling: 8 generated, at most 4 train
    # steps 2 and 3 kept nothing on any process: skipped together, and the first step did train
    assert result.skipped_batches == 2 and not any(r["kept"] for r in logged if r["step"] > 1)
    base, after = _weights(str(rd.root / "policy" / "base")), _weights(result.checkpoint_path)
    assert any(not torch.equal(base[k], after[k]) for k in base)
    assert result.eval.n == 40 and (Path(result.checkpoint_path) / "optimizer.pt").is_file()
    assert seen and seen[-1]["stage"] == "done"

    # a rank that fails fails the phase with its one-line reason, and no process is left behind
    bad = req.model_copy(update={"phase": 2, "init_checkpoint": str(tmp_path / "no-such-policy")})
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match=r"2 processes: .*no-such-policy"):
        launch.run_launched(bad, poll_s=0.2)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert psutil.wait_procs(left, timeout=10)[1] == [], "a launched process outlived its job"
    jobs = sorted(p.name for p in (rd.scratch / "launch").iterdir())
    assert jobs == [f"phase-0002-{sha[:10]}"]  # the failed job's folder (and log) stays; the finished one is gone
    assert not (rd.scratch / "phase-0001").exists()  # nor are the ranks' scratch folders left behind
