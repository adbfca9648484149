"""The policy-code executor: runs code the *policy* wrote against tests, apart from the harness sandbox (``sandbox/``).

Policy code that loops, eats memory, forks or exits early is the policy's failure, scored as such, not an attack by
the harness, so it runs here and never in-process: :func:`run_batch` is called once per generated batch and starts
one fresh worker process (``evotrainer/domains/execute_worker.py``, standard library only) for the whole batch;
the worker runs each program in a child of its own with a time limit, an address-space limit (RLIMIT_AS) and a
CPU limit, its
process group killed and reaped after it. Where this machine allows unprivileged namespaces (``unshare``) the worker
runs in its own user, network and PID namespaces: no network, and every process a program leaves behind dies with
the worker; otherwise (``process``) only the limits and the group kill hold. The worker makes itself undumpable and
each child drops every capability, so a program cannot open the worker's pipes through ``/proc`` and write answers
of its own; a program that kills its worker (same user: only under ``process``) fails, and its batch runs on
(:func:`_one_worker`).

Each execution has a status (:data:`STATUSES`): ``ok`` (every test passed), ``fail`` (a test failed, the program
raised or ended before its tests did), ``timeout``, ``syntax_error``, ``no_code`` and ``grader_error`` -- the
executor itself failed (the worker could not start, died with no program to blame, or answered nonsense): never a
wrong answer; callers count
it and leave it out of scores. A call test's expected value stays in this process (the worker gets the call alone and
reports what it returned; :func:`_passes` compares): a program can read anything in the process it runs in, and a
body that returned the expected value it found there (in its caller's frame, among the objects the garbage collector
lists) passed every test, hidden ones included. Try it alone::

    python -m evotrainer.domains.execute   # runs three programs and prints their executions
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.domains.execute_worker import ENV

STATUSES = ("ok", "fail", "timeout", "syntax_error", "no_code", "grader_error")
NO_TEST_RAN = ("syntax_error", "no_code", "grader_error")  # statuses of a run that reached no test
_WORKER = Path(__file__).with_name("execute_worker.py")
_UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]


class ExecLimits(BaseModel):
    """Limits of one policy program (each program of a batch gets them afresh)."""

    model_config = ConfigDict(extra="forbid")

    time_s: float = Field(2.0, gt=0, le=60, description="wall-clock (and CPU) seconds one program may run, its "
                          "definition and all its tests together; over it the program's group is killed: timeout")
    memory_mb: int = Field(256, ge=32, le=8192, description="address-space limit (RLIMIT_AS) of one program, in MiB")
    backend: Literal["auto", "unshare", "process"] = Field(
        "auto", description="isolation of the batch worker: unshare (own user, network and PID namespaces: no "
        "network, nothing outlives the batch), process (limits and group kill only: a program runs as this user, "
        "so the user's other processes are as open to it as this machine's ptrace policy leaves them), auto: "
        "unshare where it works")
    workers: int = Field(
        0, ge=0, le=64, description="batch workers run side by side, each on its share of a batch's programs (the "
        "trainer waits while they run, so its cores are free); 0 = one per CPU core")


@dataclass(frozen=True)
class Execution:
    """One program's run: its status (:data:`STATUSES`), tests passed of ``total``, a short reason, and each test's
    pass in order as far as the program got (``results``: shorter than ``total`` when it stopped early)."""

    status: str
    passed: int
    total: int
    detail: str = ""
    results: tuple[bool, ...] = ()

    def as_dict(self) -> dict:
        """What harness code and the rollout store see: status, passed, total, detail."""
        return {k: v for k, v in asdict(self).items() if k != "results"}

    @property
    def stopped(self) -> bool:
        """The program ran but stopped before its last test (a timeout, an early exit, an error at definition)."""
        return len(self.results) < self.total and self.status not in NO_TEST_RAN

    @property
    def verdict(self) -> bool | None:
        """Every test passed; None when the executor itself failed (a grader error: never a wrong answer)."""
        return None if self.status == "grader_error" else self.status == "ok"

    def part(self, start: int, stop: int) -> Execution:
        """The execution of tests ``start:stop`` alone, read off this run of them all (tests run in order, so a part
        that finished reads as its own run would have): ok when each of its tests ran and passed, fail when one of
        them ran and failed, else (the program never reached them) this run's status and reason. An empty part is
        ok once the program's definition ran (the run is ok or a test ran)."""
        own, n = self.results[start:stop], stop - start
        reached = len(own) == n and (n > 0 or self.status == "ok" or bool(self.results))
        if reached and self.status not in NO_TEST_RAN:
            return Execution("ok" if all(own) else "fail", sum(own), n, "", own)
        if not all(own):
            return Execution("fail", sum(own), n, "", own)
        return Execution(self.status, sum(own), n, self.detail, own)


