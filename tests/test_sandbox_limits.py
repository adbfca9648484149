"""Whole-sandbox limits, measured: processes, memory, /tmp and scratch hold for the sandbox as a whole.

Harness code here runs with ``audit=False`` (no in-process audit hook, which would deny the forks outright): what
is measured is the enforcement beneath it -- a cgroup where this machine lets us make one, else rlimits in a user
namespace, tmpfs sizes and polling (``sandbox/confine.py``). Each test runs on every available backend, with the
cgroup and (where one is made) without it, and checks that the mechanism ``enforcement()`` names for the run log
is the one that held. Scaled down to stay fast: 32 processes, 512 MiB, 64 MiB of /tmp and scratch
(``python benchmarks/sandbox_limits.py`` measures the full-size figures: a 200-process fork bomb, 3 x 1.5 GB,
1.5 GB written). Docker is tested where a daemon is reachable.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import psutil
import pytest

from sandbox import HarnessError, HarnessWorker, SandboxLimits, choose_backend, cgroups
from sandbox.confine import enforcement
from sandbox.container import container_spec
from sandbox.backends import _docker_available, DEFAULT_IMAGE

SEED = Path(__file__).resolve().parents[1] / "harness_repo" / "math"
TASK = {"id": "t1", "difficulty": "1", "question": "", "expression": "4 + 5", "answer": "9"}
SAMPLE = {"prompt": "4+5=", "completion": "9", "task": TASK, "truncated": False, "completion_tokens": 1}


def _available(name: str) -> bool:
    try:
        return choose_backend(name) == name
    except RuntimeError:
        return False


# the strongest mode of each backend runs in the fast suite; without the cgroup (where there is one), with -m slow
MODES = [pytest.param(b, c, id=f"{b}-{'cgroup' if c else 'no-cgroup'}",
                      marks=pytest.mark.slow if cgroups.available() and not c else ())
         for b in ("bwrap", "unshare", "process") if _available(b)
         for c in ((True, False) if cgroups.available() else (False,))]
LIMITS = SandboxLimits(memory_mb=512, max_procs=32, tmpfs_mb=64, scratch_mb=64, file_size_mb=1024,
                       call_timeout_s=30, cpu_s=120)


# probes: harness code that tries to take more than its share (NPROCS processes, 3 x MIB MiB, MIB MiB written to PATH)
FORK_BOMB = """
    import os, time

    def m(sample):
        started = 0
        for _ in range(NPROCS):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            started += 1
        time.sleep(1)  # hold them: a polled limit gets to see them
        return float(started)

    COMPONENTS = {"m": m}
"""
MEMORY = """
    import os, time

    def m(sample):
        pids = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                try:
                    block = b"\\1" * (MIB * 1024 * 1024)
                    time.sleep(2)
                    os._exit(0 if block else 1)
                except MemoryError:
                    os._exit(3)
            pids.append(pid)
        done = 0
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            done += os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        return float(done)

    COMPONENTS = {"m": m}
"""


def harness_with(tmp_path: Path, body: str) -> Path:
    harness = tmp_path / "harness"
    shutil.copytree(SEED, harness)
    (harness / "rewards.py").write_text(textwrap.dedent(body))
    return harness


def measure(harness: Path, backend: str, cgroup: bool) -> tuple[float | None, str, list[dict]]:
    """(what the reward returned or None, the error if the call failed, the attempts); no process left after."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    worker = HarnessWorker(harness, backend=backend, limits=LIMITS.model_copy(update={"cgroup": cgroup}),
                           audit=False)
    try:
        value, error = worker.score([SAMPLE])[0]["m"], ""
    except HarnessError as err:
        value, error = None, str(err)
    finally:
        worker.close()
    left = [psutil.Process(p) for p in {p.pid for p in psutil.Process().children(recursive=True)} - before
            if psutil.pid_exists(p)]
    assert psutil.wait_procs(left, timeout=5)[1] == [], "processes outlived the sandbox"
    return value, error, worker.attempts


@pytest.mark.parametrize("backend, cgroup", MODES)
def test_a_fork_bomb_is_held_to_the_sandbox_process_limit(tmp_path: Path, backend: str, cgroup: bool) -> None:
    harness = harness_with(tmp_path, FORK_BOMB.replace("NPROCS", "200"))
    value, error, attempts = measure(harness, backend, cgroup)
    how = enforcement(backend, LIMITS.model_copy(update={"cgroup": cgroup}))["processes"]
    if "polled" in how:
        assert value is None and "processes, over the sandbox's limit of 32" in error, (value, error)
    else:
        assert value is not None and value <= LIMITS.max_procs, (how, value, error)
    if "cgroup" in how:
        assert any(a["kind"] == "limit" and "process limit" in a["what"] for a in attempts), attempts


@pytest.mark.slow  # 900 MiB of allocations per mode
@pytest.mark.parametrize("backend, cgroup", MODES)
def test_three_processes_together_are_held_to_the_sandbox_memory_limit(tmp_path: Path, backend: str,
                                                                        cgroup: bool) -> None:
    """Each of three processes stays under the 512 MiB per-process limit; together (900 MiB) they do not."""
    harness = harness_with(tmp_path, MEMORY.replace("MIB", "300"))
    value, error, attempts = measure(harness, backend, cgroup)
    how = enforcement(backend, LIMITS.model_copy(update={"cgroup": cgroup}))["memory"]
    if "polled" in how:
        assert value is None and "over the sandbox's memory limit of 512 MiB" in error, (value, error)
    else:  # the kernel killed at least one of them (or the runner itself)
        assert value is None or value < 3, (how, value, error)
        assert any(a["kind"] == "limit" and "memory limit" in a["what"] for a in attempts), attempts


