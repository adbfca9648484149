"""The policy-code executor's batch worker: a standalone script (standard library only, run by path with ``python -I``)
that ``evotrainer.domains.execute`` starts once per generated batch. It reads one JSON object from stdin::

    {"jobs": [{"program": str, "tests": [{"call": "f(2)"}, {"exec": "assert f(3) == 6"}, ...]}, ...],
     "time_s": float, "memory_mb": int, "python": str, "fork": bool}

and, for each job in turn, runs the program in a child of its own (own session and process group, RLIMIT_AS and
RLIMIT_CPU, stdin/stdout/stderr discarded, killed with its whole group at the time limit and reaped), then prints one
JSON line per job: ``{"status": ..., "total": n, "detail": str, "outcomes": [...]}``, one outcome per test in order,
as far as the program got: ``{"value": v}`` (what a call returned), ``{"error": name}`` (it raised, or returned what
is not exactly JSON: another type, a subclass, a value over 64 KiB) or, for a script test, ``{"passed": bool}``.
``status`` is ``ok`` when every test ran, else why not (``fail``: it raised at definition or ended early).

**A call test's expected value never reaches this process** (``evotrainer.domains.execute`` keeps it and compares
what the call returned): a program shares its process with the code that calls it, so anything there is its to read
(the caller's frame, every object the garbage collector can list, the report pipe), and a body that returned the
expected value it found there passed every test, hidden ones included. A script test (HumanEval's ``check``) carries
its expectations in its own code, which runs in the program's process: it is for evaluating real models, not a
boundary a policy cannot cross. The child is forked from this worker
(``fork``, the default, when ``python`` is the interpreter running it: about 5 ms a program where starting a new
interpreter costs about 26: ``benchmarks/executor_throughput.py``), with third-party packages off its import path as
``-S`` would leave them; else a new ``python -I -S`` process.

A child reports over its own pipe (moved to a fresh descriptor before the program runs: not stdout), one line per
test and a final ``done`` line: a program that exits early (``os._exit(0)``) has no ``done`` line and fails; what a
program prints goes to /dev/null and scores nothing. A call's
value is reported only when it is exactly of JSON's types (a returned object whose ``__eq__`` says yes to everything
is an error, never a pass); a script test (``exec``: HumanEval's ``check``) passes when it runs to its end in the
program's namespace without raising. Try it alone::

    echo '{"jobs":[{"program":"def f(x):\\n    return x+1","tests":[{"call":"f(1)"}]}],
    "time_s":2,"memory_mb":256,"python":"python3"}' | python3 -I evotrainer/domains/execute_worker.py
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import sys
import time

# the whole environment of the worker (``evotrainer.domains.execute`` starts it with this) and of every program's
# child: none of the caller's variables (API keys, the trainer token) reach policy code, and a fixed hash seed keeps
# a program's set and dict order the same every run
ENV = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"}
REPORT_MAX = 4 * 1024 * 1024  # bytes of one program's report read at most (a value is at most 64 KiB a test)
# What the child runs, as source (a spawned interpreter runs it with -c; a forked child execs it and calls ``child``):
# move the report pipe to an unknown fd, point stdin/stdout/stderr at /dev/null, compile, run, call each test, report
# each result, then "done".
_CHILD_FN = r'''
def child(data, channel):
    import json, os
    try:  # no capability left (under unshare the child is root of its namespace): the worker's /proc is closed to it
        import ctypes
        head, caps = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
        ctypes.CDLL(None).capset(head, caps)
    except Exception:
        pass
    report = os.fdopen(os.dup(channel), "w", buffering=1)
    os.close(channel)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    def say(**row):
        report.write(json.dumps(row) + "\n")
    try:
        code = compile(data["program"], "<policy>", "exec")
    except (SyntaxError, ValueError) as exc:
        say(kind="syntax_error", detail=type(exc).__name__ + ": " + str(exc)[:200])
        return
    def exact(v, depth=0):  # JSON's own types, exactly (no subclass, no object with an __eq__ of its own)
        t = type(v)
        if v is None or t in (bool, int, float, str):
            return True
        if depth > 32:
            return False
        if t is list:
            return all(exact(x, depth + 1) for x in v)
        return t is dict and all(type(k) is str and exact(x, depth + 1) for k, x in v.items())
    tests = data["tests"]
    ns = {"__name__": "__policy__", "__builtins__": __builtins__}
    del data
    try:
        exec(code, ns)
    except BaseException as exc:
        say(kind="error", detail="at definition: " + type(exc).__name__)
        return
    for test in tests:
        if "exec" in test:  # a test script (HumanEval's check): it passes when it runs to its end
            try:
                exec(compile(test["exec"], "<test>", "exec"), ns)
                say(kind="test", passed=True)
            except BaseException:
                say(kind="test", passed=False)
            continue
        try:
            got = eval(test["call"], ns)
            text = json.dumps(got) if exact(got) else None
        except BaseException as exc:
            say(kind="test", error=type(exc).__name__)
            continue
        if text is None or len(text) > 65536:
            say(kind="test", error="not exactly JSON" if text is None else "value over 64 KiB")
        else:
            report.write('{"kind": "test", "value": ' + text + "}\n")
    say(kind="done")
'''
_FORKED: dict = {}  # the child function, compiled once here: a forked child calls it (no compile per program)
exec(_CHILD_FN, _FORKED)  # noqa: S102 - our own source above
_CHILD = _CHILD_FN + "\nimport json, sys\nchild(json.loads(sys.stdin.read()), int(sys.argv[1]))\n"


def _preexec(time_s: float, memory_mb: int):
    def apply() -> None:
        mb = 1024 * 1024
        cpu = max(1, int(time_s + 0.999))
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb * mb, memory_mb * mb))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (mb, mb))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Forked:
    """A program's child forked from this worker (no new interpreter: a fork costs a millisecond where starting
    Python costs tens), with the spawned child's interface: ``pid``, ``poll()``, ``wait()``, ``returncode``."""

    def __init__(self, job: dict, write_end: int, read_end: int, time_s: float, memory_mb: int) -> None:
        self.returncode = None
        self.pid = os.fork()
        if self.pid == 0:  # the child: its own session and limits, then the same code a spawned child runs
            try:
                os.close(read_end)
                os.setsid()
                os.chdir("/tmp")
                _preexec(time_s, memory_mb)()
                os.environ.clear()  # as the spawned child's env=ENV (a worker run by hand has the caller's)
                os.environ.update(ENV)
                sys.path[:] = [p for p in sys.path if "-packages" not in p]  # as -S: no third-party imports
                _FORKED["child"]({"program": job["program"], "tests": job["tests"]}, write_end)
            finally:
                os._exit(0)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


