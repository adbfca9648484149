"""The framework side of the harness sandbox: every call into harness code goes through a ``HarnessWorker``.

Harness code (prompt.py, rewards.py, filters.py, curriculum.py, diagnostics.py, tests/) is written by agents
and is untrusted, so it never runs in the framework's process. A ``HarnessWorker`` starts one long-lived
sandboxed process running ``sandbox/runner.py`` (standard library only) on one harness directory and talks to
it over JSON lines on stdin/stdout. The interface is the same for every backend:

* ``docker``  -- the image built from ``sandbox/Dockerfile`` (a bare Python and runner.py, no evotrainer): no
  network, read-only root and harness mount, memory/CPU/pid limits, non-root user, no capabilities. Used when
  the ``docker`` package, a daemon and the image are there.
* ``bwrap``   -- bubblewrap, all namespaces unshared (no network), no capabilities.
* ``unshare`` -- util-linux ``unshare`` (user, mount, pid, net, ipc, uts namespaces), the same filesystem view as
  bwrap, built by a shell script with ``mount`` and ``pivot_root``; capabilities dropped with ``setpriv``.
* ``process`` -- a plain child process: NO isolation. Harness code runs as this user and can read the
  evaluator, the run directories and the framework, and write any file this user can; only resource limits,
  a scrubbed environment and a temp working dir. The last resort, for machines without any of the above.

bwrap and unshare show harness code a filesystem of its own (``_view``): an empty read-only root holding,
read-only, the system dirs (``/usr``, and ``/bin``, ``/lib``, ... as binds or as the symlinks they are), the
dynamic loader's ``/etc/ld.so.cache``, the Python installation (``sys.prefix``, ``sys.base_prefix``,
site-packages, the interpreter's symlink chain), ``sandbox/runner.py`` and the harness dir; a fresh ``/proc``
(read-only), a ``/dev`` of harmless device nodes and a private tmpfs ``/tmp``. Nothing else of the host exists
there: no ``/etc``, ``/home``, ``/work``, run directories or repository. Where the framework package
(``evotrainer/``, be it a source checkout or in site-packages) or a ``hide`` path lies inside one of those
visible paths, an empty read-only tmpfs (``/dev/null`` for a file) masks it. The only writable host path is
the fresh temporary working dir (also ``$HOME``). The process has no capabilities, so it cannot unmount a
mask or remount anything writable, and mounts copied into any namespace it creates are locked by the kernel.
Without a mount namespace (``process``) nothing is hidden; docker hides everything but the harness mount.

All non-docker backends add rlimits (address space, CPU seconds, file size, open files), a scrubbed
environment and a fresh temporary working directory. Every backend has a wall-clock limit per call; on
timeout, crash or protocol garbage the whole process group is killed and restarted on the next call.
``choose_backend("auto")`` picks the strongest available one (probed once per process, by starting the
interpreter exactly as a worker does); the trainer and the backtester report it in the run log with
``describe_backend``.

Errors in harness code surface as ``HarnessError``, whose ``str()`` is one readable line such as
``rewards.py:12 ZeroDivisionError: division by zero``; the full traceback is on ``.traceback``.
A worker imports each harness module once: start a new worker after the harness files change.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import ctypes.util
import functools
import json
import os
import resource
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

__all__ = [
    "BACKENDS",
    "DEFAULT_IMAGE",
    "HarnessError",
    "HarnessWorker",
    "SandboxLimits",
    "choose_backend",
    "describe_backend",
    "exit_reason",
    "run_selftest",
]

BACKENDS = ("docker", "bwrap", "unshare", "process")
DEFAULT_IMAGE = "evotrainer-sandbox:latest"
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
_STDERR_TAIL_BYTES = 64 * 1024
_PR_SET_PDEATHSIG = 1

_DESCRIPTIONS = {
    "docker": "docker: no network, read-only root and harness mount, memory/CPU/pid limits, non-root user, "
              "no capabilities, time limit per call",
    "bwrap": "bwrap: no network, no capabilities, own filesystem showing only the system dirs, the Python "
             "installation, the runner and the harness (all read-only; framework package and hidden paths "
             "masked), writable temp working dir only, rlimits, scrubbed env, time limit per call",
    "unshare": "unshare: no network, no capabilities, own filesystem (as bwrap) showing only the system dirs, "
               "the Python installation, the runner and the harness (all read-only; framework package and "
               "hidden paths masked), writable temp working dir only, rlimits, scrubbed env, time limit per call",
    "process": "process: NO ISOLATION - harness code runs as this user and can read the evaluator, run "
               "directories and framework code, write any file this user can, and use the network; only "
               "rlimits, scrubbed env, temp working dir and a time limit per call",
}


class HarnessError(RuntimeError):
    """Harness code failed: an exception, a broken contract, a timeout, a crash or protocol garbage.

    ``str()`` is one readable line; ``traceback`` holds the sandbox-side traceback (may be empty) and
    ``op`` the call that failed.
    """

    def __init__(self, message: str, *, traceback: str = "", op: str | None = None) -> None:
        super().__init__(" ".join(str(message).split()))
        self.traceback = traceback
        self.op = op


@dataclass
class SandboxLimits:
    """Resource limits of one sandboxed harness process (``cpu_s`` is its lifetime CPU budget)."""

    memory_mb: int = 2048
    cpu_s: int = 300
    call_timeout_s: float = 60
    file_size_mb: int = 64
    max_procs: int = 64


# ------------------------------------------------------------------------------------------ backends


def _run_quietly(argv: list[str], timeout: float = 10) -> bool:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=timeout).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=None)
def _docker_available(image: str) -> bool:
    """The docker package imports, a daemon answers ping within 2 s, the CLI exists and the image is local."""
    if shutil.which("docker") is None:
        return False
    try:
        import docker  # type: ignore[import-not-found]

        client = docker.from_env(timeout=2)
        client.ping()
        client.images.get(image)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return False


# The host paths a namespace sandbox (bwrap, unshare) shows, besides the Python installation, the runner and the
# harness: the system directories (as symlinks where they are symlinks, on a merged-/usr system) and the one
# /etc file the dynamic loader wants. Nothing else of the host: no /etc, /home, /root, /work, /sys, /run.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache",)


def _framework_dir() -> str:
    """The evotrainer package directory (source checkout or site-packages): never visible to harness code."""
    return str(Path(__file__).resolve().parent)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _python_paths() -> list[str]:
    """What the runner's interpreter needs: its prefixes, site-packages and every hop of its symlink chain."""
    import site
    import sysconfig

    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    try:
        paths += site.getsitepackages()
    except AttributeError:  # old virtualenv's site.py
        pass
    paths += [sysconfig.get_paths().get(key, "") for key in ("purelib", "platlib")]
    hop = os.path.abspath(sys.executable)
    for _ in range(40):  # venv/bin/python -> python3 -> /base/bin/python3 -> python3.11
        paths.append(hop)
        if not os.path.islink(hop):
            break
        hop = os.path.normpath(os.path.join(os.path.dirname(hop), os.readlink(hop)))
    return [p for p in paths if p]


