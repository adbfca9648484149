"""Several processes train one phase: ``trainer.processes`` > 1 runs each phase and pilot with ``accelerate launch``.

    trainer:
      processes: 4                                  # one process per GPU; each generated batch is split among them
      accelerate_args: [--gpu_ids, "0,1,2,3"]       # more flags for `accelerate launch` (e.g. --config_file F)

The trainer service stays one process that owns the HTTP API. For a phase (or pilot) it writes the request into a
job folder and runs, and waits for,

    accelerate launch --multi_gpu --num_processes N --num_machines 1 --mixed_precision no --dynamo_backend no \\
        [accelerate_args] -m evotrainer.trainer.launch JOB_DIR

Every rank runs the same phase (``grpo.run_phase`` / ``run_pilot``) on the tasks and prompts rank 0 drew (the
harness's curriculum and prompt code run once, on rank 0): TRL gives each rank its share of every
generated batch, which it generates and scores in a sandbox worker of its own; the harness's filter decisions
are taken once on the whole batch (rank 0, broadcast to all: ``hooks``), the loss normaliser counts every rank's
tokens, and rank 0 alone logs the rollouts, evaluates, saves the checkpoint and writes ``result.json`` (a rank
that fails writes ``error-rankN.json``; torchrun then stops the others). Rank 0 writes its progress to
``progress.json``, which the service relays. ``--mixed_precision no`` leaves precision to the phase's GRPOConfig
(bf16 on CUDA unless ``policy.dtype: float32``), as in one process. Ranks exit when the service dies.

On a machine without GPUs the same command runs N processes on gloo (the tests run it that way, on 2 CPU
processes). Try it alone: ``python -m evotrainer.trainer.launch --command 2`` prints the command for 2 processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from evotrainer.atomic import write_text
from evotrainer.config import accelerate_args_problem  # the config's rule, checked again per request
from evotrainer.trainer.ranks import rank

SERVICE_PID = "EVOTRAINER_SERVICE_PID"  # the ranks exit when this process is gone


def command(processes: int, accelerate_args: list[str], job_dir: Path) -> list[str]:
    """The launcher command for a job folder."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", *accelerate_args,
            "-m", "evotrainer.trainer.launch", str(job_dir)]


def check(processes: int, device: str) -> str | None:
    """What stops ``processes`` from training a phase here, as one line; None when they can."""
    if processes <= 1:
        return None
    if device == "cuda":
        import torch

        if torch.cuda.device_count() < processes:
            return (f"trainer.processes is {processes} but this machine has {torch.cuda.device_count()} GPU(s): one "
                    "process per GPU")
    return None


def _write(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data))


def run_launched(req, progress: Callable[[dict], None] = lambda _: None, poll_s: float = 0.5):
    """Service side: train ``req`` (a PhaseRequest with ``processes`` > 1) in launched processes; its result.

    Raises ValueError (one line) when the processes cannot run here, and RuntimeError with the failing rank's
    one-line error (and where the launcher's log is) when the launched job fails; that job's folder is kept.
    """
    from evotrainer.contracts import PhaseResult
    from evotrainer.rundir import RunDir
    from evotrainer.trainer.model import resolve_device
    from evotrainer.trainer.wire import PilotResult

    bad_args = accelerate_args_problem(req.trainer.accelerate_args)
    problem = f"{bad_args} (got {req.trainer.accelerate_args})" if bad_args else check(req.trainer.processes, resolve_device(req.policy.device))
    if problem:
        raise ValueError(problem)
    kind = f"pilot-r{req.replicate}" if req.pilot else "phase"
    job = RunDir(req.run_dir).scratch / "launch" / f"{kind}-{req.phase:04d}-{req.harness_sha[:10]}"
    job.mkdir(parents=True, exist_ok=True)
    for old in job.iterdir():
        old.unlink()
    (job / "request.json").write_text(req.model_dump_json())
    env = {**os.environ, SERVICE_PID: str(os.getpid())}
    with open(job / "launch.log", "w") as log:
        proc = subprocess.Popen(command(req.trainer.processes, req.trainer.accelerate_args, job), stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    seen = None
    try:
        while proc.poll() is None:
            time.sleep(poll_s)
            try:
                now = json.loads((job / "progress.json").read_text())
            except (OSError, ValueError):
                continue
            if now != seen:
                progress(now)
                seen = now
    finally:
        if proc.poll() is None:  # the service is stopping (or the wait failed): take the ranks with it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode == 0 and (job / "result.json").is_file():
        data = json.loads((job / "result.json").read_text())
        shutil.rmtree(job, ignore_errors=True)  # a failed job's folder stays, with its log
        return (PilotResult if req.pilot else PhaseResult).model_validate(data)
    errors = [json.loads(p.read_text())["error"] for p in sorted(job.glob("error-rank*.json"))]
    tail = (job / "launch.log").read_text(errors="replace").strip().splitlines()[-1:] or ["(empty log)"]
    raise RuntimeError(f"{req.trainer.processes} processes: {errors[0] if errors else tail[0]} (exit {proc.returncode}; "
                       f"log: {job / 'launch.log'})")


def _exit_with_service() -> None:
    pid = os.environ.get(SERVICE_PID)
    if pid:
        from evotrainer.trainer.parent import die_with

        die_with(int(pid))


def main(job_dir: Path) -> int:
    """One rank: train the job's request; rank 0 reports progress and writes the result."""
    from evotrainer.trainer.wire import PhaseRequest

    _exit_with_service()
    me = rank()
    req = PhaseRequest.model_validate_json((job_dir / "request.json").read_text())

    def progress(p: dict) -> None:
        if me == 0:
            _write(job_dir / "progress.json", p)

    try:
        from evotrainer.trainer.grpo import run_phase, run_pilot

        result = (run_pilot if req.pilot else run_phase)(req, progress)
        if me == 0:
            _write(job_dir / "result.json", result.model_dump(mode="json"))
        return 0
    except Exception as err:  # noqa: BLE001 - reported to the service, which fails the phase with this line
        _write(job_dir / f"error-rank{me}.json", {"error": f"{type(err).__name__}: {err}",
                                                 "traceback": traceback.format_exc()})
        return 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--command":
        print(" ".join(command(int(sys.argv[2]), [], Path("JOB_DIR"))))
    elif len(sys.argv) == 2:
        sys.exit(main(Path(sys.argv[1])))
    else:
        sys.exit("usage: python -m evotrainer.trainer.launch JOB_DIR | --command N")
