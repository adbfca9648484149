"""Where sandbox cgroups are made (``sandbox/cgroups.py``), on fake cgroup filesystems for both layouts.

Each test builds the files the kernel would show under a fake root (``proc/self/mountinfo``, ``proc/self/cgroup``,
the cgroup folders with their ``cgroup.controllers``, ``cgroup.subtree_control`` and ``cgroup.procs``) and passes
that root to the module, which reads and writes only beneath it. Plain files cannot act as the kernel does (a
write that the no-internal-process rule refuses with EBUSY, a cgroup.procs that lists what moved): where a test
needs the kernel's answer it writes it by hand, as noted. A real cgroup v2 run cannot be done on this machine: it
mounts the v1 hierarchies (hybrid) and its unified hierarchy holds only the hugetlb controller, so memory and pids
can never be enabled there; the real v1 path is exercised by ``tests/test_sandbox_limits.py`` (a fork bomb held
to pids.max, a sandbox cgroup removed with its sandbox).
"""

from __future__ import annotations

import os
from pathlib import Path

from sandbox import cgroups

MIB = 1024 * 1024
PID = str(os.getpid())
OWN = 10**9  # a counter value this process never reaches (the suite makes real cgroups too: 77 was reached)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def proc(root: Path, mounts: list[str], own: list[str]) -> None:
    """``/proc/self/mountinfo`` (lines "ROOT MOUNTPOINT - TYPE OPTIONS") and ``/proc/self/cgroup`` of the fake."""
    write(root / "proc/self/mountinfo", "".join(
        f"{30 + i} 23 0:{40 + i} {m.split(' - ')[0]} rw,relatime - {m.split(' - ')[1]}\n" for i, m in enumerate(mounts)))
    write(root / "proc/self/cgroup", "".join(line + "\n" for line in own))


# --- v1 ---------------------------------------------------------------------------------------------------------
HYBRID = ["/ /sys/fs/cgroup/pids - cgroup cgroup rw,pids", "/ /sys/fs/cgroup/memory - cgroup cgroup rw,memory",
          "/ /sys/fs/cgroup/unified - cgroup2 cgroup2 rw"]


