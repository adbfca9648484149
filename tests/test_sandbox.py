"""The harness sandbox: untrusted harness code runs in a separate, limited process and fails readably.

Every test runs a copy of the seed math harness (harness_repo/math) through a real ``HarnessWorker``; the
core behaviours run on every backend this machine has (bubblewrap and unshare where they work, Docker where a
daemon and the image are there, and the plain ``process`` fallback always), and isolation on each isolating one.
"""

from __future__ import annotations

import shutil
import socket
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pydantic
import pytest

import evotrainer
import sandbox.backends as backends_module
from sandbox import HarnessError, HarnessWorker, SandboxLimits, choose_backend, describe_backend, run_selftest

SEED = Path(__file__).resolve().parents[1] / "harness_repo" / "math"
TASK = {"id": "t1", "difficulty": "1", "question": "What is 4 + 5?", "expression": "4 + 5", "answer": "9"}


def _available(name: str) -> bool:
    try:
        return choose_backend(name) == name
    except RuntimeError:
        return False


BACKENDS = [name for name in ("docker", "bwrap", "unshare", "process") if _available(name)]
ISOLATING = [name for name in BACKENDS if name != "process"]
NAMESPACED = [name for name in BACKENDS if name in ("bwrap", "unshare")]


def sample(completion: str, truncated: bool = False) -> dict:
    return {"prompt": "4+5=", "completion": completion, "task": TASK, "truncated": truncated,
            "completion_tokens": len(completion)}


@pytest.fixture
def harness(tmp_path: Path) -> Path:
    """A fresh copy of the seed math harness."""
    dest = tmp_path / "harness"
    shutil.copytree(SEED, dest)
    return dest


def write(harness: Path, name: str, source: str) -> Path:
    path = harness / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def write_probes(harness: Path) -> None:
    """probes.py: what harness code under test uses to try the sandbox's walls (1.0 = got through)."""
    write(harness, "probes.py", """
        import importlib
        import os

        def _reads(path):
            try:
                with open(path) as f:
                    return float(f.read() != "")
            except OSError:
                return 0.0

        def _lists(path):
            try:
                return float(os.listdir(path) != [])
            except OSError:
                return 0.0

        def _writes(path):
            try:
                with open(path, "a") as f:
                    f.write("pwned")
                return 1.0
            except OSError:
                return 0.0

        def _imports(name, attr="__file__"):  # an empty namespace package (a masked dir) counts as absent
            try:
                module = importlib.import_module(name)
            except Exception:
                return 0.0
            return float(getattr(module, attr, None) is not None)
    """)


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_harness_scores_correct_answer_one_and_wrong_answer_zero(harness: Path, backend: str) -> None:
    with HarnessWorker(harness, backend=backend) as worker:
        assert worker.backend == backend
        assert worker.prompts([TASK]) == ["4+5="]
        assert worker.score([sample("9"), sample("8"), sample("8 9 10")]) == [
            {"correct": 1.0}, {"correct": 0.0}, {"correct": 0.0}]


def test_seed_selftest_passes_every_test(harness: Path) -> None:
    report = run_selftest(harness)
    assert report["failed"] == []
    assert report["n"] == len(report["passed"]) == 5
    assert "tests/test_harness.py::test_known_reward_hack_scores_zero" in report["passed"]


def test_broken_test_file_counts_as_a_failed_selftest(harness: Path) -> None:
    write(harness, "tests/test_broken.py", "import numpy_that_does_not_exist\n")
    write(harness, "tests/test_wrong.py", """
        from rewards import COMPONENTS

        def test_hack_is_rewarded():
            assert COMPONENTS["correct"]({"completion": "8", "task": {"answer": "9"}}) == 1.0
    """)
    report = run_selftest(harness)
    failed = {f["name"]: f["error"] for f in report["failed"]}
    assert set(failed) == {"tests/test_broken.py", "tests/test_wrong.py::test_hack_is_rewarded"}
    assert "test_broken.py:1 ModuleNotFoundError" in failed["tests/test_broken.py"]
    assert "test_wrong.py:5 AssertionError" in failed["tests/test_wrong.py::test_hack_is_rewarded"]
    assert len(report["passed"]) == 5 and report["n"] == 7


