"""The policy-code executor (evotrainer/domains/execute.py): every way a program misbehaves ends in its status, the
batch always finishes, and a failure of the executor itself is a grader_error, never a wrong answer."""

from __future__ import annotations

import time

import pytest

from evotrainer.domains.execute import ExecLimits, count_statuses, run_batch

TESTS = [{"call": "f(2)", "expected": 5}, {"call": "f(7)", "expected": 10}]
FAST = ExecLimits(time_s=1.0, memory_mb=256)


def _status(program: str | None, limits: ExecLimits = FAST) -> str:
    return run_batch([(program, TESTS)], limits)[0].status


def test_a_right_body_passes_and_a_wrong_one_fails():
    right, wrong = run_batch([("def f(x):\n    return x + 3", TESTS), ("def f(x):\n    return x + 2", TESTS)], FAST)
    assert (right.status, right.passed, wrong.status, wrong.passed) == ("ok", 2, "fail", 0)


def test_an_infinite_loop_times_out_and_the_batch_still_finishes():
    start = time.monotonic()
    loop, after = run_batch([("def f(x):\n    while True:\n        pass", TESTS),
                             ("def f(x):\n    return x + 3", TESTS)], FAST)
    assert (loop.status, after.status) == ("timeout", "ok")
    assert time.monotonic() - start < 10


def test_too_much_memory_is_stopped():
    assert _status("def f(x):\n    b = bytearray(1 << 30)\n    return x + 3") == "fail"


@pytest.mark.parametrize("backend", ["auto", "process"])
def test_forked_children_are_not_left_behind(tmp_path, backend):
    marker = tmp_path / "survived"
    program = (f"import os, time\nif os.fork() == 0:\n    time.sleep(1.5)\n    open({str(marker)!r}, 'w').close()\n"
               f"    os._exit(0)\ndef f(x):\n    return x + 3")
    assert run_batch([(program, TESTS)], FAST.model_copy(update={"backend": backend}))[0].status == "ok"
    time.sleep(2.0)
    assert not marker.exists()


def test_printing_what_the_test_expects_does_not_pass():
    assert _status("def f(x):\n    print(5)\n    print(10)") == "fail"


def test_an_object_equal_to_everything_does_not_pass():
    assert _status("class A:\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return A()") == "fail"


def test_exiting_early_does_not_pass():
    assert _status("import os\nos._exit(0)\ndef f(x):\n    return x + 3") == "fail"
    assert _status("def f(x):\n    import os\n    os._exit(0)") == "fail"


def test_syntax_errors_and_missing_code_have_their_own_status():
    assert (_status("def f(x) return x"), _status(None), _status("  \n")) == ("syntax_error", "no_code", "no_code")


def test_a_broken_executor_is_a_grader_error_never_a_wrong_answer():
    runs = run_batch([("def f(x):\n    return x + 3", TESTS)] * 2, FAST, python="/nonexistent/python3")
    assert count_statuses(runs)["grader_error"] == 2


def test_a_forked_child_and_a_new_interpreter_give_every_program_the_same_execution():
    """Each program's child is forked from the batch worker by default (no interpreter start); a new interpreter
    (``fork=False``) must give the same status and passes for every way a program ends, and neither can import a
    third-party package (as ``python -S``)."""
    programs = ["def f(x):\n    return x + 3", "def f(x):\n    return x + 2", "def f(x):\n    return 1 // 0",
                "def f(x):\n    return (", "def f(x):\n    while True:\n        pass",
                "import os\nos._exit(0)", "def f(x):\n    b = bytearray(1 << 30)\n    return x + 3",
                "def f(x):\n    print(5)\n    print(10)", "import pytest\ndef f(x):\n    return x + 3", None]
    jobs = [(p, TESTS) for p in programs]
    forked, spawned = run_batch(jobs, FAST), run_batch(jobs, FAST, fork=False)
    assert [(e.status, e.passed) for e in forked] == [(e.status, e.passed) for e in spawned]
    assert [e.status for e in forked] == ["ok", "fail", "fail", "syntax_error", "timeout", "fail", "fail", "fail",
                                          "fail", "no_code"]


def test_policy_code_sees_none_of_the_caller_s_environment(monkeypatch):
    """The batch worker starts with a scrubbed environment (``execute_worker.ENV``), so a forked program, like a spawned one,
    cannot read the caller's variables (an API key, the trainer token) and hashes with a fixed seed."""
    monkeypatch.setenv("EVO_SECRET", "hunter2")
    program = ("import os\ndef f(x):\n    assert 'EVO_SECRET' not in os.environ and "
               "os.environ.get('PYTHONHASHSEED') == '0'\n    return x + 3")
    for fork in (True, False):
        assert run_batch([(program, TESTS)], FAST, fork=fork)[0].status == "ok", fork


def test_a_repeated_job_runs_once_and_every_copy_gets_its_execution(monkeypatch):
    from evotrainer.domains import execute

    given: list[int] = []
    real = execute._run_worker

    def counting(jobs, *args, **kwargs):
        given.append(len(jobs))
        return real(jobs, *args, **kwargs)

    monkeypatch.setattr(execute, "_run_worker", counting)
    right, wrong = "def f(x):\n    return x + 3", "def f(x):\n    return x + 2"
    other = [{"call": "f(1)", "expected": 3}]  # the same program on other tests is another job
    runs = run_batch([(right, TESTS), (wrong, TESTS), (right, TESTS), (right, other), (wrong, TESTS)], FAST)
    assert [(e.status, e.passed, e.total) for e in runs] == [("ok", 2, 2), ("fail", 0, 2), ("ok", 2, 2),
                                                              ("fail", 0, 1), ("fail", 0, 2)]
    assert given == [3]


