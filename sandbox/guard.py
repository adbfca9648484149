"""In-sandbox evidence: what harness code tried that it must never do, recorded and denied before it happens.

Loaded by ``runner.py`` by file path (standard library only, visible in the sandbox beside the runner; it never
imports the ``sandbox`` package) and installed before any harness code runs:

* an audit hook (``sys.addaudithook``) that, while an op runs harness code, records and denies (raises
  ``PermissionError`` naming the attempt) what harness code must never do:

    network     socket connect / bind / send, name lookups, sockets other than AF_UNIX
    file        opening, listing or changing a path outside the harness dir, the Python installation and the
                sandbox's own scratch and /tmp (writes: scratch and a private /tmp only, never a host path bound
                under it, such as a checkout or virtual environment under /tmp) -- the evaluator
                split, the run directory, ``.git``, site-packages, /proc, /etc, ...
    process     starting a process (fork, exec, spawn, subprocess, os.system)
    signal      signalling any process but itself
    native      loading native code (ctypes)
    limits      changing its resource limits
    introspect  walking the runner's memory or frames (gc.get_objects, sys._current_frames, tracing hooks,
                frames of the runner)

* an audited ``os.environ`` / ``os.environb``: reading a variable outside the scrubbed set, or listing them all,
  is recorded (``environment``); the value is still what the scrubbed environment holds (so usually nothing).

Each attempt is ``{"kind", "what", "where"}`` (``where`` = ``file.py:line`` of the deepest harness frame) and
travels back with the op's response (``runner.py``). This is evidence, not isolation: Python code in the same
process can get around an audit hook (the namespaces and limits of the sandbox hold regardless); an audit
hook found disabled at the end of an op is itself recorded (``tamper``). Try it alone:
``python -c "import sandbox.guard as g; x = g.Guard('/tmp', '/tmp', True); x.install(); x.begin(); open('/etc/hosts')"``
(a PermissionError naming the attempt).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys

MAX_ATTEMPTS = 50  # distinct attempts kept per op
ENV_ALLOWED = {"PATH", "LANG", "HOME", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
               "OMP_NUM_THREADS", "TMPDIR", "TEMP", "TMP", "TZ", "LANGUAGE", "COLUMNS", "LINES", "TERM"}
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_PROCESS = {"os.system": "os.system", "os.exec": "exec", "os.posix_spawn": "posix_spawn", "os.spawn": "spawn",
            "os.fork": "fork", "os.forkpty": "forkpty", "subprocess.Popen": "subprocess", "os.startfile": "startfile"}
_NETWORK = ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
            "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo", "socket.gethostname",
            "urllib.Request", "http.client.connect", "ftplib.connect", "smtplib.connect", "imaplib.open",
            "poplib.connect")
_PATH_EVENTS = {"os.listdir": False, "os.scandir": False, "glob.glob": False, "os.remove": True, "os.rmdir": True,
                "os.mkdir": True, "os.chmod": True, "os.chown": True, "os.truncate": True, "os.utime": True,
                "os.mkfifo": True, "os.mknod": True, "os.setxattr": True, "os.removexattr": True,
                "os.chflags": True, "shutil.rmtree": True}
_INTROSPECT = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
               "sys.settrace", "sys.setprofile", "sys._current_exceptions")
_PR_SET_CHILD_SUBREAPER = 36
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _env_allowed(key: object) -> bool:
    key = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
    return key in ENV_ALLOWED or key.startswith("LC_")


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


class Guard:
    """The audit hook's state: which paths are allowed, whether harness code runs now, what it tried."""

    def __init__(self, harness_dir: str, scratch: str, private_tmp: bool, forbidden: tuple[str, ...] = ()) -> None:
        real = os.path.realpath
        self.harness_dir = real(harness_dir)
        here = os.path.dirname(real(__file__))
        self.own_files = (real(__file__), os.path.join(here, "runner.py"))
        writable = [real(scratch)] + (["/tmp"] if private_tmp else [])
        python = {real(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)}
        python.update(real(p) for p in sys.path if p and os.path.isdir(p))
        own_proc = [f"/proc/{os.getpid()}/{name}" for name in ("status", "stat", "statm", "limits")]
        readable = [self.harness_dir, *writable, *sorted(python), *self.own_files, *_DEVICES, *own_proc,
                    "/usr/share/zoneinfo", "/usr/lib/locale"]
        self.writable = tuple(writable)
        # host paths the sandbox shows read-only: a write into one is an attempt even where it lies under the
        # private /tmp (a checkout or a virtual environment under /tmp is bound there, read-only)
        self.host = (self.harness_dir, *sorted(python), *self.own_files)
        self.readable = tuple(readable)
        self.forbidden = tuple(real(p) for p in forbidden)
        self.enabled = True
        self.active = False
        self.attempts: list[dict] = []
        self._seen: set[tuple[str, str]] = set()
        self._busy = False
        self._heard = False

    # ------------------------------------------------------------------ the runner's side
    def install(self) -> None:
        """Scrub the environment, audit os.environ, add the audit hook (cannot be removed)."""
        for key in [k for k in os.environ if not _env_allowed(k)]:
            del os.environ[key]
        os.environ = _audited(os._Environ, os.environ, self)  # type: ignore[assignment,misc]
        if hasattr(os, "environb"):
            os.environb = _audited(os._Environ, os.environb, self)  # type: ignore[assignment,misc]
        self._environ = os.environ
        sys.addaudithook(self._hook)

    def begin(self) -> None:
        self.attempts, self._seen = [], set()
        self.active = True

    def end(self) -> list[dict]:
        """Stop recording; return this op's attempts, with a ``tamper`` one if the guard was disabled."""
        self.active = False
        self._heard = False
        sys.audit("evotrainer.guard.check")
        if not (self.enabled and self._heard and os.environ is self._environ):
            self.record("tamper", "the sandbox's audit hook or audited environment was disabled", "")
            self.enabled, os.environ = True, self._environ
        return self.attempts

    def record(self, kind: str, what: str, where: str | None = None) -> None:
        key = (kind, what)
        if key in self._seen or len(self.attempts) >= MAX_ATTEMPTS:
            return
        self._seen.add(key)
        self.attempts.append({"kind": kind, "what": what[:300], "where": self._where() if where is None else where})

    def _where(self) -> str:
        frame = sys._getframe(1)
        while frame is not None:
            path = frame.f_code.co_filename
            if path.startswith(self.harness_dir + os.sep):
                return f"{os.path.relpath(path, self.harness_dir)}:{frame.f_lineno}"
            frame = frame.f_back
        return ""

    # ------------------------------------------------------------------ the hook
    def _hook(self, event: str, args: tuple) -> None:
        if event == "evotrainer.guard.check":
            self._heard = True
            return
        if not (self.active and self.enabled) or self._busy:
            return
        self._busy = True
        try:
            denied = self._judge(event, args)
        finally:
            self._busy = False
        if denied:
            raise PermissionError(f"sandbox: {denied[0]} denied: {denied[1]}")

    def _judge(self, event: str, args: tuple) -> tuple[str, str] | None:
        found = self._classify(event, args)
        if found is not None:
            self.record(*found)
        return found

    def _classify(self, event: str, args: tuple) -> tuple[str, str] | None:
        if event == "open":
            path, mode, flags = (list(args) + [None, None, None])[:3]
            write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                mode is None and isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
            return self._path("open", path, write)
        if event in _PATH_EVENTS:
            return self._path(event, args[0] if args else None, _PATH_EVENTS[event])
        if event == "sqlite3.connect" and args and args[0] not in (":memory:", b":memory:", ""):
            return self._path(event, args[0], True)
        if event in ("os.rename", "os.link", "os.symlink"):
            for path in args[:2]:
                found = self._path(event, path, True)
                if found:
                    return found
            return None
        if event in _PROCESS:
            return "process", f"{_PROCESS[event]} {_short(args[:2])}"
        if event in _NETWORK:
            shown = args[1:3] if event.startswith(("socket.c", "socket.b", "socket.s", "http.", "ftplib.",
                                                    "smtplib.", "imaplib.", "poplib.")) else args[:2]
            return "network", f"{event}{_short(shown)}"
        if event == "socket.__new__":
            family = args[1] if len(args) > 1 else None
            if family != socket.AF_UNIX:
                return "network", f"socket(family={family})"
            return None
        if event in ("os.kill", "os.killpg"):
            target = args[0] if args else None
            if event == "os.kill" and target == os.getpid():
                return None
            return "signal", f"{event}{_short(args[:2])}"
        if event.startswith("ctypes."):
            return "native", f"{event}{_short(args[:1])}"
        if event in ("resource.setrlimit", "resource.prlimit"):
            return "limits", f"{event}{_short(args[:2])}"
        if event in _INTROSPECT:
            return "introspect", event
        if event == "sys._getframe" and args and getattr(args[0], "f_code", None) is not None:
            if os.path.realpath(args[0].f_code.co_filename) in self.own_files:
                return "introspect", "sys._getframe reached the runner's frames"
        return None

    def _path(self, event: str, path: object, write: bool) -> tuple[str, str] | None:
        if path is None or isinstance(path, int):
            return None
        try:
            text = os.fsdecode(path)
        except (TypeError, ValueError):
            return None
        real = os.path.realpath(text)
        if _under(real, self.forbidden):
            return "file", f"{event} {text!r} (a path hidden from harness code)"
        if write and not self._may_write(real):
            return "file", f"{event} {text!r} for writing (outside scratch)"
        if not write and not _under(real, self.readable):
            return "file", f"{event} {text!r} (outside the harness, the Python installation and scratch)"
        return None

    def _may_write(self, real: str) -> bool:
        """Scratch is writable; so is the private /tmp, except the host paths bound read-only inside it."""
        scratch, *tmp = self.writable
        return _under(real, (scratch,)) or (_under(real, tuple(tmp)) and not _under(real, self.host))

    # ------------------------------------------------------------------ processes left behind
    @staticmethod
    def adopt_orphans() -> None:
        """Make the runner the subreaper: orphans of harness code (a double fork, a daemon) become its children."""
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass

    @staticmethod
    def _children() -> list[int]:
        """Pids of the runner's live children (the dead ones reaped first)."""
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                return []
        me, found = str(os.getpid()), []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", "rb") as f:
                        stat = f.read().decode("ascii", "replace")
                except OSError:
                    continue
                fields = stat[stat.rfind(")") + 2:].split()
                if len(fields) > 1 and fields[1] == me and fields[0] != "Z":
                    found.append(int(entry))
        return found

    def stop_children(self) -> list[dict]:
        """Kill what harness code left running after an op: one ``process`` attempt saying how many."""
        left = self._children()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for _ in left:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
        return [{"kind": "process", "what": f"left {len(left)} process(es) running after the call (killed)",
                 "where": ""}] if left else []

    # ------------------------------------------------------------------ environment
    def environment(self, key: object) -> None:
        if not (self.active and self.enabled) or self._busy:
            return
        self._busy = True
        try:
            if key is None:
                self.record("environment", "listed every environment variable")
            elif not _env_allowed(key):
                self.record("environment", f"read ${os.fsdecode(key) if isinstance(key, bytes) else key}")
        finally:
            self._busy = False


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _audited(base: type, environ: object, guard: Guard) -> object:
    """A copy of ``os.environ`` (same data) whose reads outside the scrubbed set and listings are recorded."""

    class AuditedEnviron(base):  # type: ignore[misc,valid-type]
        def __getitem__(self, key):
            guard.environment(key)
            return super().__getitem__(key)

        def __iter__(self):
            guard.environment(None)
            return super().__iter__()

        def __repr__(self):
            guard.environment(None)
            return super().__repr__()

    e = environ
    return AuditedEnviron(e._data, e.encodekey, e.decodekey, e.encodevalue, e.decodevalue)