@pytest.mark.parametrize("backend", BACKENDS)
def test_reward_exception_names_file_line_and_exception(harness: Path, backend: str) -> None:
    rewards = write(harness, "rewards.py", """
        def _ratio(sample):
            return len(sample["completion"]) / 0

        def correct(sample):
            return _ratio(sample)

        COMPONENTS = {"correct": correct}
    """)
    with HarnessWorker(harness, backend=backend) as worker, pytest.raises(HarnessError) as err:
        worker.score([sample("9")])
    assert str(err.value) == f"rewards.py:{line_of(rewards, '/ 0')} ZeroDivisionError: division by zero"
    assert "Traceback" in err.value.traceback and err.value.op == "score"


def test_import_error_of_a_harness_module_names_file_and_line(harness: Path) -> None:
    write(harness, "rewards.py", "COMPONENTS = {\n    'correct': lambda s: 1.0,,\n}\n")
    with HarnessWorker(harness) as worker:
        with pytest.raises(HarnessError, match=r"^rewards\.py:2 SyntaxError"):
            worker.score([sample("9")])
        assert worker.prompts([TASK]) == ["4+5="]  # other modules still load


def test_non_finite_reward_and_bad_curriculum_are_contract_errors(harness: Path) -> None:
    write(harness, "rewards.py", """
        def correct(sample):
            return float("nan")

        COMPONENTS = {"correct": correct}
    """)
    write(harness, "curriculum.py", """
        def weights(levels, base, history):
            return {"1": 1.0}
    """)
    with HarnessWorker(harness) as worker:
        with pytest.raises(HarnessError, match=r"rewards\.py:2 reward component 'correct' returned nan"):
            worker.score([sample("9")])
        with pytest.raises(HarnessError, match=r"missing \['2'\]"):
            worker.curriculum(["1", "2"], {"1": 1.0, "2": 1.0}, {})


@pytest.mark.parametrize("backend", BACKENDS)
def test_infinite_loop_is_killed_at_the_call_timeout_and_the_worker_recovers(harness: Path, backend: str) -> None:
    write(harness, "rewards.py", """
        def correct(sample):
            while True:
                pass

        COMPONENTS = {"correct": correct}
    """)
    worker = HarnessWorker(harness, backend=backend, limits=SandboxLimits(call_timeout_s=2))
    with worker:
        worker.call("ping")
        stuck = psutil.Process(worker.pid)
        started = time.monotonic()
        with pytest.raises(HarnessError, match=r"^harness call 'score' exceeded 2s and was killed$"):
            worker.score([sample("9")])
        assert time.monotonic() - started < 4
        assert not stuck.is_running()
        shutil.copy(SEED / "rewards.py", harness / "rewards.py")  # the fix
        assert worker.score([sample("9")]) == [{"correct": 1.0}]  # same worker restarts lazily
    with HarnessWorker(harness, backend=backend) as fresh:
        assert fresh.score([sample("8")]) == [{"correct": 0.0}]


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_allocation_fails_under_the_memory_limit(harness: Path, backend: str) -> None:
    write(harness, "rewards.py", """
        def correct(sample):
            hog = bytearray(4 * 1024 ** 3)
            return float(len(hog))

        COMPONENTS = {"correct": correct}
    """)
    rss_before = psutil.Process().memory_info().rss
    with HarnessWorker(harness, backend=backend, limits=SandboxLimits(memory_mb=512)) as worker:
        with pytest.raises(HarnessError, match="MemoryError"):
            worker.score([sample("9")])
        assert worker.call("ping") == "pong"  # the sandbox survived, and so did we
    assert psutil.Process().memory_info().rss - rss_before < 256 * 1024 ** 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_harness_output_does_not_corrupt_the_protocol(harness: Path, backend: str) -> None:
    write(harness, "rewards.py", """
        import os
        import sys

        def correct(sample):
            print('{"ok": true, "result": [{"correct": 99.0}]}')
            sys.stdout.write("no newline")
            os.write(1, b'{"ok": true, "result": "fd1"}\\n')
            print("x" * 200_000, file=sys.stderr)
            return 1.0 if sample["completion"] == sample["task"]["answer"] else 0.0

        COMPONENTS = {"correct": correct}
    """)
    with HarnessWorker(harness, backend=backend) as worker:
        assert worker.score([sample("9"), sample("1")]) == [{"correct": 1.0}, {"correct": 0.0}]
        assert worker.call("ping") == "pong"