def test_v1_sandbox_cgroups_are_children_of_the_own_cgroups_with_the_limits(tmp_path: Path) -> None:
    """A hybrid machine (as this one): v1 pids and memory, and a unified hierarchy without those controllers."""
    root = tmp_path
    proc(root, HYBRID, ["8:pids:/", "4:memory:/jobs/abc", "0::/"])
    write(root / "sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n")
    pids, memory = root / "sys/fs/cgroup/pids", root / "sys/fs/cgroup/memory/jobs/abc"
    memory.mkdir(parents=True)
    pids.mkdir(parents=True)
    (pids / "evotrainer-4194305-0").mkdir()  # left by a process that is gone (beyond any pid_max): removed
    (pids / f"evotrainer-{PID}-{OWN}").mkdir()  # this process's: kept

    group = cgroups.create(64 * MIB, 8, root=root)
    assert group is not None and group.version == 1
    assert group.dirs["pids"].parent == pids and group.dirs["memory"].parent == memory
    name = group.dirs["pids"].name
    assert name.startswith(f"evotrainer-{PID}-") and name != f"evotrainer-{PID}-{OWN}"
    assert (group.dirs["pids"] / "pids.max").read_text() == "8"
    assert (group.dirs["memory"] / "memory.limit_in_bytes").read_text() == str(64 * MIB)
    assert not (pids / "evotrainer-4194305-0").exists() and (pids / f"evotrainer-{PID}-{OWN}").is_dir()
    assert sorted(group.procs_files) == sorted(str(d / "cgroup.procs") for d in group.dirs.values())
    # what the kernel counts, as it writes it
    write(group.dirs["pids"] / "pids.events", "max 3\n")
    write(group.dirs["memory"] / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    write(group.dirs["memory"] / "memory.usage_in_bytes", "1048576\n")
    assert group.counters() == {"pids": 3, "oom": 2} and group.memory_bytes() == MIB
    note = cgroups.explain(root)
    assert note.startswith("cgroup v1: sandbox cgroups under") and str(memory) in note


def test_v1_paths_inside_a_container_go_through_the_mount_root(tmp_path: Path) -> None:
    """A container without its own cgroup namespace: the mounts show the container's subtree (root /docker/c1) and
    /proc/self/cgroup the full path."""
    root = tmp_path
    proc(root, ["/docker/c1 /sys/fs/cgroup/pids - cgroup cgroup rw,pids",
                "/docker/c1 /sys/fs/cgroup/memory - cgroup cgroup rw,memory"],
         ["3:pids:/docker/c1/job", "2:memory:/docker/c1/job"])
    for name in ("pids", "memory"):
        (root / "sys/fs/cgroup" / name / "job").mkdir(parents=True)
    group = cgroups.create(32 * MIB, 4, root=root)
    assert group is not None and group.dirs["memory"].parent == root / "sys/fs/cgroup/memory/job"


def test_no_cgroup_filesystem_says_so(tmp_path: Path) -> None:
    proc(tmp_path, [], ["0::/"])
    assert cgroups.create(32 * MIB, 4, root=tmp_path) is None
    assert cgroups.explain(tmp_path).startswith("no sandbox cgroup: no cgroup filesystem mounted")


# --- v2 ---------------------------------------------------------------------------------------------------------
UNIFIED = ["/ /sys/fs/cgroup - cgroup2 cgroup2 rw,nsdelegate"]


def v2_own(root: Path, path: str, controllers: str = "cpu io memory pids", subtree: str = "",
           procs: str = PID) -> Path:
    """This process in the v2 cgroup ``path``, delegated ``controllers``, enabled ``subtree`` for its children."""
    proc(root, UNIFIED, [f"0::{path}"])
    own = root / "sys/fs/cgroup" / path.lstrip("/")
    write(own / "cgroup.controllers", controllers + "\n")
    write(own / "cgroup.subtree_control", subtree + "\n")
    write(own / "cgroup.procs", procs + "\n")
    return own


def test_v2_a_delegated_cgroup_moves_this_process_into_a_leaf_then_delegates(tmp_path: Path) -> None:
    """The no-internal-process rule: the own cgroup holds this process, so it first moves into evotrainer-self;
    then memory and pids are enabled for the own cgroup's children, where the sandbox cgroups go."""
    own = v2_own(tmp_path, "/user.slice/app.scope")
    group = cgroups.create(64 * MIB, 8, root=tmp_path)
    assert group is not None and group.version == 2 and group.dirs[""].parent == own
    assert (own / cgroups.SELF_LEAF / "cgroup.procs").read_text() == PID  # moved first...
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"  # ...then delegated
    assert (group.dirs[""] / "memory.max").read_text() == str(64 * MIB)
    assert (group.dirs[""] / "pids.max").read_text() == "8" and (group.dirs[""] / "memory.swap.max").read_text() == "0"
    assert group.procs_files == [str(group.dirs[""] / "cgroup.procs")]

    # what the kernel shows afterwards: this process in the leaf, the controllers on for the own cgroup's children
    write(tmp_path / "proc/self/cgroup", f"0::/user.slice/app.scope/{cgroups.SELF_LEAF}\n")
    write(own / "cgroup.subtree_control", "memory pids\n")
    write(own / cgroups.SELF_LEAF / "cgroup.procs", "sentinel")
    again = cgroups.create(64 * MIB, 8, root=tmp_path)
    assert again is not None and again.dirs[""].parent == own and again.dirs[""] != group.dirs[""]
    assert (own / cgroups.SELF_LEAF / "cgroup.procs").read_text() == "sentinel"  # not moved again
    assert "this process in its leaf" in cgroups.explain(tmp_path)
    write(again.dirs[""] / "memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    write(again.dirs[""] / "memory.current", "2097152\n")
    assert again.counters()["oom"] == 1 and again.memory_bytes() == 2 * MIB


def test_v2_when_the_kernel_refuses_this_process_moves_back_and_limits_fall_back(tmp_path: Path) -> None:
    """Another process shares the own cgroup (a shell): enabling controllers fails (EBUSY on a real kernel; here
    the file cannot be written), this process goes back where it was, the leaf is removed, nothing is made."""
    own = v2_own(tmp_path, "/user.slice/session.scope", procs=f"1234\n{PID}")
    (own / "cgroup.subtree_control").unlink()
    (own / "cgroup.subtree_control").mkdir()  # any write to it fails
    assert cgroups.create(64 * MIB, 8, root=tmp_path) is None
    assert (own / "cgroup.procs").read_text() == PID  # moved back (a kernel then lists every member again)
    # only the leaf is left, held by the fake's plain cgroup.procs file (a kernel's leaf, empty again, is removed)
    assert [p.name for p in own.iterdir() if p.name.startswith("evotrainer-")] == [cgroups.SELF_LEAF]
    write(own / "cgroup.procs", f"1234\n{PID}\n")  # what the kernel lists once this process is back
    note = cgroups.explain(tmp_path)
    assert note.startswith("no sandbox cgroup: cgroup v2: could not enable memory and pids for the children of")
    assert "1 other process(es) share it" in note and note.endswith("fall back to rlimits, tmpfs sizes and polling")


def test_v2_without_the_controllers_delegated_nothing_moves(tmp_path: Path) -> None:
    own = v2_own(tmp_path, "/user.slice/app.scope", controllers="cpu io")
    assert cgroups.create(64 * MIB, 8, root=tmp_path) is None
    assert not (own / cgroups.SELF_LEAF).exists() and (own / "cgroup.subtree_control").read_text() == "\n"
    assert "memory and pids controller(s) are not delegated" in cgroups.explain(tmp_path)


def test_v2_already_delegated_or_at_the_root_needs_no_move(tmp_path: Path) -> None:
    own = v2_own(tmp_path / "a", "/svc.service", subtree="memory pids")  # e.g. a unit started in a leaf already
    group = cgroups.create(64 * MIB, 8, root=tmp_path / "a")
    assert group is not None and group.dirs[""].parent == own and not (own / cgroups.SELF_LEAF).exists()

    top = v2_own(tmp_path / "b", "/")  # the hierarchy's root is exempt from the no-internal-process rule
    group = cgroups.create(64 * MIB, 8, root=tmp_path / "b")
    assert group is not None and group.dirs[""].parent == top and not (top / cgroups.SELF_LEAF).exists()
    assert (top / "cgroup.subtree_control").read_text() == "+memory +pids"


def test_this_machine_explains_what_it_allows() -> None:
    """The real root: the run log's line agrees with what the sandbox uses."""
    note = cgroups.explain()
    assert note.startswith(cgroups.available() + ":") if cgroups.available() else note.startswith("no sandbox cgroup")