def run_one(job: dict, time_s: float, memory_mb: int, python: str, fork: bool = True) -> dict:
    """One program against its tests in a fresh child (forked from this worker when ``fork`` and ``python`` is the
    interpreter running it, else a new ``python`` process): whether it ran every test, and each test's outcome."""
    tests = job["tests"]
    total = len(tests)
    if not job.get("program", "").strip():
        return {"status": "no_code", "total": total, "detail": "no code", "outcomes": []}
    read_end, write_end = os.pipe()
    try:
        if fork and os.path.realpath(python) == os.path.realpath(sys.executable) and hasattr(os, "fork"):
            sys.stdout.flush()
            child = _Forked(job, write_end, read_end, time_s, memory_mb)
        else:
            child = subprocess.Popen(
                [python, "-I", "-S", "-B", "-c", _CHILD, str(write_end)], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(write_end,), start_new_session=True,
                preexec_fn=_preexec(time_s, memory_mb), env=ENV,
                cwd="/tmp")
            try:
                child.stdin.write(json.dumps({"program": job["program"], "tests": tests}).encode())
                child.stdin.close()
            except BrokenPipeError:
                pass
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        return {"status": "grader_error", "total": total, "detail": f"cannot start: {exc}"[:200], "outcomes": []}
    os.close(write_end)
    deadline = time.monotonic() + time_s
    timed_out = False
    chunks, eof, size = [], False, 0
    while size <= REPORT_MAX:  # read the child's report until it ends (pipe closed, child gone) or the time limit
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        if eof:  # the pipe is closed; wait for the child itself
            if child.poll() is not None:
                break
            time.sleep(0.001)
            continue
        if select.select([read_end], [], [], min(remaining, 0.05))[0]:
            data = os.read(read_end, 65536)
            if data:
                chunks.append(data)
                size += len(data)
            else:
                eof = True
        elif child.poll() is not None:  # gone, the pipe still open: something it left holds it (killed below)
            break
    os.close(read_end)
    _kill_group(child.pid)  # the program's forked children too, when they stayed in its group
    child.wait()
    if size > REPORT_MAX:  # what only a program writing to the report pipe itself sends
        return {"status": "fail", "total": total, "detail": f"report over {REPORT_MAX} bytes", "outcomes": []}
    rows = []
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # a line the program wrote itself: no row
            continue
        if isinstance(row, dict):
            rows.append(row)
    outcomes = [{k: v for k, v in r.items() if k != "kind"} for r in rows if r.get("kind") == "test"][:total]
    kinds = [r.get("kind") for r in rows]
    if "syntax_error" in kinds:
        return {"status": "syntax_error", "total": total, "detail": rows[0].get("detail", ""), "outcomes": []}
    if timed_out or (child.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and "done" not in kinds):
        return {"status": "timeout", "total": total, "detail": f"over {time_s:g} s", "outcomes": outcomes}
    if "done" not in kinds or len(outcomes) < total:
        why = next((r.get("detail") for r in rows if r.get("kind") == "error"), None)
        why = why or f"ended before its tests finished (exit {child.returncode})"
        return {"status": "fail", "total": total, "detail": why, "outcomes": outcomes}
    return {"status": "ok", "total": total, "detail": "", "outcomes": outcomes}


def _undumpable() -> None:
    """Make this worker undumpable: a program (same user, no capability) can then neither open the worker's pipes
    through ``/proc/<worker>/fd`` (writing rows of its own into the answers) nor read or trace its memory."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):  # not Linux: nothing to close
        pass


def main() -> None:
    _undumpable()
    request = json.loads(sys.stdin.read())
    for job in request["jobs"]:
        row = run_one(job, float(request["time_s"]), int(request["memory_mb"]), request["python"],
                      bool(request.get("fork", True)))
        sys.stdout.write(json.dumps(row) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
