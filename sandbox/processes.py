"""Sandbox processes: start a child that dies with us, limit it, talk to it over pipes, and kill it all.

The layer under ``sandbox.worker``: it knows nothing of backends or harness ops. ``_Process`` runs one argv
(built by ``sandbox.backends``) in a new process group with rlimits (``_make_preexec``) and a scrubbed
environment, keeps the tail of its stderr, and sends/receives JSON lines with deadlines; ``_Slot`` holds the
worker's current process. Tested through ``tests/test_sandbox.py`` (timeouts, crashes, CPU limit, stragglers,
threads): ``python -m pytest -q tests/test_sandbox.py -k "crash or close or thread"``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import ctypes.util
import os
import resource
import select
import shutil
import signal
import subprocess
import threading
import time
from typing import Any

from sandbox.limits import SandboxLimits

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
POLL_S = 0.2


class LimitExceeded(Exception):
    """A polled whole-sandbox limit was passed while a call ran (the message says which)."""
_STDERR_TAIL_BYTES = 64 * 1024
_PR_SET_PDEATHSIG = 1


def _run_quietly(argv: list[str], timeout: float = 10) -> bool:
    """Run ``argv`` with no input or output; True when it exits 0 within ``timeout`` seconds."""
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=timeout).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


_spawner: concurrent.futures.ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _popen(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """Start a child from one long-lived thread.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so children forked from a
    short-lived thread (e.g. a web server's thread pool) would be killed with it. A dedicated spawner thread
    lives as long as the interpreter.
    """
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="evotrainer-sandbox-spawn")
    try:
        future = _spawner.submit(subprocess.Popen, argv, **kwargs)
    except RuntimeError:  # interpreter shutting down: the spawner is gone
        return subprocess.Popen(argv, **kwargs)
    return future.result()


def _user_process_count() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count


def _make_preexec(limits: SandboxLimits | None, join: list[str] | tuple[str, ...] = ()) -> Any:
    """A preexec_fn: die with the parent, join the sandbox's cgroup (``join``: its cgroup.procs files), then
    apply the rlimits, if any (all resolved before the fork)."""
    libc_name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(libc_name, use_errno=True) if libc_name else None
    parent = os.getpid()
    mb = 1024 * 1024
    rlimits = [] if limits is None else [
        (resource.RLIMIT_AS, limits.memory_mb * mb),
        (resource.RLIMIT_CPU, int(limits.cpu_s)),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * mb),
        (resource.RLIMIT_NOFILE, 256),
    ]
    if limits is not None and os.getuid() != 0:  # NPROC counts all the user's processes; root is exempt
        rlimits.append((resource.RLIMIT_NPROC, _user_process_count() + limits.max_procs))

    def preexec() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
        for path in join:  # before exec: everything the sandbox starts is counted in its cgroup
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
        for which, value in rlimits:  # hard limits too, so harness code cannot raise them again
            hard = resource.getrlimit(which)[1]
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            # at the soft CPU limit the kernel sends SIGXCPU (a readable death), at the hard one SIGKILL
            new_hard = value + 1 if which == resource.RLIMIT_CPU and hard == resource.RLIM_INFINITY else value
            resource.setrlimit(which, (value, new_hard))

    return preexec


def _scrubbed_env(home: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "LANG": "C.UTF-8",
        "HOME": home,
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
    }


def exit_reason(returncode: int | None) -> str:
    """A process's end in words: 'exit status 3', 'killed by SIGKILL', or 'still running'."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


class _Process:
    """One running sandbox process: pipes, process group, stderr tail, temp dir, container name."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None, cwd: str | None, preexec: Any,
                 workdir: str | None, container: Any, confinement: Any = None) -> None:
        self.workdir = workdir
        self.container = container  # a name to `docker rm -f`, or an object with .remove(force=True)
        self.confinement = confinement  # sandbox.confine.Confinement: its cgroup dies with the process
        self.buffer = b""
        self.stderr_tail: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self.popen = _popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=cwd, preexec_fn=preexec, start_new_session=True, close_fds=True)
        os.set_blocking(self.popen.stdin.fileno(), False)
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True,
                                               name="evotrainer-sandbox-stderr")
        self._stderr_thread.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def _drain_stderr(self) -> None:
        """Keep the last 64 KiB of stderr (harness prints) so the pipe never fills up."""
        stream = self.popen.stderr
        try:
            for chunk in iter(lambda: stream.read1(65536), b""):
                self.stderr_tail.append(chunk)
                self._stderr_size += len(chunk)
                while self._stderr_size > _STDERR_TAIL_BYTES and len(self.stderr_tail) > 1:
                    self._stderr_size -= len(self.stderr_tail.popleft())
        except (OSError, ValueError):
            pass
        finally:
            stream.close()

    def last_stderr_line(self) -> str:
        self._stderr_thread.join(timeout=1)  # the process is gone: let the drain reach EOF
        lines = b"".join(self.stderr_tail).decode("utf-8", "replace").strip().splitlines()
        return lines[-1].strip()[:300] if lines else ""

    def _descendants(self) -> list[Any]:
        """The process and its live descendants as psutil processes (empty when unknown)."""
        try:
            import psutil

            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except Exception:  # noqa: BLE001 - psutil missing or the process already gone
            return []

    def cpu_seconds(self) -> float:
        """CPU time used so far by the process and its descendants (0 when unknown)."""
        total = 0.0
        for proc in self._descendants():
            try:
                total += sum(proc.cpu_times()[:2])
            except Exception:  # noqa: BLE001 - it just exited
                pass
        return total

    def send(self, data: bytes, deadline: float) -> None:
        """Write all of ``data`` to stdin before ``deadline`` (non-blocking writes: a stuck child can't hang us)."""
        fd = self.popen.stdin.fileno()
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            _, writable, _ = select.select([], [fd], [], remaining)
            if writable:
                try:
                    view = view[os.write(fd, view[: 1 << 20]):]
                except BlockingIOError:
                    continue

    def receive_line(self, deadline: float, monitor: Any = None) -> bytes | None:
        """Read one response line before ``deadline``; None on EOF (the process died). ``monitor()`` is called
        about every ``POLL_S`` while waiting; a message it returns is raised as ``LimitExceeded``."""
        fd = self.popen.stdout.fileno()
        chunks = [self.buffer]
        size = len(self.buffer)
        while b"\n" not in chunks[-1]:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            readable, _, _ = select.select([fd], [], [], min(remaining, POLL_S) if monitor else remaining)
            if monitor is not None:
                message = monitor()
                if message:
                    raise LimitExceeded(message)
            if not readable:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise OverflowError
        data = b"".join(chunks)
        line, _, self.buffer = data.partition(b"\n")
        return line

    def kill(self, stragglers: list[Any] | None = None) -> None:
        """Kill the whole process group (and the container), reap, close pipes, delete the temp dir."""
        if isinstance(self.container, str):
            _run_quietly(["docker", "rm", "-f", self.container], timeout=15)
        elif self.container is not None:
            try:
                self.container.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone, or the daemon went away
                pass
        if stragglers is None:
            stragglers = self._descendants()  # includes any that left the process group with setsid()
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for proc in stragglers:
            try:
                proc.kill()
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self.confinement is not None:  # every process of the sandbox, however it left the tree
            self.confinement.close()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        # stderr is closed by its drain thread at EOF: closing it here would block while a straggler
        # (e.g. a grandchild that escaped the process group) still holds the pipe open
        for stream in (self.popen.stdin, self.popen.stdout):
            try:
                stream.close()
            except (OSError, ValueError):
                pass
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def shutdown(self) -> None:
        """Ask the runner to exit, give it a moment, then kill whatever is left."""
        stragglers = self._descendants()  # before the runner exits and its children get reparented
        if self.alive():
            try:
                self.send(b'{"op": "exit"}\n', time.monotonic() + 1)
                self.popen.wait(timeout=1)
            except (OSError, TimeoutError, subprocess.TimeoutExpired, ValueError):
                pass
        self.kill(stragglers)


class _Slot:
    """Holds the worker's current process; the GC/exit finalizer only references this, never the worker."""

    def __init__(self) -> None:
        self.process: _Process | None = None

    def stop(self, graceful: bool = True) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.shutdown() if graceful else process.kill()
