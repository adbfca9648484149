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
from evotrainer.harness.repo import HarnessRepo
from evotrainer.judge.scoring import trained as did_train
from evotrainer.rollouts import read_rollouts
from evotrainer.rundir import RunDir
from tests.conftest import FAST, VIEW_CHECKING_FILTERS


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
    from evotrainer.config import SandboxConfig, TrainingConfig
    from evotrainer.trainer.wire import PhaseRequest

    return PhaseRequest(run_dir=str(rd.root), phase=phase, harness_sha=sha,
                        init_checkpoint=str(rd.root / "policy" / "base"), steps=3, seed=0,
                        training=TrainingConfig(prompts_per_step=4, eval_max_new_tokens=8),
                        sandbox=SandboxConfig(backend="process"))


# a dense reward (a length term beside correctness): the short-trained test policy rarely answers right, and an
# all-wrong batch has no advantage at all, so these tests give every group reward spread to make gradients flow
_DENSE = '''
def correct(sample):
    return 1.0 if sample["completion"].split("\\n", 1)[0].strip() == sample["task"]["answer"] else 0.0


def short(sample):
    return -0.1 * sample["completion_tokens"]


COMPONENTS = {"correct": correct, "short": short}
'''


def _with_group_filter(run_dir: RunDir, name: str, keep: str = "True") -> str:
    """A candidate commit with a dense reward whose filters.keep_group returns ``keep``; its sha."""
    repo = HarnessRepo(run_dir.harness)
    src = repo.show_file("main", "filters.py").replace(
        "def keep_group(group: list[dict]) -> bool:\n    return True",
        f"def keep_group(group: list[dict]) -> bool:\n    return {keep}")
    assert f"return {keep}" in src
    return repo.commit_candidate(f"candidates/test-{name}", repo.sha("main"), {"filters.py": src, "rewards.py": _DENSE},
                                 f"filters.keep_group: return {keep}", "test", {})


def test_group_filter_decides_what_trains(run_dir: RunDir):
    from evotrainer.trainer.grpo import run_phase

    repo = HarnessRepo(run_dir.harness)
    drop_all = _with_group_filter(run_dir, "drop-all", "False")
    base = _weights(str(run_dir.root / "policy" / "base"))

    dropped = run_phase(_request(run_dir, 1, drop_all))
    rows = read_rollouts(Path(dropped.rollout_path))
    assert len(rows) == 3 * 4 * 8 and not any(r["kept"] for r in rows)
    assert all(r["advantage"] == 0.0 for r in rows) and dropped.skipped_batches == 3
    assert {r["verified"] for r in rows} <= {True, False} and all(r["harness_sha"] == drop_all for r in rows)
    after = _weights(dropped.checkpoint_path)
    assert all(torch.equal(base[k], after[k]) for k in base), "a filtered-out batch still changed the weights"

    kept = run_phase(_request(run_dir, 2, _with_group_filter(run_dir, "keep-all")))
    rows = read_rollouts(Path(kept.rollout_path))
    assert all(r["kept"] for r in rows) and kept.skipped_batches == 0

    # filters see exactly the rollout fields they see in the backtest's replay (test_backtest runs the same one)
    checking = repo.commit_candidate("candidates/test-view", repo.sha("main"), {"filters.py": VIEW_CHECKING_FILTERS},
                                     "filters: check the view", "test", {})
    assert run_phase(_request(run_dir, 3, checking)).steps == 3

    # truncated completions that TRL masks out of the loss are logged as not trained
    knobs = repo.show_file("main", "harness.yaml").replace("max_completion_length: 8", "max_completion_length: 2")
    knobs = knobs.replace("mask_truncated_completions: false", "mask_truncated_completions: true")
    masking = repo.commit_candidate("candidates/test-mask", repo.sha("main"), {"harness.yaml": knobs},
                                    "harness.yaml: mask truncated", "test", {})
    rows = read_rollouts(Path(run_phase(_request(run_dir, 4, masking)).rollout_path))
    cut = [r for r in rows if r["truncated"]]
    assert cut and all(r["advantage"] == 0.0 and r["extra"] == {"masked_truncated": True} for r in cut)
    assert not any(did_train(r) for r in cut) and all(did_train(r) for r in rows if not r["truncated"])
    trained = _weights(kept.checkpoint_path)
    assert any(not torch.equal(base[k], trained[k]) for k in base), "the seed harness did not train"
    assert kept.eval.n == 40 and sorted(kept.eval.by_difficulty) == ["1", "2", "3", "4"]
    assert round(kept.eval.accuracy * 40, 6) == int(round(kept.eval.accuracy * 40))  # a share of 40 items
    # a finished phase is never trained twice: asking again returns the published result
    assert run_phase(_request(run_dir, 2, kept.harness_sha)).wall_time_s == kept.wall_time_s