def _view(harness_dir: str, workdir: str, hidden: Iterable[str]) -> list[tuple[str, ...]]:
    """The mount plan of a namespace sandbox, in order, as ("link", target, path), ("ro", path),
    ("mask", path) and ("rw", path) steps, applied on top of a fresh tmpfs root with /dev, /proc and /tmp.

    Read-only: the system dirs, the Python installation, the runner, the harness. Masked (empty read-only
    tmpfs, or /dev/null for a file) wherever they lie inside one of those: the evotrainer package and the
    ``hidden`` paths. Writable: ``workdir`` only. Paths that don't exist are left out.
    """
    steps: list[tuple[str, ...]] = []
    links: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            steps.append(("link", os.readlink(path), path))
            links.append(path)
    wanted = [*_SYSTEM_DIRS, *_SYSTEM_FILES, *_python_paths(), str(_runner_path()), harness_dir]
    candidates = set()
    for path in wanted:
        if path not in links and os.path.exists(path):
            path = os.path.abspath(path)
            # never mount through a symlink of the new root: a path under /lib -> usr/lib goes by its real name
            candidates.add(os.path.realpath(path) if any(_under(path, link) for link in links) else path)
    bound: list[str] = []
    for path in sorted(candidates):  # parents before children; a path inside a bound one is visible already
        if not any(_under(path, parent) for parent in bound):
            bound.append(path)
            steps.append(("ro", path))
    masks = {os.path.realpath(p) for p in [_framework_dir(), *hidden] if os.path.exists(p)}
    for path in bound:
        real = os.path.realpath(path)
        for mask in sorted(masks):
            if _under(mask, real):
                steps.append(("mask", path + mask[len(real):]))
    steps.append(("rw", workdir))
    return steps