WRITE = """
    import os

    def m(sample):
        fd = os.open(PATH, os.O_WRONLY | os.O_CREAT)
        written = 0
        try:
            while written < MIB:
                os.write(fd, b"\\0" * (1024 * 1024))
                written += 1
            import time
            time.sleep(1)
        except OSError:
            pass
        return float(written)

    COMPONENTS = {"m": m}
"""


@pytest.mark.parametrize("backend, cgroup", MODES)
def test_writing_to_tmp_is_held_to_its_size(tmp_path: Path, backend: str, cgroup: bool) -> None:
    if backend == "process":
        pytest.skip("process backend: /tmp is the host's, NOT ENFORCED (enforcement() says so in the run log)")
    value, error, _ = measure(harness_with(tmp_path, WRITE.replace("PATH", "'/tmp/fill'").replace("MIB", "256")), backend, cgroup)
    assert value is not None and value <= LIMITS.tmpfs_mb, (value, error)


@pytest.mark.parametrize("backend, cgroup", MODES)
def test_writing_to_scratch_is_held_to_its_size(tmp_path: Path, backend: str, cgroup: bool) -> None:
    value, error, _ = measure(harness_with(tmp_path, WRITE.replace("PATH", "'fill'").replace("MIB", "256")), backend, cgroup)
    if backend == "process":  # the scratch dir is on the host's disk: polled
        assert value is None and "scratch dir, over the sandbox's limit" in error, (value, error)
    else:
        assert value is not None and value <= LIMITS.scratch_mb, (value, error)


def test_the_run_log_says_how_each_backend_enforces_each_limit() -> None:
    for backend in ("docker", "bwrap", "unshare", "process"):
        how = enforcement(backend, SandboxLimits())
        assert set(how) == {"processes", "memory", "tmpfs", "scratch", "wall"}
    assert enforcement("process", SandboxLimits())["tmpfs"].startswith("NOT ENFORCED")
    assert "--pids-limit" in enforcement("docker", SandboxLimits())["processes"]
    from sandbox.confine import run_log

    line = run_log("process", SandboxLimits(), DEFAULT_IMAGE)["cgroup"]  # where cgroups are made, or why none can be
    assert line.startswith("no sandbox cgroup: ") != bool(cgroups.available()), line
    assert "cgroup" not in run_log("process", SandboxLimits(cgroup=False), DEFAULT_IMAGE)
    if cgroups.available():
        assert "pids.max" in enforcement("bwrap", SandboxLimits())["processes"]
        assert "polled" in enforcement("bwrap", SandboxLimits(cgroup=False))["memory"]


def test_a_sandbox_cgroup_is_removed_with_its_sandbox(tmp_path: Path) -> None:
    if not cgroups.available():
        pytest.skip("no cgroup can be made on this machine")
    worker = HarnessWorker(SEED, backend="process", limits=LIMITS)
    worker.call("ping")
    dirs = list(worker._slot.process.confinement.cgroup.dirs.values())
    assert all(d.is_dir() for d in dirs) and worker._slot.process.pid in worker._slot.process.confinement.cgroup.pids()
    worker.close()
    assert not any(d.exists() for d in dirs)


def test_the_docker_container_has_no_network_read_only_mounts_and_the_limits() -> None:
    """The container's settings (checked without a daemon): what the docker backend asks the daemon for."""
    spec = container_spec("/h", "/src/sandbox/runner.py", LIMITS, "img", "n")
    assert spec["network_mode"] == "none" and spec["read_only"] and spec["cap_drop"] == ["ALL"]
    assert all(m["read_only"] for m in spec["mounts"])
    assert {m["target"] for m in spec["mounts"]} == {"/harness", "/sandbox/runner.py", "/sandbox/guard.py",
                                                     "/sandbox/frames.py"}
    assert spec["mem_limit"] == spec["memswap_limit"] == 512 * 1024 * 1024 and spec["pids_limit"] == 32
    assert "size=64m" in spec["tmpfs"]["/tmp"] and "size=64m" in spec["tmpfs"]["/scratch"]
    assert spec["user"] != "0" and "no-new-privileges" in spec["security_opt"]


@pytest.mark.skipif(not _docker_available(DEFAULT_IMAGE), reason="no Docker daemon reachable here (or the docker "
                    "package or the evotrainer-sandbox image is missing): the docker backend cannot be measured")
def test_docker_backend_holds_every_limit(tmp_path: Path) -> None:
    bomb = harness_with(tmp_path / "a", FORK_BOMB.replace("NPROCS", "200"))
    value, _, _ = measure(bomb, "docker", False)
    assert value is not None and value <= LIMITS.max_procs
    for path, limit in (("'/tmp/fill'", LIMITS.tmpfs_mb), ("'fill'", LIMITS.scratch_mb)):
        (tmp_path / path.strip("'/")).mkdir()
        value, error, _ = measure(harness_with(tmp_path / path.strip("'/"), WRITE.replace("PATH", path).replace("MIB", "256")), "docker",
                                  False)
        assert value is not None and value <= limit, (value, error)
