"""The framework side of the sandbox: ``HarnessWorker`` is the one way framework code calls into harness code.

A worker owns one long-lived sandboxed ``runner.py`` process for one harness directory (started lazily under
the backend ``choose_backend`` picks, restarted after a timeout, crash or protocol error) and turns the runner's
JSON-lines protocol into typed calls: ``prompts``, ``score``, ``filter``, ``curriculum``, ``diagnostics``,
``selftest``. Failures of harness code are ``HarnessError``s with a one-line ``str()``. Try it alone:
``python -c "from sandbox import run_selftest; print(run_selftest('harness_repo/math'))"``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any, Iterable

from sandbox.backends import DEFAULT_IMAGE, _runner_path, _sandbox_argv, choose_backend
from sandbox.limits import SandboxLimits
from sandbox.processes import MAX_RESPONSE_BYTES, _make_preexec, _Process, _scrubbed_env, _Slot, exit_reason


class HarnessError(RuntimeError):
    """Harness code failed: an exception, a broken contract, a timeout, a crash or protocol garbage.

    ``str()`` is one readable line; ``traceback`` holds the sandbox-side traceback (may be empty) and
    ``op`` the call that failed.
    """

    def __init__(self, message: str, *, traceback: str = "", op: str | None = None) -> None:
        super().__init__(" ".join(str(message).split()))
        self.traceback = traceback
        self.op = op


class HarnessWorker:
    """One long-lived sandboxed runner process for one harness directory.

    The process starts on the first call and restarts on the next call after a timeout, crash or protocol
    error. Calls are serialized. Use as a context manager, or call ``close()``; it is also closed on garbage
    collection and at interpreter exit, and the child dies with its parent, so no process is ever orphaned.
    """

    def __init__(self, harness_dir: str | os.PathLike, *, limits: SandboxLimits | None = None,
                 backend: str = "auto", hide: Iterable[str | os.PathLike] = (), image: str = DEFAULT_IMAGE) -> None:
        self.harness_dir = Path(harness_dir).resolve()
        if not self.harness_dir.is_dir():
            raise FileNotFoundError(f"harness directory {self.harness_dir} does not exist")
        self.limits = limits or SandboxLimits()
        self.image = image
        self.hide = [Path(p).resolve() for p in hide]
        for path in self.hide:
            if self.harness_dir == path or path in self.harness_dir.parents:
                raise ValueError(f"hidden path {path} contains the harness directory {self.harness_dir}")
        self.backend: str = choose_backend(backend, image)
        self._runner = _runner_path()
        self._slot = _Slot()
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, self._slot.stop, False)

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> HarnessWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the sandbox process and delete its temp dir (idempotent)."""
        with self._lock:
            self._slot.stop(graceful=True)
            self._finalizer.detach()

    @property
    def pid(self) -> int | None:
        """Pid of the current sandbox process (the backend's launcher), or None when none is running."""
        process = self._slot.process
        return process.pid if process is not None and process.alive() else None

    def _start(self) -> _Process:
        limits = self.limits
        if self.backend == "docker":
            return self._start_docker()
        base = os.path.realpath(tempfile.mkdtemp(prefix="evotrainer-sandbox-"))
        try:
            python = [sys.executable, "-I", "-B", str(self._runner), str(self.harness_dir)]
            hidden = [str(p) for p in self.hide if p.exists()]
            argv, workdir = _sandbox_argv(self.backend, str(self.harness_dir), base, hidden, python)
            return _Process(argv, env=_scrubbed_env(workdir), cwd=workdir, preexec=_make_preexec(limits),
                            workdir=base, container=None)
        except BaseException:
            shutil.rmtree(base, ignore_errors=True)
            raise

    def _start_docker(self) -> _Process:
        limits = self.limits
        name = f"evotrainer-sandbox-{uuid.uuid4().hex[:12]}"
        argv = [
            "docker", "run", "-i", "--rm", "--name", name, "--network", "none", "--read-only",
            "--tmpfs", "/tmp:rw,size=64m", "--workdir", "/tmp", "--env", "HOME=/tmp",
            "--memory", f"{limits.memory_mb}m", "--memory-swap", f"{limits.memory_mb}m", "--cpus", "1",
            "--pids-limit", str(limits.max_procs), "--ulimit", "nofile=256:256",
            "--ulimit", f"fsize={limits.file_size_mb * 1024 * 1024}",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--mount", f"type=bind,source={self.harness_dir},target=/harness,readonly",
            self.image, "/harness",
        ]
        # the limits apply inside the container; the docker CLI itself only has to die with us
        return _Process(argv, env=None, cwd=None, preexec=_make_preexec(None), workdir=None, container=name)

    # ------------------------------------------------------------ calls

    def call(self, op: str, **payload: Any) -> Any:
        """Send one request and return its result; raise HarnessError on any failure of the harness side."""
        try:
            request = json.dumps({"op": op, **payload}, default=_jsonable).encode("utf-8") + b"\n"
        except (TypeError, ValueError) as exc:
            raise TypeError(f"payload of harness call {op!r} is not JSON-serializable: {exc}") from None
        with self._lock:
            process = self._slot.process
            if process is not None and (not process.alive() or process.cpu_seconds() > self.limits.cpu_s / 2):
                self._slot.stop(graceful=True)  # recycle before the CPU rlimit could hit mid-call
                process = None
            if process is None:
                try:
                    process = self._slot.process = self._start()
                except OSError as exc:
                    raise HarnessError(f"sandbox ({self.backend}) failed to start: {exc}", op=op) from None
            timeout = self.limits.call_timeout_s
            deadline = time.monotonic() + timeout
            try:
                process.send(request, deadline)
                line = process.receive_line(deadline)
            except TimeoutError:
                self._slot.stop(graceful=False)
                raise HarnessError(f"harness call {op!r} exceeded {timeout:g}s and was killed", op=op) from None
            except OverflowError:
                self._slot.stop(graceful=False)
                raise HarnessError(f"harness call {op!r} sent a response over {MAX_RESPONSE_BYTES} bytes",
                                   op=op) from None
            except (BrokenPipeError, ConnectionResetError):
                line = None
            if line is None:
                raise self._crashed(op, process)
            try:
                response = json.loads(line)
                ok = response["ok"]
            except (ValueError, KeyError, TypeError):
                self._slot.stop(graceful=False)
                raise HarnessError(f"harness call {op!r} returned garbage instead of a protocol response: "
                                   f"{line[:200].decode('utf-8', 'replace')!r}", op=op) from None
        if not ok:
            raise HarnessError(str(response.get("error") or "unknown harness error"),
                               traceback=str(response.get("traceback") or ""), op=op)
        return response.get("result")

    def _crashed(self, op: str, process: _Process) -> HarnessError:
        try:
            process.popen.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        returncode = process.popen.returncode
        if self.backend in ("bwrap", "unshare") and returncode is not None and 128 < returncode < 128 + 65:
            returncode = 128 - returncode  # the namespace's init reports a signal death as 128 + signal
        how = exit_reason(returncode)
        if returncode == -signal.SIGXCPU:
            how += f" (CPU limit of {self.limits.cpu_s}s)"
        stderr = process.last_stderr_line()
        self._slot.stop(graceful=False)
        return HarnessError(f"harness call {op!r} crashed: sandbox process died ({how})"
                            + (f"; stderr: {stderr}" if stderr else ""), op=op)

    def prompts(self, tasks: list[dict]) -> list[str]:
        """``prompt.make_prompt(task)`` for every task."""
        return self.call("prompts", tasks=list(tasks))

    def score(self, samples: list[dict]) -> list[dict[str, float]]:
        """``{component: value}`` from ``rewards.COMPONENTS`` for every sample."""
        return self.call("score", samples=list(samples))

    def filter(self, groups: list[list[dict]]) -> list[list[bool]]:
        """Kept flags per rollout: ``keep_rollout(r) and keep_group(group)``."""
        return self.call("filter", groups=[list(g) for g in groups])

    def curriculum(self, levels: list[str], base: dict[str, float], history: dict[str, dict]) -> dict[str, float]:
        """Sampling weight per level from ``curriculum.weights`` (finite, >= 0, at least one > 0)."""
        return self.call("curriculum", levels=list(levels), base=dict(base), history=dict(history))

    def diagnostics(self, rollouts: list[dict]) -> dict[str, dict]:
        """``{name: {value, min, max, help, error}}`` for every metric in ``diagnostics.METRICS``."""
        return self.call("diagnostics", rollouts=list(rollouts))

    def selftest(self) -> dict:
        """``{"passed": [ids], "failed": [{"name", "error"}], "n": int}`` of the harness's tests/."""
        return self.call("selftest")


def _jsonable(value: Any) -> Any:
    """JSON fallback for payload values: numpy/pandas scalars and arrays, sets, tuples, paths, timestamps."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")


def run_selftest(harness_dir: str | os.PathLike, *, limits: SandboxLimits | None = None, backend: str = "auto",
                 hide: Iterable[str | os.PathLike] = (), image: str = DEFAULT_IMAGE) -> dict:
    """Run the harness's self-tests in a one-shot worker (see ``HarnessWorker.selftest``)."""
    with HarnessWorker(harness_dir, limits=limits, backend=backend, hide=hide, image=image) as worker:
        return worker.selftest()