def test_workers_side_by_side_give_every_program_the_execution_one_worker_gives(monkeypatch):
    from evotrainer.domains import execute

    shares: list[int] = []
    real = execute._one_worker
    monkeypatch.setattr(execute, "_one_worker", lambda jobs, *a, **k: shares.append(len(jobs)) or real(jobs, *a, **k))
    programs = ["def f(x):\n    return x + 3", "def f(x):\n    while True:\n        pass", "def f(x):\n    print(5)",
                "def f(x):\n    return x +", "def f(x):\n    raise ValueError", "def f(x):\n    return 5"]
    jobs = [(p + f"\n# {k}", TESTS) for k, p in enumerate(programs)]  # no two alike: each one runs
    one = run_batch(jobs, ExecLimits(time_s=1.0, memory_mb=256, workers=1))
    three = run_batch(jobs, ExecLimits(time_s=1.0, memory_mb=256, workers=3))
    assert shares == [6, 2, 2, 2]  # one worker took the whole batch, then three took a share each
    assert [(e.status, e.passed) for e in three] == [(e.status, e.passed) for e in one]
    assert [e.status for e in one] == ["ok", "timeout", "fail", "syntax_error", "fail", "fail"]


def test_a_part_of_a_run_reads_as_its_own_run_would():
    tests = [{"call": f"f({x})", "expected": x + 1} for x in range(4)]
    right, stops, broken, undefined = run_batch(
        [("def f(x):\n    return x + 1", tests), ("def f(x):\n    return x + 1 if x < 2 else __import__('os')._exit(0)", tests),
         ("def f(x):\n    return 1 // 0 + x", tests), ("def f(x):\n    return x\n1 // 0", tests)], ExecLimits(time_s=1))
    assert right.results == (True,) * 4 and right.part(1, 3).status == "ok" and right.part(4, 4).status == "ok"
    assert stops.part(0, 2).status == "ok" and stops.part(2, 4).status == "fail" and stops.part(2, 4).passed == 0
    assert broken.part(0, 2).status == "fail" and broken.part(2, 2).status == "ok"  # its definition ran
    assert undefined.part(2, 2).status == "fail"  # its definition raised: not even an empty part ran
    assert "results" not in right.as_dict()


@pytest.mark.parametrize("body", [
    "__import__('sys')._getframe(2).f_locals['expected']",  # the caller's frame
    "next(t['expected'] for l in __import__('gc').get_objects() if type(l) is list for t in l "
    "if type(t) is dict and t.get('call') == f'f({x})')",  # the worker's memory, which the forked child shares
    "[__import__('os').write(fd, b'{\"kind\": \"test\", \"passed\": true}\\n' * 9 + b'{\"kind\": \"done\"}\\n') "
    "for fd in range(3, 64) if fd > 2 and not __import__('os').isatty(fd) and __import__('stat').S_ISFIFO("
    "__import__('os').fstat(fd).st_mode)] and __import__('os')._exit(0)",  # passes written to the report pipe
])
def test_a_program_cannot_find_or_forge_what_a_test_expects(body):
    """Expected values never reach the program's process, and what the worker reads from the program's report is
    its return values, compared outside it: reading the caller's frame, the process's memory or forging the report
    passes no test (these bodies passed every test, hidden ones included, before the expected values left it)."""
    tests = [{"call": "f(3)", "expected": 17}, {"call": "f(11)", "expected": -4}]
    (run,) = run_batch([(f"def f(x):\n    return {body}\n", tests)], ExecLimits(time_s=2))
    assert run.passed == 0 and run.status != "ok", run


def test_only_a_value_of_exactly_the_expected_type_passes():
    tests = [{"call": "f(1)", "expected": 2}, {"call": "f(1)", "expected": [1, 2]}, {"call": "f(1)", "expected": "a"}]
    bodies = {"2": [True, False, False], "2.0": [False, False, False], "True": [False, False, False],
              "type('I', (int,), {})(2)": [False, False, False], "[1, 2]": [False, True, False],
              "(1, 2)": [False, False, False], "'a'": [False, False, True], "'a' * 70000": [False, False, False]}
    runs = run_batch([(f"def f(x):\n    return {b}\n", tests) for b in bodies], ExecLimits(time_s=2))
    assert [list(r.results) for r in runs] == list(bodies.values())


# a program that writes a passing row of its own into the worker's answers (through /proc), then one that kills it
_FORGE_ROW = ("import os, json\nw = open('/proc/%d/fd/1' % os.getppid(), 'w')\n"
              "w.write(json.dumps({'status': 'ok', 'total': 2, 'detail': '',"
              " 'outcomes': [{'value': 5}, {'value': 10}]})"
              " + '\\n')\nw.flush()\ndef f(x):\n    return 0")
_KILL_WORKER = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef f(x):\n    return 0"


@pytest.mark.parametrize("backend", ["auto", "process"])
@pytest.mark.parametrize("attack", [_FORGE_ROW, _KILL_WORKER], ids=["forge-a-row", "kill-the-worker"])
def test_a_program_can_neither_write_the_worker_s_answers_nor_cost_its_batch_a_verdict(backend, attack):
    """The worker is undumpable and the child holds no capability, so its pipes are closed to the program (a forged
    row passed the forger and shifted every later row onto the wrong program); a worker killed by a program (same
    user, under ``process``) costs that program a fail and nobody else anything (the rest of its batch were
    grader errors)."""
    right, wrong = "def f(x):\n    return x + 3", "def f(x):\n    return x"
    limits = FAST.model_copy(update={"backend": backend, "workers": 1})
    runs = run_batch([(right, TESTS), (attack, TESTS), (wrong, TESTS), (right + "\n", TESTS)], limits)
    assert [r.status for r in runs] == ["ok", "fail", "fail", "ok"], runs
    assert runs[1].passed == 0
