"""Talking to the trainer service, and starting a local one when the config names no URL.

:class:`TrainerClient` is a thin httpx client of the API in ``service.py``. :class:`LocalService` starts
``python -m evotrainer.trainer.service`` on loopback as a child of the run process (port chosen by the OS,
output in ``RUN_DIR/trainer.log``; the run's environment without the agents' LLM keys, :func:`service_env`, plus a
fresh bearer token that only this run's client sends; a configured ``trainer.url`` gets
``$EVOTRAINER_TRAINER_TOKEN``), records it in ``RUN_DIR/trainer.json``, and stops it on exit. The child imports the
run's own code: the working directory is not on its import path (``PYTHONSAFEPATH``; a folder named ``evotrainer``
there once shadowed the installed package), and a service whose ``evotrainer`` is another copy is stopped with a
message naming both. The child dies with its parent (parent-death signal + watcher), so a ``kill -9`` of the run
leaves no orphan; a stale record from an earlier run process is cleaned up before a new service starts.

If the local service dies under a job (out of memory, a crash, a kill), the client restarts it and submits the
interrupted job again: an unfinished phase publishes nothing, so training it again is safe. Restarts are
bounded (``max_restarts`` in a row without a finished job), so a phase that kills the trainer every time fails
the run with one line instead of looping. A configured remote service is not ours to restart: losing it fails
the run with a message that says so, and ``evotrainer run`` resumes once it is back.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

from evotrainer.contracts import EvalResult, PhaseResult
from evotrainer.trainer.wire import (HEALTH_WAIT_S, TOKEN_ENV, EvalRequest, PhaseRequest, PilotResult, auth_headers,
                                    package_dir)
from sandbox import exit_reason


class TrainerError(RuntimeError):
    pass


class TrainerLost(TrainerError):
    """The service stopped answering (its process exited, or the connection broke)."""


class TrainerClient:
    """Client of one trainer service; ``restart`` (when given) brings a lost service back and returns its URL."""

    def __init__(self, url: str, timeout: float = 30.0, restart: Callable[[str], str] | None = None,
                 max_restarts: int = 0, token: str | None = None):
        self.timeout = timeout
        self.token = token
        self.restart = restart
        self.max_restarts = max_restarts
        self.restarts_in_a_row = 0
        self._connect(url)

    def _connect(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=self.timeout, trust_env=False,
                                 headers=auth_headers(self.token))

    def _recover(self, err: Exception, doing: str) -> None:
        """After the service was lost while ``doing``: restart it, or raise TrainerLost saying why not."""
        why = f"lost the trainer service at {self.url} while {doing} ({type(err).__name__}: {err})"
        if self.restart is None:
            raise TrainerLost(f"{why}; it is not started by this run, so bring it back and `evotrainer run` "
                              f"resumes") from None
        if self.restarts_in_a_row >= self.max_restarts:
            raise TrainerLost(f"{why}; restarted {self.restarts_in_a_row} time(s) in a row already "
                              f"(trainer.max_restarts), so the cause is likely the job itself") from None
        self.restarts_in_a_row += 1
        self.http.close()
        self._connect(self.restart(why))

    def _retrying(self, doing: str, call: Callable[[], Any]) -> Any:
        while True:
            try:
                out = call()
            except (httpx.TransportError, TrainerLost) as err:
                self._recover(err, doing)
                continue
            self.restarts_in_a_row = 0
            return out

    def health(self) -> dict:
        resp = self.http.get("/health")
        if resp.status_code == 401:
            raise TrainerError(f"the trainer service at {self.url} refused this run: {_detail(resp)}; set "
                               f"{TOKEN_ENV} to the token the service was started with")
        return resp.raise_for_status().json()

    def start_phase(self, request: PhaseRequest) -> str:
        resp = self.http.post("/phases", json=request.model_dump(mode="json"))
        if resp.status_code >= 400:
            raise TrainerError(f"trainer refused the phase: {_detail(resp)}")
        return resp.json()["job"]

    def poll(self, job: str) -> dict:
        resp = self.http.get(f"/phases/{job}")
        if resp.status_code == 404:  # a restarted service does not know the old job
            raise TrainerLost(f"the service no longer knows job {job}")
        return resp.raise_for_status().json()

    def run_phase(self, request: PhaseRequest, on_progress: Callable[[dict], None] = lambda _: None,
                  timeout_s: float = 7200, interval_s: float = 0.5) -> PhaseResult:
        return PhaseResult.model_validate(self._wait(request, on_progress, timeout_s, interval_s))

    def run_pilot(self, request: PhaseRequest, on_progress: Callable[[dict], None] = lambda _: None,
                  timeout_s: float = 1800, interval_s: float = 0.5) -> PilotResult:
        request = request.model_copy(update={"pilot": True})
        return PilotResult.model_validate(self._wait(request, on_progress, timeout_s, interval_s))

    def _wait(self, request: PhaseRequest, on_progress: Callable[[dict], None], timeout_s: float,
              interval_s: float) -> dict:
        what = f"{'piloting' if request.pilot else 'training'} phase {request.phase}"
        return self._retrying(what, lambda: self._wait_once(request, on_progress, timeout_s, interval_s))

    def _wait_once(self, request: PhaseRequest, on_progress: Callable[[dict], None], timeout_s: float,
                   interval_s: float) -> dict:
        job = self.start_phase(request)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            status = self.poll(job)
            on_progress(status.get("progress") or {})
            if status["state"] == "done":
                return status["result"]
            if status["state"] == "failed":
                raise TrainerError(f"phase {request.phase} failed in the trainer: {status['error']}")
            time.sleep(interval_s)
        raise TrainerError(f"phase {request.phase} did not finish within {timeout_s:.0f} s")

    def evaluate(self, request: EvalRequest, timeout_s: float = 1800) -> EvalResult:
        """A checkpoint's score on one split of the run (``request.split``) with the evaluator's prompt and verifier
        (blocks until done)."""
        def call() -> EvalResult:
            resp = self.http.post("/evaluate", json=request.model_dump(mode="json"), timeout=timeout_s)
            if resp.status_code >= 400:
                raise TrainerError(f"evaluation failed: {_detail(resp)}")
            return EvalResult.model_validate(resp.json())

        return self._retrying(f"evaluating {request.checkpoint}", call)

    def close(self) -> None:
        self.http.close()


def _detail(resp: httpx.Response) -> str:
    """The service's own explanation of an error response (FastAPI's ``detail``), else the status and body."""
    try:
        detail = resp.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else f"HTTP {resp.status_code} {resp.text[:500]}"


def _stop_stale(record: Path) -> None:
    import psutil

    try:
        info = json.loads(record.read_text())
        proc = psutil.Process(int(info["pid"]))
        if "evotrainer.trainer.service" in " ".join(proc.cmdline()):
            proc.terminate()
            proc.wait(10)
    except (FileNotFoundError, json.JSONDecodeError, KeyError, ValueError, psutil.Error):
        pass
    record.unlink(missing_ok=True)


# secrets the trainer itself needs: gated Hugging Face models, and wandb when training.report_to names it
TRAINER_SECRETS = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY"})


def service_env(environ: dict[str, str]) -> dict[str, str]:
    """The trainer service's environment: the run's, without the secrets it does not need (the agents' LLM keys
    and any other variable whose name reads like a secret, by the config's rule ``secret_like``)."""
    from evotrainer.agents_config import secret_like

    return {k: v for k, v in environ.items()
            if k in TRAINER_SECRETS or not secret_like(k)}


class LocalService:
    """A trainer service process on loopback, owned by this run process (one at a time; restartable)."""

    def __init__(self, run_dir: Path, start_timeout_s: float = 240, env: dict | None = None,
                 on_restart: Callable[[str], None] = lambda _: None):
        self.run_dir = Path(run_dir)
        self.start_timeout_s = start_timeout_s
        self.env = env
        self.on_restart = on_restart
        self.record = self.run_dir / "trainer.json"
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.token = secrets.token_urlsafe(32)  # only this run's client can drive its service, even on loopback

    def start(self) -> str:
        """Start the service and wait until it answers; return its URL."""
        _stop_stale(self.record)
        port_file = self.run_dir / "tmp" / "trainer.port"
        port_file.parent.mkdir(parents=True, exist_ok=True)
        port_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "evotrainer.trainer.service", "--host", "127.0.0.1", "--port", "0",
               "--parent-pid", str(os.getpid()), "--port-file", str(port_file)]
        with open(self.run_dir / "trainer.log", "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**service_env({**os.environ, **(self.env or {})}),
                                              TOKEN_ENV: self.token, "PYTHONSAFEPATH": "1"})
        deadline = time.time() + self.start_timeout_s
        while not port_file.exists():
            if self.proc.poll() is not None:
                raise TrainerError(f"the trainer service exited at start ({exit_reason(self.proc.returncode)}); "
                                   f"see {self.run_dir / 'trainer.log'}")
            if time.time() > deadline:
                raise TrainerError(f"the trainer service did not start within {self.start_timeout_s:.0f} s")
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        # /health may take HEALTH_WAIT_S to answer while the service imports torch and TRL (longer on a busy
        # machine): a probe that gave up sooner would never see it answer
        with httpx.Client(base_url=url, timeout=HEALTH_WAIT_S + 10, trust_env=False,
                          headers=auth_headers(self.token)) as probe:
            while True:
                try:
                    health = probe.get("/health").raise_for_status().json()
                    break
                except httpx.HTTPError:
                    if self.proc.poll() is not None or time.time() > deadline:
                        raise TrainerError(f"the trainer service at {url} is not answering") from None
                    time.sleep(0.1)
        if health.get("package") != package_dir():
            self.stop()
            raise TrainerError(
                f"the trainer service imported evotrainer from {health.get('package') or 'an older copy'}, not from "
                f"{package_dir()} like this run: another copy shadows the installed one (a folder named evotrainer "
                "in the working directory, or PYTHONPATH)")
        self.record.write_text(json.dumps({"url": url, "pid": self.proc.pid, "started": time.time()}))
        self.url = url
        return url

    def restart(self, why: str) -> str:
        """Stop what is left of the service, start a new one, and return its URL."""
        self.stop()
        status = exit_reason(self.proc.returncode if self.proc else None)
        self.on_restart(f"{why}; the service process ended ({status}); its log is {self.run_dir / 'trainer.log'}. "
                        f"Starting a new one and submitting the interrupted job again.")
        return self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.record.unlink(missing_ok=True)