@pytest.mark.parametrize("backend", BACKENDS)
def test_secret_environment_variables_do_not_reach_harness_code(
        harness: Path, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOTRAINER_TEST_SECRET", "hunter2")
    write(harness, "rewards.py", """
        import os

        def leaked(sample):
            return float(any("hunter2" in value for value in os.environ.values()))

        COMPONENTS = {"leaked": leaked}
    """)
    with HarnessWorker(harness, backend=backend) as worker:
        assert worker.score([sample("9")]) == [{"leaked": 0.0}]


@pytest.mark.parametrize("backend", ISOLATING or [pytest.param("none", marks=pytest.mark.skip(
    reason="no isolating backend (docker, bwrap, unshare) works on this machine"))])
def test_harness_code_cannot_reach_the_evaluator_the_host_files_or_the_network(
        harness: Path, tmp_path: Path, backend: str) -> None:
    run_dir = tmp_path / "runs" / "current"  # hidden, as callers hide a run directory
    run_dir.mkdir(parents=True)
    (run_dir / "eval_split.jsonl").write_text('{"answer": "42"}\n')
    secret_file = tmp_path / "verifier.key"
    secret_file.write_text("key")
    sibling = tmp_path / "runs" / "other"  # not hidden: still no host path outside the sandbox's view shows
    sibling.mkdir()
    (sibling / "rollouts.jsonl").write_text('{"verified": true}\n')
    outside = tmp_path / "outside"
    outside.mkdir()
    verifier = Path(evotrainer.__file__).resolve().parent / "domains" / "math.py"
    repo_file = Path(evotrainer.__file__).resolve().parents[1] / "pyproject.toml"  # outside the package
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    threading.Thread(target=lambda: server.accept(), daemon=True).start()
    write_probes(harness)
    write(harness, "rewards.py", f"""
        import os
        import socket

        from probes import _imports, _lists, _reads, _writes

        def network(sample):
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
                return 1.0
            except OSError:
                return 0.0

        def capabilities(sample):
            with open("/proc/self/status") as f:
                return float(int(next(l for l in f if l.startswith("CapEff:")).split()[1], 16))

        COMPONENTS = {{
            "run_dir": lambda s: _lists({str(run_dir)!r}) + _reads({str(run_dir / "eval_split.jsonl")!r}),
            "secret_file": lambda s: _reads({str(secret_file)!r}),
            "sibling": lambda s: _lists({str(sibling)!r}) + _reads({str(sibling / "rollouts.jsonl")!r}),
            "verifier_source": lambda s: _reads({str(verifier)!r}),
            "repo_file": lambda s: _reads({str(repo_file)!r}),
            "verifier_import": lambda s: _imports("evotrainer.domains.math")
                                         + _imports("sandbox.worker", "HarnessWorker"),
            "write_outside": lambda s: _writes({str(outside / "pwned.txt")!r}),
            "write_harness": lambda s: _writes({str(harness / "pwned.py")!r})
                                       + _writes({str(harness / "rewards.py")!r}),
            "write_workdir": lambda s: _writes("scratch.txt") + _writes(os.path.join(os.environ["HOME"], "x")),
            "stdlib_and_site_packages": lambda s: _imports("json", "dumps") + _imports("yaml", "safe_load")
                                                  + _imports("numpy", "ndarray"),
            "network": network,
            "capabilities": capabilities,
        }}
    """)
    rewards_before = (harness / "rewards.py").read_text()
    try:
        with HarnessWorker(harness, backend=backend, hide=[run_dir, secret_file]) as worker:
            assert worker.score([sample("9")]) == [{
                "run_dir": 0.0, "secret_file": 0.0, "sibling": 0.0, "verifier_source": 0.0, "repo_file": 0.0,
                "verifier_import": 0.0, "write_outside": 0.0, "write_harness": 0.0, "write_workdir": 2.0,
                "stdlib_and_site_packages": 1.0 if backend == "docker" else 3.0,  # the image is stdlib only
                "network": 0.0, "capabilities": 0.0}]
        assert worker.backend == backend and describe_backend(backend).startswith(backend)
    finally:
        server.close()
    assert (run_dir / "eval_split.jsonl").exists()  # hidden from the harness, untouched for us
    assert list(outside.iterdir()) == [] and not (harness / "pwned.py").exists()
    assert (harness / "rewards.py").read_text() == rewards_before


@pytest.mark.parametrize("backend", NAMESPACED or [pytest.param("none", marks=pytest.mark.skip(
    reason="neither bwrap nor unshare works on this machine"))])
def test_masks_inside_visible_paths_hold_and_cannot_be_undone(
        harness: Path, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hidden paths and the framework package are masked even where they lie inside a path the sandbox shows
    (here the harness dir; in real use e.g. an evotrainer installed in site-packages)."""
    (harness / "private").mkdir()
    (harness / "private" / "answers.txt").write_text("42")
    (harness / "key.txt").write_text("key")
    (harness / "fakepkg").mkdir()
    (harness / "fakepkg" / "__init__.py").write_text("SECRET = 42\n")
    monkeypatch.setattr(backends_module, "_framework_paths", lambda: [str(harness / "fakepkg")])
    write(harness, "rewards.py", f"""
        import ctypes
        import os

        def private(sample):
            libc = ctypes.CDLL(None, use_errno=True)
            masks = [path.encode() for path in ({str(harness / "private")!r}, {str(harness / "key.txt")!r})]
            for path in masks:
                libc.umount2(path, 2)  # MNT_DETACH: fails without capabilities
            libc.unshare(0x10000000 | 0x00020000)  # a user + mount namespace of its own, all capabilities in it
            for path in masks:
                libc.umount2(path, 2)  # fails too: the kernel locks the mounts copied into it
            return float(len(os.listdir({str(harness / "private")!r})))

        def key(sample):
            try:
                return float(len(open({str(harness / "key.txt")!r}).read()))
            except OSError:  # bwrap's /dev/null over a hidden file is on a nodev mount: unreadable
                return 0.0

        def package(sample):
            try:
                import fakepkg
            except ImportError:
                return 0.0
            return float(getattr(fakepkg, "SECRET", 0))

        COMPONENTS = {{"private": private, "key": key, "package": package}}
    """)
    hide = [harness / "private", harness / "key.txt"]
    # audit off: the kernel's masks must hold for code that got past the audit hook (which denies ctypes)
    with HarnessWorker(harness, backend=backend, hide=hide, audit=False) as worker:
        assert worker.score([sample("9")]) == [{"private": 0.0, "key": 0.0, "package": 0.0}]
    assert (harness / "private" / "answers.txt").read_text() == "42"


@pytest.mark.parametrize("layout", ["checkout", "installed"])
@pytest.mark.parametrize("backend", NAMESPACED or [pytest.param("none", marks=pytest.mark.skip(
    reason="neither bwrap nor unshare works on this machine"))])
def test_harness_code_cannot_read_the_framework_and_the_runner_still_runs(
        harness: Path, backend: str, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """evotrainer/, agents/ and every module of the sandbox package but runner.py are out of harness code's
    reach: in this source checkout (outside every path the sandbox shows), and in an installed layout where
    they lie inside a shown dir such as site-packages (simulated by a copy inside the harness dir)."""
    here = Path(backends_module.__file__).resolve().parent
    if layout == "checkout":
        site = Path(evotrainer.__file__).resolve().parents[1]
        packages = ("evotrainer", "agents")
    else:
        site = harness / "site"
        packages = ("fake_evotrainer", "fake_agents")
        for name in packages:
            write(site, f"{name}/__init__.py", "SECRET = 42\n")
            write(site, f"{name}/core.py", "SECRET = 42\n")
        shutil.copytree(here, site / "sandbox", ignore=shutil.ignore_patterns("__pycache__"))
        write(site, "sandbox/__pycache__/worker.cpython-311.pyc", "compiled framework code")
        monkeypatch.syspath_prepend(str(site))  # where find_spec finds the fake packages
        monkeypatch.setattr(backends_module, "_FRAMEWORK_PACKAGES", packages)
        monkeypatch.setattr(backends_module, "_HERE", site / "sandbox")
        here = site / "sandbox"
    secrets = [str(site / name / "__init__.py") for name in packages]
    secrets += [str(here / name) for name in ("__init__.py", "worker.py", "backends.py", "limits.py")]
    secrets += [str(here / "__pycache__" / "worker.cpython-311.pyc")] if layout == "installed" else []
    assert all(Path(path).is_file() for path in secrets)
    write_probes(harness)
    write(harness, "rewards.py", f"""
        import sys

        from probes import _imports, _reads

        def framework(sample):
            return sum(_reads(path) for path in {secrets!r})

        def imports(sample):
            sys.path.insert(0, {str(site)!r})
            return sum(_imports(f"{{name}}.core", "SECRET") for name in {packages!r}) \\
                + _imports("sandbox.worker", "HarnessWorker")

        def runner(sample):
            return _reads({str(here / "runner.py")!r})

        COMPONENTS = {{"framework": framework, "imports": imports, "runner": runner}}
    """)
    with HarnessWorker(harness, backend=backend) as worker:
        assert worker.score([sample("9")]) == [{"framework": 0.0, "imports": 0.0, "runner": 1.0}]


def test_sandbox_limits_defaults_copy_and_help() -> None:
    """SandboxLimits is nested in the user config: typed, bounded, and every field explained."""
    assert SandboxLimits().model_dump() == {"memory_mb": 2048, "cpu_s": 300, "call_timeout_s": 60,
                                            "file_size_mb": 64, "max_procs": 64, "tmpfs_mb": 256,
                                            "scratch_mb": 256, "cgroup": True}
    assert SandboxLimits().model_copy(update={"call_timeout_s": 5}).call_timeout_s == 5
    for name, field in SandboxLimits.model_fields.items():
        assert field.description and len(field.description.split()) >= 5, f"{name} has no help text"


@pytest.mark.parametrize("bad, message", [
    ({"memory_mb": 0}, "memory_mb\n  Input should be greater than or equal to 64"),
    ({"cpu_s": 0}, "cpu_s\n  Input should be greater than or equal to 1"),
    ({"call_timeout_s": 0}, "call_timeout_s\n  Input should be greater than 0"),
    ({"file_size_mb": -1}, "file_size_mb\n  Input should be greater than or equal to 1"),
    ({"max_procs": "many"}, "max_procs\n  Input should be a valid integer"),
    ({"memory": 512}, "memory\n  Extra inputs are not permitted"),
])
def test_sandbox_limits_reject_bad_values_readably(bad: dict, message: str) -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        SandboxLimits(**bad)
    assert message in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_leaves_no_process_behind(harness: Path, backend: str) -> None:
    write(harness, "rewards.py", """
        import subprocess

        def correct(sample):
            subprocess.Popen(["sleep", "300"])  # a straggler the harness forgot about
            subprocess.Popen(["sleep", "301"], start_new_session=True)  # one that left the process group
            return 1.0

        COMPONENTS = {"correct": correct}
    """)
    before = {p.pid for p in descendants()}
    worker = HarnessWorker(harness, backend=backend, audit=False)  # the audit hook would deny the Popen
    assert worker.score([sample("9")]) == [{"correct": 1.0}]
    spawned = [p for p in descendants() if p.pid not in before]
    assert sum("sleep" in p.name() for p in spawned) == 2
    worker.close()
    _, alive = psutil.wait_procs(spawned, timeout=5)
    assert alive == []


def test_filter_keeps_rollouts_only_in_kept_groups(harness: Path) -> None:
    write(harness, "filters.py", """
        def keep_rollout(rollout):
            return 1 if not rollout["truncated"] else 0  # truthy ints must come back as bools

        def keep_group(group):
            return len({r["reward"] for r in group}) > 1  # drop groups with no reward spread
    """)
    mixed = [dict(sample("9"), reward=1.0), dict(sample("8", truncated=True), reward=0.0),
             dict(sample("7"), reward=0.0)]
    dead = [dict(sample("1"), reward=0.0), dict(sample("2"), reward=0.0)]
    with HarnessWorker(harness) as worker:
        flags = worker.filter([mixed, dead])
    assert flags == [[True, False, True], [False, False]]
    assert all(type(flag) is bool for group in flags for flag in group)


def test_one_broken_diagnostic_does_not_hide_the_others(harness: Path) -> None:
    diagnostics = harness / "diagnostics.py"
    diagnostics.write_text(diagnostics.read_text() + textwrap.dedent("""

        @metric("broken", max=1.0, help="always fails")
        def broken(rollouts):
            return 1 / 0
    """))
    rollouts = [dict(sample("9"), kept=True), dict(sample("8", truncated=True), kept=False)]
    with HarnessWorker(harness) as worker:
        report = worker.diagnostics(rollouts)
    assert report["kept_fraction"] == {"value": 0.5, "min": 0.05, "max": None,
                                       "help": "share of rollouts the filters let train", "error": None}
    assert report["truncation_rate"]["value"] == 0.5
    assert report["broken"]["value"] is None and report["broken"]["max"] == 1.0
    line = line_of(diagnostics, "1 / 0")
    assert report["broken"]["error"] == f"diagnostics.py:{line} ZeroDivisionError: division by zero"


def test_five_megabyte_payload_round_trips(harness: Path) -> None:
    big = "1+" * (5 * 1024 * 1024 // 2) + "1"
    tasks = [dict(TASK, expression=big), TASK]
    with HarnessWorker(harness, limits=SandboxLimits(call_timeout_s=20)) as worker:
        started = time.monotonic()
        prompts = worker.prompts(tasks)
        elapsed = time.monotonic() - started
    assert prompts == [big + "=", "4+5="]
    assert elapsed < 10


def test_unknown_op_is_an_error_and_the_worker_keeps_serving(harness: Path) -> None:
    with HarnessWorker(harness) as worker:
        with pytest.raises(HarnessError, match="unknown op 'bogus'"):
            worker.call("bogus")
        assert worker.call("ping") == "pong"


def test_crash_and_cpu_limit_are_readable_errors_and_the_worker_recovers(harness: Path) -> None:
    write(harness, "rewards.py", """
        import os

        def correct(sample):
            if sample["completion"] == "crash":
                os._exit(3)
            if sample["completion"] == "spin":
                while True:
                    pass
            return 1.0

        COMPONENTS = {"correct": correct}
    """)
    with HarnessWorker(harness, limits=SandboxLimits(cpu_s=1, call_timeout_s=10)) as worker:
        with pytest.raises(HarnessError, match=r"crashed: sandbox process died \(exit status 3\)"):
            worker.score([sample("crash")])
        started = time.monotonic()
        with pytest.raises(HarnessError, match=r"SIGXCPU \(CPU limit of 1s\)"):
            worker.score([sample("spin")])
        assert time.monotonic() - started < 5  # the CPU limit, not the 10 s call timeout, stopped it
        assert worker.score([sample("9")]) == [{"correct": 1.0}]


def test_worker_started_from_a_short_lived_thread_survives_the_thread(harness: Path) -> None:
    worker = HarnessWorker(harness)
    thread = threading.Thread(target=worker.call, args=("ping",))
    thread.start()
    thread.join()
    time.sleep(0.2)  # a child tied to the dead thread by PR_SET_PDEATHSIG would be gone by now
    pid = worker.pid
    with worker:
        assert pid is not None
        assert worker.score([sample("9")]) == [{"correct": 1.0}]
        assert worker.pid == pid
