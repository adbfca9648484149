"""The trainer service: a long-lived HTTP process that owns the accelerator and runs training phases.

    evotrainer trainer serve [--host 127.0.0.1] [--port 8765] [--parent-pid PID] [--port-file F]

API (JSON):
    GET  /health                  {"ok", "pid", "device", "busy", "job", "package"} (package: where its code is)
    POST /phases                  wire.PhaseRequest -> {"job"}; idempotent for the same run, phase and harness sha;
                                  with "pilot": true, a short run scored on the probe split (an A/B trial arm)
    GET  /phases/{job}            {"state": running|done|failed, "progress", "result", "error"}
                                  (result: PhaseResult, or PilotResult for a pilot)
    POST /evaluate                wire.EvalRequest -> EvalResult on a split of the run (409 while a phase runs)
    POST /shutdown                stops the process

With a token (``EVOTRAINER_TRAINER_TOKEN`` in the service's environment) every endpoint answers 401 to a request
without ``Authorization: Bearer <token>``; the service refuses to listen beyond loopback without one (a request
names run folders the service reads and writes). The run's own local service always gets a fresh token.

One phase runs at a time, in a worker thread (or, with ``processes`` > 1 in the request, in processes launched
for it by ``accelerate launch``: ``launch.py``); a second different request while busy gets 409. With
``--parent-pid`` the service exits when that process is gone (the kernel's parent-death signal covers a local
child, and a watcher thread covers the rest), so a killed ``evotrainer run`` never leaves a trainer behind.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import socket
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from evotrainer.atomic import write_text
from evotrainer.trainer.parent import die_with
from evotrainer.trainer.wire import HEALTH_WAIT_S, TOKEN_ENV, EvalRequest, PhaseRequest, auth_headers, package_dir

# The heavy imports (torch, transformers, TRL: ~20 s on a small CPU) run in a background thread at start, while
# the run process gets ready. Everything that touches them waits for that thread first: importing transformers
# from two threads at once can see a half-initialised module ("cannot import name 'TrainerCallback'").
_PRELOADED = threading.Event()


def _preload() -> None:
    try:
        import trl.trainer.grpo_trainer  # noqa: F401
    finally:
        _PRELOADED.set()


class _Jobs:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[str, dict[str, Any]] = {}
        self.active: str | None = None

    def key(self, req: PhaseRequest) -> str:
        kind = f"pilot-{req.replicate}-{req.probe_size}-{req.counterfactual}-{req.steps}" if req.pilot else "phase"
        return f"{Path(req.run_dir).resolve()}::{req.phase}::{req.harness_sha}::{kind}"


def create_app(token: str | None = None) -> FastAPI:
    """The service's API; with ``token``, every request must carry it (``wire.auth_headers``)."""
    app = FastAPI(title="EvoTrainer trainer service")
    jobs = _Jobs()
    if token:
        expected = auth_headers(token)["Authorization"].encode()

        @app.middleware("http")
        async def require_token(request: Request, call_next):
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return JSONResponse({"detail": f"missing or wrong trainer token (the client sends ${TOKEN_ENV})"},
                                    status_code=401)
            return await call_next(request)
    threading.Thread(target=_preload, name="preload", daemon=True).start()

    def device() -> str:
        if not _PRELOADED.wait(HEALTH_WAIT_S):
            return "loading"
        try:
            import torch

            return "cuda" if torch.cuda.is_available() else "cpu"
        except Exception:  # pragma: no cover - torch always present in this package
            return "unknown"

    @app.get("/health")
    def health() -> dict:
        return {"ok": True, "pid": os.getpid(), "device": device(), "busy": jobs.active is not None,
                "job": jobs.active, "package": package_dir()}

    @app.post("/phases")
    def start_phase(req: PhaseRequest) -> dict:
        key = jobs.key(req)
        with jobs.lock:
            for job_id, job in jobs.jobs.items():
                if job["key"] == key and job["state"] in ("running", "done"):
                    return {"job": job_id}
            if jobs.active is not None:
                raise HTTPException(409, f"busy with job {jobs.active}")
            job_id = uuid.uuid4().hex[:12]
            job = {"key": key, "state": "running", "progress": {"stage": "queued"}, "result": None,
                   "error": None, "started": time.time()}
            jobs.jobs[job_id] = job
            jobs.active = job_id

        def work() -> None:
            try:
                _PRELOADED.wait()
                from evotrainer.trainer.grpo import run_phase, run_pilot

                run = run_pilot if req.pilot else run_phase
                if req.trainer.processes > 1:  # several ranks, launched for this job (trainer/launch.py)
                    from evotrainer.trainer.launch import run_launched as run
                result = run(req, progress=lambda p: job.__setitem__("progress", p))
                job["result"] = result.model_dump(mode="json")
                job["state"] = "done"
            except Exception as err:  # reported to the client, which fails the run with this message
                job["error"] = f"{type(err).__name__}: {err}"
                job["traceback"] = traceback.format_exc()
                job["state"] = "failed"
            finally:
                with jobs.lock:
                    jobs.active = None

        threading.Thread(target=work, name=f"phase-{req.phase}", daemon=True).start()
        return {"job": job_id}

    @app.get("/phases/{job_id}")
    def poll(job_id: str) -> dict:
        job = jobs.jobs.get(job_id)
        if job is None:
            raise HTTPException(404, f"no job {job_id}")
        return {k: v for k, v in job.items() if k != "key"}

    @app.post("/evaluate")
    def evaluate_checkpoint(req: EvalRequest) -> dict:
        from evotrainer.domains import get_domain
        from evotrainer.rundir import RunDir
        from evotrainer.trainer.model import PolicyLoadError, evaluate_as_configured, load_policy, resolve_device

        if jobs.active is not None:  # one job owns the accelerator at a time
            raise HTTPException(409, f"busy with job {jobs.active}")
        _PRELOADED.wait()
        dev = resolve_device(req.policy.device)
        try:
            model, tokenizer, _ = load_policy(req.checkpoint, dev, req.policy.dtype, False, 0)
        except PolicyLoadError as err:
            raise HTTPException(422, str(err)) from None
        model.to(dev)
        result = evaluate_as_configured(model, tokenizer, get_domain(req.domain, req.executor),
                                        RunDir(req.run_dir).tasks(req.split),
                                        dev, req.training, req.policy, answers=req.split == "dev")
        return result.model_dump(mode="json")

    @app.post("/shutdown")
    def shutdown() -> dict:
        threading.Timer(0.2, lambda: os._exit(0)).start()
        return {"ok": True}

    return app


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def serve(host: str = "127.0.0.1", port: int = 8765, parent_pid: int | None = None,
          port_file: str | None = None) -> None:
    import uvicorn

    token = os.environ.pop(TOKEN_ENV, "") or None  # not inherited by the ranks and sandboxes it starts
    if token is None and not _loopback(host):
        raise SystemExit(f"refusing to serve on {host} without a token: anyone who reaches the port could train on, "
                         f"read and write the folders a request names. Set {TOKEN_ENV} here and for the run "
                         f"(its client sends it), or serve on 127.0.0.1")
    if parent_pid:
        die_with(parent_pid)
    app = create_app(token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    if port_file:  # the launcher learns the port (port 0 = any free one) from this file
        write_text(port_file, str(sock.getsockname()[1]))
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="EvoTrainer trainer service")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--port-file", default=None)
    a = parser.parse_args()
    serve(a.host, a.port, a.parent_pid, a.port_file)