def _bwrap_argv(steps: list[tuple[str, ...]], workdir: str, command: list[str]) -> list[str]:
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--cap-drop", "ALL",
            "--dev", "/dev", "--proc", "/proc", "--remount-ro", "/proc", "--tmpfs", "/tmp"]
    for step in steps:
        kind, path = step[0], step[-1]
        if kind == "link":
            argv += ["--symlink", step[1], path]
        elif kind == "ro":
            argv += ["--ro-bind", path, path]
        elif kind == "rw":
            argv += ["--bind", path, path]
        elif os.path.isdir(path):  # mask
            argv += ["--tmpfs", path, "--remount-ro", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    return argv + ["--remount-ro", "/", "--chdir", workdir, *command]


_UNSHARE_FLAGS = ("-r", "-m", "-n", "-p", "-u", "-i", "--fork", "--kill-child")

# Runs as root of new user, mount, pid, net, ipc and uts namespaces, with the arguments ROOT WORKDIR STEP... --
# COMMAND... (see _view; paths come as arguments, so no quoting is ever needed). It builds the sandbox's
# filesystem the way bwrap does: a tmpfs on ROOT (an empty host directory), a fresh read-only /proc, a /dev
# of the harmless device nodes, a tmpfs /tmp, then the steps (read-only binds are non-recursive: a bound
# directory with mounts below it fails the start rather than showing them writable); then it pivots into
# ROOT, detaches the host's root, makes the new root read-only and runs COMMAND with every capability
# dropped, so harness code cannot undo a mount. The shell stays as PID 1 of the pid namespace (which ignores
# default-action signals such as SIGXCPU) and reports a signal death of the command as exit status
# 128 + signal. Any failed step ends it with exit status 97 and one line on stderr.
_UNSHARE_SCRIPT = """
fail() { echo "evotrainer sandbox setup failed: $*" >&2; exit 97; }
user_path=$PATH
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
root=$1 work=$2
shift 2
mount -n -t tmpfs -o mode=0755 evotrainer-root "$root" || fail "tmpfs on $root"
mkdir "$root/proc" "$root/dev" "$root/tmp" "$root/.old" || fail "mkdir in $root"
mount -n -t proc -o nosuid,nodev,noexec proc "$root/proc" && mount -n -o remount,ro,bind "$root/proc" \\
  || fail /proc
mount -n -t tmpfs -o mode=0755,nosuid evotrainer-dev "$root/dev" && mkdir "$root/dev/shm" || fail /dev
for node in null zero full random urandom tty; do
  : > "$root/dev/$node" && mount -n --bind "/dev/$node" "$root/dev/$node" || fail "/dev/$node"
done
ln -s /proc/self/fd "$root/dev/fd" && ln -s /proc/self/fd/0 "$root/dev/stdin" \\
  && ln -s /proc/self/fd/1 "$root/dev/stdout" && ln -s /proc/self/fd/2 "$root/dev/stderr" || fail /dev
mount -n -t tmpfs -o mode=1777,nosuid,nodev evotrainer-tmp "$root/tmp" || fail /tmp
while [ "$1" != "--" ]; do
  case "$1" in
    link) mkdir -p "$root${3%/*}" && ln -s "$2" "$root$3" || fail "symlink $3"; shift 3 ;;
    ro|rw)
      if [ -d "$2" ]; then mkdir -p "$root$2"
      else mkdir -p "$root${2%/*}" && { [ -e "$root$2" ] || : > "$root$2"; }; fi || fail "mount point $2"
      mount -n --bind "$2" "$root$2" || fail "bind $2"
      [ "$1" = rw ] || mount -n -o remount,ro,bind "$root$2" || fail "read-only $2"
      shift 2 ;;
    mask)
      if [ -d "$2" ]; then mount -n -t tmpfs -o size=4k,mode=0555 evotrainer-hidden "$root$2"
      else mount -n --bind /dev/null "$root$2"; fi && mount -n -o remount,ro,bind "$root$2" || fail "mask $2"
      shift 2 ;;
    *) fail "unknown step $1" ;;
  esac
done
shift
cd "$root" && pivot_root . .old && umount -n -l /.old && rmdir /.old || fail pivot_root
mount -n -o remount,ro,bind / || fail "read-only /"
setpriv=$(command -v setpriv) || fail "setpriv not found"
cd "$work" || fail "cd $work"
PATH=$user_path
"$setpriv" --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"
exit $?
"""


def _unshare_argv(root: str, steps: list[tuple[str, ...]], workdir: str, command: list[str]) -> list[str]:
    args = [part for step in steps for part in step]
    return ["unshare", *_UNSHARE_FLAGS, "sh", "-c", _UNSHARE_SCRIPT, "sh", root, workdir, *args, "--", *command]


def _sandbox_argv(backend: str, harness_dir: str, base: str, hidden: Iterable[str],
                  command: list[str]) -> tuple[list[str], str]:
    """The argv that runs ``command`` under ``backend`` (not docker), and its working dir, made inside ``base``."""
    workdir = os.path.join(base, "work")
    os.makedirs(workdir, exist_ok=True)
    if backend == "process":
        return command, workdir
    steps = _view(harness_dir, workdir, hidden)
    if backend == "bwrap":
        return _bwrap_argv(steps, workdir, command), workdir
    root = os.path.join(base, "root")
    os.makedirs(root, exist_ok=True)
    return _unshare_argv(root, steps, workdir, command), workdir


def _probe(backend: str) -> bool:
    """Start the interpreter under ``backend`` exactly as a worker does, with a hidden dir and file to mask."""
    base = os.path.realpath(tempfile.mkdtemp(prefix="evotrainer-probe-"))
    try:
        harness = os.path.join(base, "harness")
        os.makedirs(os.path.join(harness, "hidden"))
        Path(harness, "hidden.txt").write_text("")
        hidden = [os.path.join(harness, "hidden"), os.path.join(harness, "hidden.txt")]
        argv, workdir = _sandbox_argv(backend, harness, base, hidden, [sys.executable, "-I", "-B", "-c", ""])
        try:
            return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, cwd=workdir, timeout=20).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False
    finally:
        shutil.rmtree(base, ignore_errors=True)


