"""The framework side of the sandbox: ``HarnessWorker`` is the one way framework code calls into harness code.

A worker owns one long-lived sandboxed ``runner.py`` process for one harness directory (started lazily under
the backend ``choose_backend`` picks, restarted after a timeout, crash or protocol error) and turns the runner's
JSON-lines protocol into typed calls: ``prompts``, ``score``, ``filter``, ``curriculum``, ``diagnostics``,
``selftest``, ``record``. Failures of harness code are ``HarnessError``s with a one-line ``str()``. Every response is
checked before use (``responses.py``: its call's id, types, sizes, nesting); what harness code tried and must never do
(the runner's audit, the kernel's counters, limits hit, a forged response) accumulates in ``worker.attempts``,
and a sandbox process that made an attempt is replaced before the next call. Try it alone:
``python -c "from sandbox import run_selftest; print(run_selftest('harness_repo/math'))"``.
"""

from __future__ import annotations

import json
import os
import select
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

import sandbox.frames as frames
import sandbox.responses as responses
from sandbox.backends import DEFAULT_IMAGE, _framework_paths, _runner_path, _sandbox_argv, choose_backend
from sandbox.confine import Confinement
from sandbox.limits import SandboxLimits
from sandbox.processes import (MAX_RESPONSE_BYTES, LimitExceeded, _make_preexec, _Process, _scrubbed_env, _Slot,
                               exit_reason)

MAX_KEPT_ATTEMPTS = 200
_LOG: dict[Path, list[dict]] = {}  # attempts per harness dir, over every worker on it (see attempts_log)
_LOG_DIRS = 256