Job = tuple[str | None, list[dict]]  # (program or None for no code, tests: [{"call": "f(2)", "expected": 5}, ...])


@functools.lru_cache(maxsize=None)
def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run([*_UNSHARE, sys.executable, "-I", "-c", ""], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def backend_of(limits: ExecLimits) -> str:
    """The backend a batch runs under: ``limits.backend``, with auto resolved; an unshare this machine refuses is
    a ValueError."""
    if limits.backend == "process":
        return "process"
    if _unshare_works():
        return "unshare"
    if limits.backend == "unshare":
        raise ValueError("policy executor backend 'unshare' does not work on this machine (use auto or process)")
    return "process"


def run_batch(jobs: list[Job], limits: ExecLimits | None = None, python: str | None = None,
              fork: bool = True) -> list[Execution]:
    """Run every (program, tests) pair of one batch in one fresh worker; one :class:`Execution` per job, in order.
    ``python`` is the interpreter the programs run under (default: this one); ``fork`` forks each program's child
    from the worker rather than starting a new interpreter (the same limits; off only to measure the difference:
    ``benchmarks/executor_throughput.py``). A job that repeats an earlier one of the batch (the same program and
    tests: a GRPO group often samples one body several times) runs once and each copy gets its execution. Never
    raises for what a program does: a failure of the executor itself is ``grader_error`` on each job it left
    unanswered."""
    limits = limits or ExecLimits()
    out: list[Execution | None] = [None] * len(jobs)
    first: dict[str, int] = {}  # a job's text -> the index of its first copy, the one that runs
    copies: dict[int, int] = {}
    todo = []
    for i, (program, tests) in enumerate(jobs):
        if program is None or not program.strip():
            out[i] = Execution("no_code", 0, len(tests), "no code")
            continue
        key = json.dumps([program, tests], sort_keys=True)
        if key in first:
            copies[i] = first[key]
        else:
            first[key] = i
            todo.append(i)
    if todo:
        answers = _run_worker([jobs[i] for i in todo], limits, python or sys.executable, fork)
        for i, answer in zip(todo, answers):
            out[i] = answer
    for i, j in copies.items():
        out[i] = out[j]
    return [e for e in out if e is not None]


def _run_worker(jobs: list[Job], limits: ExecLimits, python: str, fork: bool = True) -> list[Execution]:
    """The batch split among ``limits.workers`` workers run side by side (contiguous shares, answers in order)."""
    n = min(limits.workers or os.cpu_count() or 1, len(jobs))
    if n <= 1:
        return _one_worker(jobs, limits, python, fork)
    size = -(-len(jobs) // n)
    shares = [jobs[k:k + size] for k in range(0, len(jobs), size)]
    with ThreadPoolExecutor(len(shares)) as pool:  # each thread only waits on its worker process
        return [e for answers in pool.map(lambda share: _one_worker(share, limits, python, fork), shares)
                for e in answers]


def _passes(outcome: dict, test: dict) -> bool:
    """Whether a test passed: a script test as the worker saw it; a call when it returned a value of exactly the
    expected type equal to the expected value (compared here: the worker never sees it)."""
    if "exec" in test:
        return outcome.get("passed") is True
    if "value" not in outcome:
        return False
    expected, got = test["expected"], outcome["value"]
    return type(got) is type(expected) and got == expected


def _judged(status: str, detail: str, outcomes: list, tests: list[dict]) -> Execution:
    """The worker's answer for one job, judged against the tests' expected values: ``ok`` only when every test ran
    (the worker's ``ok``) and passed."""
    results = tuple(isinstance(o, dict) and _passes(o, t) for o, t in zip(outcomes, tests))
    if status == "ok" and not (len(results) == len(tests) and all(results)):
        status = "fail"
    return Execution(status, sum(results), len(tests), detail, results)


def _blind(test: dict) -> dict:
    """A test as the worker gets it: without its expected value (the program shares the worker's memory)."""
    return {k: v for k, v in test.items() if k != "expected"}


def _one_worker(jobs: list[Job], limits: ExecLimits, python: str, fork: bool = True) -> list[Execution]:
    """One worker's share. A worker that ends before answering every job (a program may kill it: it runs as the same
    user) is not the end of its share: the job it was on runs again alone in a fresh worker, and when that worker
    dies too while a trivial program runs (the executor works), the program is what ended it: ``fail``; the jobs
    after it run in a fresh worker. Only a failure of the executor itself leaves ``grader_error``."""
    answers: list[Execution] = []
    while len(answers) < len(jobs):
        got, error = _worker_answers(jobs[len(answers):], limits, python, fork)
        answers += got
        if len(answers) == len(jobs):
            break
        culprit = jobs[len(answers)]
        alone, alone_error = _worker_answers([culprit], limits, python, fork)
        if alone:
            answers += alone
            continue
        canary, _ = _worker_answers([("def f():\n    return 1", [{"call": "f()", "expected": 1}])], limits, python,
                                    fork)
        if not (canary and canary[0].status == "ok"):  # the executor itself fails: nothing here is a program's doing
            return answers + [Execution("grader_error", 0, len(t), (error or alone_error)[:200])
                              for _, t in jobs[len(answers):]]
        answers.append(Execution("fail", 0, len(culprit[1]), f"the program ended its executor ({alone_error})"[:200]))
    return answers


def _worker_answers(jobs: list[Job], limits: ExecLimits, python: str,
                    fork: bool = True) -> tuple[list[Execution], str]:
    """One fresh worker over ``jobs``: the executions it answered, in order (an unreadable row is ``grader_error``),
    and why it stopped short ("" when it answered every job)."""
    request = {"jobs": [{"program": p, "tests": [_blind(t) for t in tests]} for p, tests in jobs],
               "time_s": limits.time_s, "fork": fork, "memory_mb": limits.memory_mb, "python": python}
    prefix = _UNSHARE if backend_of(limits) == "unshare" else []
    budget = len(jobs) * (limits.time_s + 2.0) + 10.0  # each program's limit plus its start and reaping
    error = ""
    try:
        done = subprocess.run([*prefix, python, "-I", "-B", str(_WORKER)], input=json.dumps(request).encode(),
                              capture_output=True, timeout=budget, start_new_session=True, env=ENV)
        lines = done.stdout.decode(errors="replace").splitlines()
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()
            error = f"worker exited {done.returncode}: {tail[-1] if tail else 'no message'}"
    except subprocess.TimeoutExpired as exc:  # the session's group is killed by run(); unshare's namespace with it
        lines = (exc.stdout or b"").decode(errors="replace").splitlines()
        error = f"worker ran past {budget:g} s"
    except OSError as exc:
        lines, error = [], f"worker could not start: {exc}"
    answers = []
    for line, (_, tests) in zip(lines, jobs):
        try:
            row = json.loads(line)
            if row["status"] not in STATUSES or int(row["total"]) != len(tests):
                raise ValueError(row["status"])
            answers.append(_judged(row["status"], str(row["detail"]), list(row["outcomes"]), tests))
        except (ValueError, KeyError, TypeError, RecursionError):  # a value nested past what json reads
            answers.append(Execution("grader_error", 0, len(tests), f"unreadable worker answer: {line[:80]!r}"))
    if len(answers) == len(jobs):
        return answers, ""
    return answers, error or "worker answered fewer jobs than it was given"


def count_statuses(executions: list[Execution]) -> dict[str, int]:
    """How many executions ended in each status (every status named, zeros included)."""
    return {s: sum(1 for e in executions if e.status == s) for s in STATUSES}


if __name__ == "__main__":
    tests = [{"call": "f(2)", "expected": 5}, {"call": "f(7)", "expected": 10}]
    runs = run_batch([("def f(x):\n    return x + 3", tests), ("def f(x):\n    while True: pass", tests),
                      ("def f(x):\n    print(5)", tests)], ExecLimits(time_s=1))
    print(backend_of(ExecLimits()), *runs, count_statuses(runs), sep="\n")