def test_any_local_model_path_is_used_as_is(run_dir: RunDir):
    from evotrainer.policy.build import ensure_base_policy

    cfg = C.parse({"policy": {"model": str(run_dir.root / "policy" / "base")}})
    assert ensure_base_policy(cfg, run_dir.root, [], str) == str(run_dir.root / "policy" / "base")


@pytest.mark.slow  # starts the trainer service three times: about 45 s
def test_a_local_service_that_dies_is_restarted_and_the_call_goes_through(run_dir: RunDir, policy_cache):
    import os
    import signal

    import psutil

    from evotrainer.config import TrainingConfig
    from evotrainer.trainer.client import LocalService, TrainerClient, TrainerError, TrainerLost
    from evotrainer.trainer.wire import EvalRequest

    restarts: list[str] = []
    secrets = {"OPENAI_API_KEY": "sk-test-llm", "MY_SERVICE_TOKEN": "t", "HF_TOKEN": "hf_x", "WANDB_API_KEY": "w"}
    service = LocalService(run_dir.root, env={"EVOTRAINER_CACHE": str(policy_cache), **secrets},
                           on_restart=restarts.append)
    client = TrainerClient(service.start(), restart=service.restart, max_restarts=1, token=service.token)
    base = str(run_dir.root / "policy" / "base")
    ask = EvalRequest(run_dir=str(run_dir.root), checkpoint=base, training=TrainingConfig(eval_max_new_tokens=8))
    try:
        anonymous = TrainerClient(client.url)  # another local user, or another run, without this run's token
        with pytest.raises(TrainerError, match="refused this run: missing or wrong trainer token"):
            anonymous.health()
        assert anonymous.http.post("/shutdown").status_code == 401 and client.health()["ok"]
        anonymous.close()
        first_pid = service.proc.pid
        seen = psutil.Process(first_pid).environ()  # the agents' keys stay with the run process
        assert "OPENAI_API_KEY" not in seen and "MY_SERVICE_TOKEN" not in seen
        assert seen["HF_TOKEN"] == "hf_x" and seen["WANDB_API_KEY"] == "w" and "EVOTRAINER_CACHE" in seen
        os.kill(first_pid, signal.SIGKILL)
        service.proc.wait()
        result = client.evaluate(ask)
        assert result.n == 40 and sorted(result.by_difficulty) == ["1", "2", "3", "4"]
        assert service.proc.pid != first_pid and len(restarts) == 1
        assert "killed by SIGKILL" in restarts[0] and "trainer.log" in restarts[0]
        assert client.restarts_in_a_row == 0  # a finished call resets the count

        client.max_restarts = 0  # a service that keeps dying is not restarted forever
        os.kill(service.proc.pid, signal.SIGKILL)
        service.proc.wait()
        with pytest.raises(TrainerLost, match="restarted 0 time.* in a row already .*trainer.max_restarts"):
            client.evaluate(ask)
    finally:
        client.close()
        service.stop()
    assert not (run_dir.root / "trainer.json").exists()

    remote = TrainerClient("http://127.0.0.1:9")  # nothing listens there, and it is not ours to restart
    with pytest.raises(TrainerLost, match="not started by this run"):
        remote.evaluate(ask)