@functools.lru_cache(maxsize=None)
def _bwrap_available() -> bool:
    return shutil.which("bwrap") is not None and _probe("bwrap")


@functools.lru_cache(maxsize=None)
def _unshare_available() -> bool:
    return shutil.which("unshare") is not None and _probe("unshare")


def _available(name: str, image: str) -> bool:
    if name == "docker":
        return _docker_available(image)
    if name == "bwrap":
        return _bwrap_available()
    if name == "unshare":
        return _unshare_available()
    return name == "process"


def choose_backend(preference: str = "auto", image: str = DEFAULT_IMAGE) -> str:
    """The sandbox backend to use: the strongest available for ``auto``, else exactly ``preference``.

    Raises ValueError for an unknown name and RuntimeError when an explicitly requested backend is not
    available on this machine. Probes run once per process.
    """
    if preference == "auto":
        return next(name for name in BACKENDS if _available(name, image))
    if preference not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {preference!r}; expected auto or one of {', '.join(BACKENDS)}")
    if not _available(preference, image):
        hint = f" (is the daemon up and the image {image!r} built?)" if preference == "docker" else ""
        raise RuntimeError(f"sandbox backend {preference!r} is not available on this machine{hint}")
    return preference


def describe_backend(name: str) -> str:
    """One line for the run log saying what the backend isolates."""
    try:
        return _DESCRIPTIONS[name]
    except KeyError:
        raise ValueError(f"unknown sandbox backend {name!r}") from None


def _runner_path() -> Path:
    """sandbox/runner.py beside the evotrainer package (source checkout and installed wheel alike)."""
    path = Path(__file__).resolve().parents[1] / "sandbox" / "runner.py"
    if path.is_file():
        return path
    import importlib.util

    spec = importlib.util.find_spec("sandbox.runner")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("sandbox/runner.py not found next to the evotrainer package")
    return Path(spec.origin)


# ------------------------------------------------------------------------------------------ processes

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


def _make_preexec(limits: SandboxLimits | None) -> Any:
    """A preexec_fn: die with the parent, then apply the rlimits, if any (all resolved before the fork)."""
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
                 workdir: str | None, container: str | None) -> None:
        self.workdir = workdir
        self.container = container
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

    def receive_line(self, deadline: float) -> bytes | None:
        """Read one response line before ``deadline``; None on EOF (the process died)."""
        fd = self.popen.stdout.fileno()
        chunks = [self.buffer]
        size = len(self.buffer)
        while b"\n" not in chunks[-1]:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            readable, _, _ = select.select([fd], [], [], remaining)
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
        if self.container:
            _run_quietly(["docker", "rm", "-f", self.container], timeout=15)
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


# ------------------------------------------------------------------------------------------ worker


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
                 hide: Iterable[str | os.PathLike] = ()) -> dict:
    """Run the harness's self-tests in a one-shot worker (see ``HarnessWorker.selftest``)."""
    with HarnessWorker(harness_dir, limits=limits, backend=backend, hide=hide) as worker:
        return worker.selftest()
