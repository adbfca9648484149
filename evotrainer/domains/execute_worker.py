"""The policy-code executor's batch worker: a standalone script (standard library only, run by path with ``python -I``)
that ``evotrainer.domains.execute`` starts once per generated batch. It reads one JSON object from stdin::

    {"jobs": [{"program": str, "tests": [{"call": "f(2)", "expected": 5}, {"exec": "assert f(3) == 6"}, ...]}, ...],
     "time_s": float, "memory_mb": int, "python": str, "fork": bool}

and, for each job in turn, runs the program in a child of its own (own session and process group, RLIMIT_AS and
RLIMIT_CPU, stdin/stdout/stderr discarded, killed with its whole group at the time limit and reaped), then prints one
JSON line per job: ``{"status": ..., "passed": k, "total": n, "detail": str, "results": [bool, ...]}`` (``results``:
each test's pass in order, as far as the program got). The child is forked from this worker
(``fork``, the default, when ``python`` is the interpreter running it: about 5 ms a program where starting a new
interpreter costs about 26: ``benchmarks/executor_throughput.py``), with third-party packages off its import path as
``-S`` would leave them; else a new ``python -I -S`` process.

A child reports over its own pipe (moved to a fresh descriptor before the program runs: not stdout), one line per
test and a final ``done`` line: a program that exits early (``os._exit(0)``) has no ``done`` line and fails; what a
program prints goes to /dev/null and scores nothing. A test
passes only when the call returns a value of exactly the expected type that equals the expected value (a returned
object whose ``__eq__`` says yes to everything does not pass); a script test (``exec``: HumanEval's ``check``) passes
when it runs to its end in the program's namespace without raising. Try it alone::

    echo '{"jobs":[{"program":"def f(x):\\n    return x+1","tests":[{"call":"f(1)","expected":2}]}],
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
# What the child runs, as source (a spawned interpreter runs it with -c; a forked child execs it and calls ``child``):
# move the report pipe to an unknown fd, point stdin/stdout/stderr at /dev/null, compile, run, call each test, report
# each result, then "done".
_CHILD_FN = r'''
def child(data, channel):
    import json, os
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
    tests = data["tests"]
    ns = {"__name__": "__policy__", "__builtins__": __builtins__}
    del data
    try:
        exec(code, ns)
    except BaseException as exc:
        say(kind="error", detail="at definition: " + type(exc).__name__)
        return
    for test in tests:
        try:
            if "exec" in test:  # a test script (HumanEval's check): it passes when it runs to its end
                exec(compile(test["exec"], "<test>", "exec"), ns)
                ok = True
            else:
                expected = test["expected"]
                got = eval(test["call"], ns)
                ok = type(got) is type(expected) and expected == got
        except BaseException as exc:
            ok = False
        say(kind="test", passed=bool(ok))
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
    interpreter running it, else a new ``python`` process): the status and how many tests passed."""
    tests = job["tests"]
    total = len(tests)
    if not job.get("program", "").strip():
        return {"status": "no_code", "passed": 0, "total": total, "detail": "no code", "results": []}
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
        return {"status": "grader_error", "passed": 0, "total": total, "detail": f"cannot start: {exc}"[:200],
                "results": []}
    os.close(write_end)
    deadline = time.monotonic() + time_s
    timed_out = False
    chunks, eof = [], False
    while True:  # read the child's report until it ends (its pipe closed and the child gone) or the time limit
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
            else:
                eof = True
        elif child.poll() is not None:  # gone, the pipe still open: something it left holds it (killed below)
            break
    os.close(read_end)
    _kill_group(child.pid)  # the program's forked children too, when they stayed in its group
    child.wait()
    rows = []
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    results = [r.get("passed") is True for r in rows if r.get("kind") == "test"][:total]
    passed = sum(results)
    kinds = [r.get("kind") for r in rows]
    if "syntax_error" in kinds:
        return {"status": "syntax_error", "passed": 0, "total": total, "detail": rows[0].get("detail", ""),
                "results": []}
    if timed_out or (child.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and "done" not in kinds):
        return {"status": "timeout", "passed": passed, "total": total, "detail": f"over {time_s:g} s",
                "results": results}
    if "done" not in kinds:
        why = next((r.get("detail") for r in rows if r.get("kind") == "error"), None)
        why = why or f"ended before its tests finished (exit {child.returncode})"
        return {"status": "fail", "passed": passed, "total": total, "detail": why, "results": results}
    status = "ok" if passed == total and len(results) == total else "fail"
    return {"status": status, "passed": passed, "total": total, "detail": "", "results": results}


def main() -> None:
    request = json.loads(sys.stdin.read())
    for job in request["jobs"]:
        row = run_one(job, float(request["time_s"]), int(request["memory_mb"]), request["python"],
                      bool(request.get("fork", True)))
        sys.stdout.write(json.dumps(row) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