@pytest.mark.slow  # a service started from a shadow copy of the package, then a phase through it: ~40 s
def test_a_local_service_runs_the_run_s_own_code_from_any_directory(run_dir: RunDir, tmp_path, monkeypatch):
    import re
    import shutil

    import evotrainer
    from evotrainer.trainer.client import LocalService, TrainerClient, TrainerError
    from evotrainer.trainer.wire import package_dir

    # another copy of the package in a folder named evotrainer: once, started from such a working directory, the
    # service ran that copy and refused the run's requests (a field it did not know)
    shadow = tmp_path / "work"
    shutil.copytree(Path(evotrainer.__file__).parent, shadow / "evotrainer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(shadow)
    service = LocalService(run_dir.root)
    try:
        client = TrainerClient(service.start(), token=service.token)
        assert client.health()["package"] == package_dir() != str(shadow / "evotrainer")
        client.close()
    finally:
        service.stop()
    monkeypatch.setenv("PYTHONPATH", str(shadow))  # the copy first on the import path: refused, in one line
    service = LocalService(run_dir.root)
    with pytest.raises(TrainerError, match=re.escape(f"imported evotrainer from {shadow / 'evotrainer'}, not from "
                                                     f"{package_dir()} like this run")):
        service.start()
    assert service.proc.poll() is not None and not (run_dir.root / "trainer.json").exists()


def test_the_service_refuses_to_listen_beyond_loopback_without_a_token():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "EVOTRAINER_TRAINER_TOKEN"}
    out = subprocess.run([sys.executable, "-m", "evotrainer.trainer.service", "--host", "0.0.0.0", "--port", "0"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == "", out
    assert out.stderr.strip().startswith("refusing to serve on 0.0.0.0 without a token: ") and \
        len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.slow  # a second trainer service started and a phase run through it: ~23 s
def test_a_configured_trainer_url_is_reached_with_the_token_from_the_environment(tmp_path: Path, monkeypatch):
    """``trainer.url``: a service started by hand with a token; the run's client sends $EVOTRAINER_TRAINER_TOKEN."""
    import os
    import subprocess
    import sys
    import time

    import httpx

    from evotrainer.trainer.client import TrainerError, connect

    port_file = tmp_path / "port"
    env = {**os.environ, "EVOTRAINER_TRAINER_TOKEN": "s3cret-token-for-this-test"}
    proc = subprocess.Popen([sys.executable, "-m", "evotrainer.trainer.service", "--port", "0", "--port-file",
                             str(port_file)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not port_file.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        while time.time() < deadline:  # the port is bound before the server accepts: wait for any answer (401)
            try:
                httpx.get(f"{url}/health", timeout=30, trust_env=False)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        monkeypatch.delenv("EVOTRAINER_TRAINER_TOKEN", raising=False)
        with pytest.raises(TrainerError, match=f"the trainer service at {url} refused this run: .*set "
                                               "EVOTRAINER_TRAINER_TOKEN"):
            with connect(tmp_path, url):
                pass
        monkeypatch.setenv("EVOTRAINER_TRAINER_TOKEN", "s3cret-token-for-this-test")
        with connect(tmp_path, url) as client:
            assert client.health()["pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_step_whose_rollouts_are_all_filtered_out_leaves_the_weights_alone(run_dir: RunDir):
    """Not even through the optimizer's momentum or weight decay: 3 steps of which only the first keeps anything
    end with exactly the weights of a 1-step phase (same phase number, so the same seeds and first tasks)."""
    from evotrainer.trainer.grpo import run_phase

    first_only = _with_group_filter(run_dir, "first-step", 'group[0]["step"] == 1')
    repo = HarnessRepo(run_dir.harness)
    three = run_phase(_request(run_dir, 9, first_only))
    assert three.skipped_batches == 2
    after_three = _weights(three.checkpoint_path)
    one = run_phase(_request(run_dir, 9, _with_group_filter(run_dir, "keep-all-dense")).model_copy(
        update={"steps": 1}))
    after_one = _weights(one.checkpoint_path)
    base = _weights(str(run_dir.root / "policy" / "base"))
    assert any(not torch.equal(base[k], after_one[k]) for k in base), "step 1 did not train"
    assert all(torch.equal(after_one[k], after_three[k]) for k in base), "a filtered-out step moved the weights"


# a harness that exercises every part of the scoring contract: two weighted components and a reward scale, batch
# scaling, truncation masking, filters that drop single rollouts (the group's advantages are recomputed) and whole
# groups, and dynamic sampling (twice the prompts generated, the first kept groups up to the step's count train)
_SCORING_REWARDS = '''
def correct(sample):
    return 1.0 if sample["completion"].split("\\n", 1)[0].strip() == sample["task"]["answer"] else 0.0


def shorter(sample):
    return -0.1 * sample["completion_tokens"]


COMPONENTS = {"correct": correct, "shorter": shorter}
'''
_SCORING_FILTERS = '''
def keep_rollout(rollout):
    return rollout["sample_idx"] != 3


def keep_group(group):
    return len(group[0]["completion"]) % 3 != 0
'''


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_replay_reproduces_what_training_logged(run_dir: RunDir, scale: str):
    """One scoring contract: main replayed on a trained phase's rollouts gives the logged rewards, advantages and
    kept flags exactly, so the backtest judges the harness that trains."""
    from evotrainer.judge.replay import replay
    from evotrainer.trainer.grpo import run_phase
    from sandbox import HarnessWorker

    repo = HarnessRepo(run_dir.harness)
    knobs = repo.show_file("main", "harness.yaml")
    for old, new in (("scale_rewards: group", f"scale_rewards: {scale}"),
                     ("mask_truncated_completions: false", "mask_truncated_completions: true"),
                     ("max_completion_length: 8", "max_completion_length: 3"), ("oversample: 1 ", "oversample: 2 "),
                     ("  correct: 1.0", "  correct: 1.0\n  shorter: 0.7")):
        assert old in knobs
        knobs = knobs.replace(old, new)
    sha = repo.commit_candidate(f"candidates/test-scoring-{scale}", repo.sha("main"),
                                {"harness.yaml": knobs, "rewards.py": _SCORING_REWARDS,
                                 "filters.py": _SCORING_FILTERS}, "scoring contract", "test", {})
    result = run_phase(_request(run_dir, 20 + ["group", "batch", "none"].index(scale), sha))
    logged = read_rollouts(Path(result.rollout_path))
    tasks = {t["id"]: t for t in run_dir.train_tasks()}
    with repo.worktree(sha) as harness, HarnessWorker(harness, backend="process") as worker:
        replayed = replay(worker, harness, logged, tasks)["rows"]
    assert [r["reward"] for r in replayed] == [r["reward"] for r in logged]
    assert [r["kept"] for r in replayed] == [r["kept"] for r in logged]
    assert [r["advantage"] for r in replayed] == [r["advantage"] for r in logged]
    assert [r["trained"] for r in replayed] == [did_train(r) for r in logged]
    # the harness made every kind of decision, so the equalities above are not vacuous
    assert {r["kept"] for r in logged} == {True, False} and any(r["truncated"] and r["kept"] for r in logged)
    assert any(r["advantage"] > 0 for r in logged) and len({r["reward"] for r in logged}) > 2
    groups = {}
    for r in logged:
        groups.setdefault((r["step"], r["group_id"]), []).append(r["kept"])
    per_step = {}
    for (step, _), kept in groups.items():
        per_step.setdefault(step, []).append(any(kept))
    assert all(len(v) == 8 and sum(v) <= 4 for v in per_step.values())  # 2 x 4 prompts generated, <= 4 train


def test_a_counterfactual_meets_the_phase_s_tasks_and_a_later_replicate_others():
    from evotrainer.config import SandboxConfig, TrainingConfig
    from evotrainer.trainer.grpo import task_seed
    from evotrainer.trainer.wire import PhaseRequest

    phase = PhaseRequest(run_dir="r", phase=3, harness_sha="a", init_checkpoint="c", steps=5,
                         training=TrainingConfig(prompts_per_step=4), seed=1, sandbox=SandboxConfig(backend="process"))
    counterfactual = phase.model_copy(update={"pilot": True, "counterfactual": True})
    trial = phase.model_copy(update={"pilot": True, "probe_size": 40})
    assert task_seed(counterfactual) == task_seed(phase)  # the old main meets what the edit met
    seeds = [task_seed(r.model_copy(update={"replicate": i})) for r in (counterfactual, trial) for i in (0, 1, 2)]
    assert len(set(seeds)) == 6  # every replicate, and every trial arm, draws its own


def test_a_rerun_draws_other_tasks_and_seeds_in_every_job_and_only_there():
    from evotrainer import config as C
    from evotrainer.trainer.grpo import sampling_seed, task_seed
    from evotrainer.trainer.wire import PhaseRequest

    cfg = C.apply_overrides(C.parse({}), ["seed=1", "training.rerun=1"])
    phase = PhaseRequest.make(cfg, "r", 3, "a", "c", 5)
    assert phase.training.rerun == 1 and phase.seed == 1  # the run's seed (policy, pool, held-out split) is unchanged
    jobs = [phase, phase.model_copy(update={"pilot": True, "counterfactual": True}),
            phase.model_copy(update={"pilot": True, "probe_size": 40, "replicate": 1})]
    for rule in (task_seed, sampling_seed):
        first = {rule(j.model_copy(update={"training": j.training.model_copy(update={"rerun": 0}), "phase": p}))
                 for j in jobs for p in range(1, 50)}
        again = {rule(j.model_copy(update={"phase": p})) for j in jobs for p in range(1, 50)}
        assert not first & again, rule.__name__  # no job of the rerun repeats any job of the first run
        assert 0 <= rule(jobs[2]) < 2 ** 32  # numpy's seed range
    assert task_seed(jobs[1]) == task_seed(phase)  # a rerun's counterfactual still meets its phase's tasks


def test_no_two_jobs_of_other_seeds_phases_replicates_or_reruns_share_a_seed():
    """Seed s at phase p + 1 must not replay seed s + 1 at phase p (nor any other pair of jobs)."""
    from evotrainer import config as C
    from evotrainer.trainer.grpo import sampling_seed, task_seed
    from evotrainer.trainer.wire import PhaseRequest

    for rule in (task_seed, sampling_seed):
        seen = {}
        for seed in range(6):
            for rerun in range(3):
                cfg = C.apply_overrides(C.parse({}), [f"seed={seed}", f"training.rerun={rerun}"])
                for phase in range(1, 13):
                    job = PhaseRequest.make(cfg, "r", phase, "a", "c", 5)
                    for replicate in range(3):
                        for kind in ({"pilot": True, "probe_size": 40}, {"pilot": True, "counterfactual": True}, {}):
                            if not kind and replicate:
                                continue  # a phase has no replicates
                            if kind.get("counterfactual") and not replicate and rule is task_seed:
                                continue  # the counterfactual's first replicate is its phase's draw, on purpose
                            key = (seed, rerun, phase, replicate, tuple(kind))
                            value = rule(job.model_copy(update={**kind, "replicate": replicate}))
                            if rule is sampling_seed:  # sampling: every job of one replicate shares it
                                key = (seed, rerun, phase, replicate)
                            assert seen.setdefault(value, key) == key, (rule.__name__, key, seen[value])


def test_a_pilot_sees_the_same_tasks_as_main_and_publishes_nothing(run_dir: RunDir):
    """Pilots judge knob edits: main and a candidate piloted with the same request differ only by the edit."""
    from evotrainer.trainer.grpo import run_pilot

    repo = HarnessRepo(run_dir.harness)
    knobs = repo.show_file("main", "harness.yaml").replace("temperature: 1.0 ", "temperature: 1.6 ")
    hot = repo.commit_candidate("candidates/test-pilot", repo.sha("main"), {"harness.yaml": knobs},
                                "harness.yaml: temperature", "test", {})
    request = _request(run_dir, 30, repo.sha("main")).model_copy(update={"steps": 2, "pilot": True, "probe_size": 40})
    main = run_pilot(request)
    cand = run_pilot(request.model_copy(update={"harness_sha": hot}))
    main_rows, cand_rows = read_rollouts(Path(main.rollout_path)), read_rollouts(Path(cand.rollout_path))
    assert [r["task_id"] for r in main_rows] == [r["task_id"] for r in cand_rows] and len(main_rows) == 2 * 4 * 8
    assert {r["harness_sha"] for r in cand_rows} == {hot} and main.stats["groups"] == 8
    assert main.completions == cand.completions == 2 * 4 * 8  # what a trial costs, charged to its run's budget
    assert [r["completion"] for r in main_rows] != [r["completion"] for r in cand_rows]  # the knob acted
    assert not run_dir.checkpoint(30).exists() and not run_dir.rollout_file(30).exists()
    # both arms are scored on the same probe tasks, from the dev split: never trained on, never held-out
    assert main.probe.n == cand.probe.n == 40 and set(main.probe.items) == set(cand.probe.items)
    assert all(t.startswith("dev-") for t in main.probe.items)
    # harness code sees the pilot's 2 batches as 2 consecutive steps somewhere in a phase, the same in both arms
    steps, length = sorted({r["step"] for r in main_rows}), request.training.steps_per_phase
    assert steps == sorted({r["step"] for r in cand_rows}) and len(steps) == 2 and steps[1] == steps[0] + 1 <= length


def test_a_trial_s_steps_fall_anywhere_in_a_phase_and_a_phase_s_are_its_own():
    """A filter keyed on ``step`` cannot tell a 20-step trial from a phase: the trial's window moves over the phase."""
    from evotrainer import config as C
    from evotrainer.trainer.grpo import task_seed, trial_window
    from evotrainer.trainer.wire import PhaseRequest

    cfg = C.apply_overrides(C.parse({}), ["training.steps_per_phase=60"])
    phase = PhaseRequest.make(cfg, "r", 3, "a", "c", 60)
    assert trial_window(phase, task_seed(phase)) == 0
    counterfactual = phase.model_copy(update={"pilot": True, "counterfactual": True})
    assert trial_window(counterfactual, task_seed(counterfactual)) == 0  # as long as a phase: its own steps
    trials = [phase.model_copy(update={"pilot": True, "steps": 20, "replicate": r, "phase": p})
              for r in range(2) for p in range(1, 41)]
    shifts = [trial_window(t, task_seed(t)) for t in trials]
    assert all(0 <= k <= 40 for k in shifts) and len(set(shifts)) > 15  # spread over the whole phase
    assert sum(k + 20 > 20 for k in shifts) > 30  # most trials reach past a phase's first 20 steps
