"""Talking to the trainer service, and starting a local one when the config names no URL.

:class:`TrainerClient` is a thin httpx client of the API in ``service.py``. :func:`local_service` starts
``python -m evotrainer.trainer.service`` on loopback as a child of the run process (port chosen by the OS,
output in ``RUN_DIR/trainer.log``), records it in ``RUN_DIR/trainer.json``, and stops it on exit. The child
dies with its parent (parent-death signal + watcher), so a ``kill -9`` of the run leaves no orphan; a stale
record from an earlier run process is cleaned up before a new service starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

from evotrainer.contracts import EvalResult, PhaseResult
from evotrainer.trainer.grpo import PilotResult


class TrainerError(RuntimeError):
    pass


class TrainerClient:
    def __init__(self, url: str, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=timeout, trust_env=False)

    def health(self) -> dict:
        return self.http.get("/health").raise_for_status().json()

    def start_phase(self, request: dict[str, Any]) -> str:
        resp = self.http.post("/phases", json=request)
        if resp.status_code >= 400:
            raise TrainerError(f"trainer refused the phase: {_detail(resp)}")
        return resp.json()["job"]

    def poll(self, job: str) -> dict:
        return self.http.get(f"/phases/{job}").raise_for_status().json()

    def run_phase(self, request: dict[str, Any], on_progress: Callable[[dict], None] = lambda _: None,
                  timeout_s: float = 7200, interval_s: float = 0.5) -> PhaseResult:
        return PhaseResult.model_validate(self._wait(request, on_progress, timeout_s, interval_s))

    def run_pilot(self, request: dict[str, Any], on_progress: Callable[[dict], None] = lambda _: None,
                  timeout_s: float = 1800, interval_s: float = 0.5) -> PilotResult:
        request = {**request, "pilot": True}
        return PilotResult.model_validate(self._wait(request, on_progress, timeout_s, interval_s))

    def _wait(self, request: dict[str, Any], on_progress: Callable[[dict], None], timeout_s: float,
              interval_s: float) -> dict:
        job = self.start_phase(request)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            status = self.poll(job)
            on_progress(status.get("progress") or {})
            if status["state"] == "done":
                return status["result"]
            if status["state"] == "failed":
                raise TrainerError(f"phase {request['phase']} failed in the trainer: {status['error']}")
            time.sleep(interval_s)
        raise TrainerError(f"phase {request['phase']} did not finish within {timeout_s:.0f} s")

    def evaluate(self, run_dir: str, checkpoint: str, domain: str, max_new_tokens: int, device: str = "auto",
                 dtype: str = "auto", timeout_s: float = 1800) -> EvalResult:
        """Held-out accuracy of ``checkpoint`` with the evaluator's prompt and verifier (blocks until done)."""
        resp = self.http.post("/evaluate", json={"run_dir": run_dir, "checkpoint": checkpoint, "domain": domain,
                                                  "max_new_tokens": max_new_tokens, "device": device,
                                                  "dtype": dtype}, timeout=timeout_s)
        if resp.status_code >= 400:
            raise TrainerError(f"evaluation failed: {_detail(resp)}")
        return EvalResult.model_validate(resp.json())

    def close(self) -> None:
        self.http.close()


def _detail(resp: httpx.Response) -> str:
    """The service's own explanation of an error response (FastAPI's ``detail``), else the status and body."""
    try:
        detail = resp.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else f"HTTP {resp.status_code} {resp.text[:500]}"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


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


@contextlib.contextmanager
def local_service(run_dir: Path, start_timeout_s: float = 240, env: dict | None = None) -> Iterator[TrainerClient]:
    """Start a trainer service on loopback for this run; yield a client; stop it afterwards."""
    run_dir = Path(run_dir)
    record = run_dir / "trainer.json"
    _stop_stale(record)
    port_file = run_dir / "tmp" / "trainer.port"
    port_file.parent.mkdir(parents=True, exist_ok=True)
    port_file.unlink(missing_ok=True)
    log = open(run_dir / "trainer.log", "ab")
    cmd = [sys.executable, "-m", "evotrainer.trainer.service", "--host", "127.0.0.1", "--port", "0",
           "--parent-pid", str(os.getpid()), "--port-file", str(port_file)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            preexec_fn=_die_with_parent, env={**os.environ, **(env or {})})
    client = None
    try:
        deadline = time.time() + start_timeout_s
        while not port_file.exists():
            if proc.poll() is not None:
                raise TrainerError(f"the trainer service exited at start (code {proc.returncode}); "
                                   f"see {run_dir / 'trainer.log'}")
            if time.time() > deadline:
                raise TrainerError(f"the trainer service did not start within {start_timeout_s:.0f} s")
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        client = TrainerClient(url)
        while True:
            try:
                client.health()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.time() > deadline:
                    raise TrainerError(f"the trainer service at {url} is not answering") from None
                time.sleep(0.1)
        record.write_text(json.dumps({"url": url, "pid": proc.pid, "started": time.time()}))
        yield client
    finally:
        if client is not None:
            client.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        record.unlink(missing_ok=True)


@contextlib.contextmanager
def connect(run_dir: Path, url: str | None, start_timeout_s: float = 240) -> Iterator[TrainerClient]:
    """A client of the configured service, or of a local one started for this run."""
    if url:
        client = TrainerClient(url)
        try:
            client.health()
        except httpx.HTTPError as err:
            raise TrainerError(f"no trainer service answers at {url}: {err}") from None
        try:
            yield client
        finally:
            client.close()
    else:
        with local_service(run_dir, start_timeout_s) as client:
            yield client