def attempts_log(harness_dir: str | os.PathLike) -> list[dict]:
    """Every attempt any worker of this process recorded on ``harness_dir`` (e.g. a one-shot ``run_selftest``
    and the long-lived worker of the same candidate): what a gate reads to judge a candidate's whole run."""
    return list(_LOG.get(Path(harness_dir).resolve(), []))


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
                 backend: str = "auto", hide: Iterable[str | os.PathLike] = (), image: str = DEFAULT_IMAGE,
                 audit: bool = True) -> None:
        self.harness_dir = Path(harness_dir).resolve()
        if not self.harness_dir.is_dir():
            raise FileNotFoundError(f"harness directory {self.harness_dir} does not exist")
        self.limits = limits or SandboxLimits()
        self.image = image
        self.hide = [Path(p).resolve() for p in hide]
        for path in self.hide:
            if self.harness_dir == path or path in self.harness_dir.parents:
                raise ValueError(f"hidden path {path} contains the harness directory {self.harness_dir}")
        self.audit = audit  # False: no in-process audit hook (only to measure the isolation beneath it)
        self.backend: str = choose_backend(backend, image)
        self._runner = _runner_path()
        self._slot = _Slot()
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, self._slot.stop, False)
        self._token = uuid.uuid4().hex[:16]
        self._seq = 0
        self._tainted = False
        self.attempts: list[dict] = []  # what harness code tried, over every call: {kind, what, where, op}

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> HarnessWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the sandbox process and delete its temp dir (idempotent); output left on the protocol stream
        after the last response is recorded as an attempt (that response may have been forged)."""
        with self._lock:
            if self._slot.process is not None:
                self._check_trailing(self._slot.process, "close")
            self._slot.stop(graceful=True)
            self._finalizer.detach()

    def _note(self, attempts: list[dict], op: str) -> None:
        """Keep ``attempts`` (deduplicated, bounded); the sandbox process that made them is replaced."""
        log = _LOG.setdefault(self.harness_dir, [])
        while len(_LOG) > _LOG_DIRS:
            _LOG.pop(next(iter(_LOG)))
        for item in attempts:
            entry = {**item, "op": op}
            if entry not in self.attempts and len(self.attempts) < MAX_KEPT_ATTEMPTS:
                self.attempts.append(entry)
            if entry not in log and len(log) < MAX_KEPT_ATTEMPTS:
                log.append(entry)
            self._tainted = True

    def _check_trailing(self, process: _Process, op: str) -> None:
        """Bytes on the protocol stream between calls can only be a line harness code wrote there itself."""
        try:
            fd = process.popen.stdout.fileno()
            extra = process.buffer
            if select.select([fd], [], [], 0)[0]:
                extra += os.read(fd, 1 << 16)
        except (OSError, ValueError):
            return
        if extra.strip():
            process.buffer = b""
            self._note([{"kind": "protocol", "what": "output on the protocol stream after a response (a forged "
                         f"response line): {extra[:80]!r}", "where": ""}], op)

    @property
    def pid(self) -> int | None:
        """Pid of the current sandbox process (the backend's launcher), or None when none is running."""
        process = self._slot.process
        return process.pid if process is not None and process.alive() else None

    def _start(self) -> _Process:
        limits = self.limits
        if self.backend == "docker":
            from sandbox.container import start_container

            return start_container(self.harness_dir, self._runner, limits, self.image)
        base = os.path.realpath(tempfile.mkdtemp(prefix="evotrainer-sandbox-"))
        confinement = Confinement(self.backend, limits, os.path.join(base, "work"))
        try:
            hidden = [str(p) for p in self.hide if p.exists()]
            workdir = os.path.join(base, "work")
            python = [sys.executable, "-I", "-B", str(self._runner), str(self.harness_dir), "--scratch", workdir,
                      *([] if self.backend == "process" else ["--private-tmp"]), *confinement.runner_args(),
                      *([] if self.audit else ["--no-audit"])]
            for path in [*hidden, *_framework_paths()]:
                python += ["--forbid", path]
            mib = 1024 * 1024
            argv, workdir = _sandbox_argv(self.backend, str(self.harness_dir), base, hidden, python,
                                          limits.tmpfs_mb * mib, limits.scratch_mb * mib)
            env = _scrubbed_env(workdir)
            if self.backend == "process":  # the host's /tmp is shared: temp files go to scratch
                env["TMPDIR"] = workdir
            return _Process(argv, env=env, cwd=workdir, preexec=_make_preexec(limits, confinement.join_files),
                            workdir=base, container=None, confinement=confinement)
        except BaseException:
            confinement.close()
            shutil.rmtree(base, ignore_errors=True)
            raise

    # ------------------------------------------------------------ calls

    def call(self, op: str, **payload: Any) -> Any:
        """Send one request and return its result; raise HarnessError on any failure of the harness side."""
        self._seq += 1
        rid = f"{self._token}-{self._seq}"
        try:
            with frames.gc_paused():
                request = json.dumps({"op": op, "id": rid, **payload}, default=_jsonable).encode("utf-8") + b"\n"
        except (TypeError, ValueError) as exc:
            raise TypeError(f"payload of harness call {op!r} is not JSON-serializable: {exc}") from None
        with self._lock:
            process = self._slot.process
            if process is not None:
                self._check_trailing(process, op)
            if process is not None and (self._tainted or not process.alive()
                                        or process.cpu_seconds() > self.limits.cpu_s / 2):
                self._slot.stop(graceful=True)  # recycle before the CPU rlimit could hit mid-call
                process = None
            if process is None:
                self._tainted = False
                try:
                    process = self._slot.process = self._start()
                except OSError as exc:
                    raise HarnessError(f"sandbox ({self.backend}) failed to start: {exc}", op=op) from None
            box = process.confinement
            timeout = self.limits.call_timeout_s
            deadline = time.monotonic() + timeout
            if box is not None:
                box.start_call()
            monitor = (lambda: box.poll(process.pid)) if box is not None else None
            try:
                process.send(request, deadline)
                line = process.receive_line(deadline, monitor)
            except TimeoutError:
                self._slot.stop(graceful=False)
                raise HarnessError(f"harness call {op!r} exceeded {timeout:g}s and was killed", op=op) from None
            except LimitExceeded as exc:
                self._note([{"kind": "limit", "what": str(exc), "where": ""}], op)
                self._slot.stop(graceful=False)
                raise HarnessError(f"harness call {op!r}: the sandbox {exc} and was killed", op=op) from None
            except OverflowError:
                self._slot.stop(graceful=False)
                raise HarnessError(f"harness call {op!r} sent a response over {MAX_RESPONSE_BYTES} bytes",
                                   op=op) from None
            except (BrokenPipeError, ConnectionResetError):
                line = None
            evidence = box.evidence(process.pid) if box is not None else []
            self._note(evidence, op)
            if line is None:
                raise self._crashed(op, process, evidence)
            try:
                with frames.gc_paused():
                    response = responses.parse(line)
                if response.get("id") != rid:
                    raise responses.ResponseError("a response without this call's id (a line harness code wrote "
                                                  "on the protocol stream)")
                self._note(responses.attempts(response), op)
                with frames.gc_paused():
                    result = responses.check(op, payload, frames.decode(response.get("result"))) \
                        if response["ok"] else None
            except (responses.ResponseError, ValueError) as exc:
                self._note([{"kind": "protocol", "what": str(exc), "where": ""}], op)
                self._slot.stop(graceful=False)
                raise HarnessError(f"harness call {op!r} broke the protocol: {exc}", op=op) from None
        if not response["ok"]:
            message, tb = responses.error(response)
            raise HarnessError(message, traceback=tb, op=op)
        return result

    def _crashed(self, op: str, process: _Process, evidence: list[dict] = ()) -> HarnessError:
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
        limits = "; ".join(e["what"] for e in evidence if e["kind"] == "limit")
        return HarnessError(f"harness call {op!r} crashed: sandbox process died ({how})"
                            + (f"; the sandbox {limits}" if limits else "")
                            + (f"; stderr: {stderr}" if stderr else ""), op=op)

    def prompts(self, tasks: list[dict]) -> list[str]:
        """``prompt.make_prompt(task)`` for every task."""
        return self.call("prompts", tasks=frames.encode(list(tasks)))

    def score(self, samples: list[dict]) -> list[dict[str, float]]:
        """``{component: value}`` from ``rewards.COMPONENTS`` for every sample."""
        return self.call("score", samples=frames.encode(list(samples)), frames=1)

    def filter(self, groups: list[list[dict]]) -> list[list[bool]]:
        """Kept flags per rollout: ``keep_rollout(r) and keep_group(group)``."""
        return self.call("filter", groups=frames.encode([list(g) for g in groups], grouped=True))

    def curriculum(self, levels: list[str], base: dict[str, float], history: dict[str, dict]) -> dict[str, float]:
        """Sampling weight per level from ``curriculum.weights`` (finite, >= 0, at least one > 0)."""
        return self.call("curriculum", levels=list(levels), base=dict(base), history=dict(history))

    def diagnostics(self, rollouts: list[dict]) -> dict[str, dict]:
        """``{name: {value, min, max, help, error}}`` for every metric in ``diagnostics.METRICS``."""
        return self.call("diagnostics", rollouts=frames.encode(list(rollouts)))

    def selftest(self) -> dict:
        """``{"passed": [ids], "failed": [{"name", "error"}], "n": int}`` of the harness's tests/."""
        return self.call("selftest")

    def record(self, tests: list[str]) -> dict[str, list[dict]]:
        """``{test: [{"component", "sample", "value"}]}``: the reward calls each named test (``tests/FILE.py::NAME``)
        makes, recorded while it runs (``runner.Runner.op_record``)."""
        return self.call("record", tests=list(tests))


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