@contextlib.contextmanager
def local_service(run_dir: Path, start_timeout_s: float = 240, env: dict | None = None, max_restarts: int = 2,
                  on_restart: Callable[[str], None] = lambda _: None) -> Iterator[TrainerClient]:
    """Start a trainer service on loopback for this run; yield a client that restarts it if it dies."""
    service = LocalService(run_dir, start_timeout_s, env, on_restart)
    client = None
    try:
        client = TrainerClient(service.start(), restart=service.restart, max_restarts=max_restarts,
                               token=service.token)
        yield client
    finally:
        if client is not None:
            client.close()
        service.stop()


@contextlib.contextmanager
def connect(run_dir: Path, url: str | None, start_timeout_s: float = 240, max_restarts: int = 2,
            on_restart: Callable[[str], None] = lambda _: None) -> Iterator[TrainerClient]:
    """A client of the configured service, or of a local one started (and restarted if need be) for this run."""
    if url:
        client = TrainerClient(url, token=os.environ.get(TOKEN_ENV) or None)
        try:
            client.health()
        except httpx.HTTPError as err:
            raise TrainerError(f"no trainer service answers at {url}: {err}") from None
        try:
            yield client
        finally:
            client.close()
    else:
        with local_service(run_dir, start_timeout_s, max_restarts=max_restarts, on_restart=on_restart) as client:
            yield client
