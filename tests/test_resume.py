"""Resume after `kill -9`: mid-phase and mid-evolution, the rerun picks up at the node it was in.

The run process is killed with SIGKILL (no cleanup code runs). Its trainer service must notice and exit on its
own; `evotrainer status` must say the run is paused; `evotrainer run` again must finish the run without
re-training a finished phase, without losing or duplicating rollouts, and with a clean `main`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import EVOTRAINER, cli
from tests.test_e2e import check_finished_run, init_args, trainer_processes


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_until(run_dir: Path, env: dict, done, timeout: float = 400) -> None:
    """Start `evotrainer run`, wait until ``done(events)`` holds, then SIGKILL the run process."""
    proc = subprocess.Popen([*EVOTRAINER, "run", str(run_dir)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    try:
        while not done(events(run_dir)):
            assert proc.poll() is None, f"the run ended (code {proc.returncode}) before the kill point"
            assert time.time() < deadline, "the kill point was never reached"
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_gone(run_dir: Path, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while trainer_processes(run_dir) and time.time() < deadline:
        time.sleep(0.2)
    assert not trainer_processes(run_dir), "the trainer service outlived the killed run"


def mid_phase(evs: list[dict]) -> bool:
    """Phase 1 is training: the trainer has started the job (its scratch dir exists)."""
    return any(e["kind"] == "node_start" and e.get("node") == "train" for e in evs)


def mid_evolution(evs: list[dict]) -> bool:
    """Phase 1 trained and its candidates are committed on branches, not yet judged or promoted."""
    return any(e["kind"] == "candidate" and e["phase"] == 1 for e in evs)


@pytest.mark.slow
def test_kill_mid_phase_and_mid_evolution_then_resume(tmp_path: Path, cli_env):
    run_dir = tmp_path / "run"
    cli(init_args(run_dir, phases=2), cli_env)

    # 1. kill while phase 1 trains
    run_until(run_dir, cli_env, lambda evs: mid_phase(evs) and (run_dir / "tmp" / "phase-0001").exists())
    wait_gone(run_dir)
    status = json.loads(cli(["status", str(run_dir), "--json"], cli_env).stdout)
    assert status["state"] == "paused" and status["phase"] == 0, status

    # 2. resume, and kill again once phase 1's candidates exist but are not judged yet
    run_until(run_dir, cli_env, mid_evolution)
    wait_gone(run_dir)
    assert json.loads(cli(["status", str(run_dir), "--json"], cli_env).stdout)["state"] == "paused"
    evs = events(run_dir)
    assert [e["node"] for e in evs if e["kind"] == "resume"] == ["train"]

    # 3. resume to the end, raising the budget on the way: the resumed run honours the new one
    cli(["run", str(run_dir), "--phases", "3"], cli_env)
    check_finished_run(run_dir, 3, cli_env)
    evs = events(run_dir)
    resumed_at = [e["node"] for e in evs if e["kind"] == "resume"]
    assert resumed_at[0] == "train" and resumed_at[1] in ("backtest", "engineer"), resumed_at
    finished = [e["phase"] for e in evs if e["kind"] == "node" and e["node"] == "train"]
    assert finished == [1, 2, 3], "a finished phase was trained again, or the raised budget was ignored"
    # every candidate of phase 1 was judged exactly once after the resume (none lost, none duplicated)
    judged = [e["branch"] for e in evs if e["kind"] == "verdict" and e["phase"] == 1]
    made = {e["branch"] for e in evs if e["kind"] == "candidate" and e["phase"] == 1}
    assert set(judged) == made


@pytest.mark.slow
def test_a_trainer_service_killed_mid_phase_is_restarted_and_the_run_finishes(tmp_path: Path, cli_env):
    run_dir = tmp_path / "run"
    cli(init_args(run_dir, phases=2), cli_env)
    proc = subprocess.Popen([*EVOTRAINER, "run", str(run_dir)], env=cli_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 400
    while not (mid_phase(events(run_dir)) and (run_dir / "tmp" / "phase-0001").exists()):
        assert proc.poll() is None and time.time() < deadline, "phase 1 never started"
        time.sleep(0.2)
    victim = json.loads((run_dir / "trainer.json").read_text())["pid"]
    os.kill(victim, signal.SIGKILL)  # e.g. the kernel's OOM killer
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert "trainer service lost" in " ".join(out.split())
    check_finished_run(run_dir, 2, cli_env)
    evs = events(run_dir)
    assert len([e for e in evs if e["kind"] == "trainer_restart"]) == 1
    assert [e["phase"] for e in evs if e["kind"] == "node" and e["node"] == "train"] == [1, 2]
