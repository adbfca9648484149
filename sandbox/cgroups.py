"""Whole-sandbox limits through Linux control groups: one cgroup per sandbox process holds everything it starts.

A limit on one process (an rlimit) is no limit on a sandbox: three processes of 1.5 GB each pass a 2 GB address
space limit, and a fork bomb passes a per-user process limit. A cgroup counts every process the sandbox starts,
however it starts them, so its limits hold for the sandbox as a whole:

* ``pids.max``  -- processes and threads of the whole sandbox (a fork fails with EAGAIN past it);
* memory        -- ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1): every process's memory *and* the pages
  of the sandbox's tmpfs mounts; past it the kernel's OOM killer ends a process of the sandbox, never one outside;
* kill          -- ``cgroup.kill`` (v2) or SIGKILL to every member until none is left (v1): nothing outlives it.

Both layouts are supported. v1 (separate ``pids`` and ``memory`` hierarchies): the sandbox's cgroups are children
of the cgroups this process runs in, where those are writable. v2 (the unified hierarchy): the kernel's
no-internal-process rule forbids enabling controllers for the children of a cgroup that itself holds processes
(the root cgroup excepted), and this process is in its own cgroup, so sandbox cgroups are placed thus
(:func:`_v2_parent`):

1. the own cgroup (or, for a process in the leaf ``evotrainer-self`` of step 3, that leaf's parent) already has
   ``memory`` and ``pids`` in ``cgroup.subtree_control``: sandbox cgroups are made beside it or in it;
2. at the hierarchy's root (as this process sees it), ``+memory +pids`` is written to its subtree_control;
3. otherwise, when the controllers are delegated to the own cgroup (listed in its ``cgroup.controllers``) and it
   is writable, this process moves into a leaf child ``evotrainer-self`` and then enables ``+memory +pids`` for
   the own cgroup's children; if the kernel refuses (other processes share the cgroup: a shell, a service
   started earlier), the process moves back and the leaf is removed.

Sandbox cgroups are named ``evotrainer-<pid>-<n>``; those left by a process that died are removed the next time
one is made. Where none can be made (no write access to ``/sys/fs/cgroup``, as for most unprivileged users and
containers, controllers not delegated, the cgroup shared), :func:`create` returns None, ``sandbox.confine``
falls back to rlimits, tmpfs sizes and polling, and :func:`explain` says why (``sandbox.confine.run_log`` puts
it in the run log). :func:`create` and :func:`explain` take ``root``, the filesystem root to read ``/proc/self``
and the cgroup mounts under (``tests/test_cgroups.py`` passes a fake tree).

Step 3 changes this process's cgroup for good (it stays in ``evotrainer-self``), and :func:`explain` takes the same
path as :func:`create`: the run process does it when it logs its sandbox (``run.py``), before it starts the trainer
service, whose process would otherwise share the cgroup and make step 3 refuse (the service then gets no cgroups).

Try it alone: ``python -m sandbox.cgroups`` (prints what this machine allows, and why; on a delegated v2 machine
it moves the process into ``evotrainer-self`` as step 3 says).
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

_counter = itertools.count()
_PREFIX = "evotrainer-"
SELF_LEAF = "evotrainer-self"  # v2: the leaf this process moves into so its own cgroup may delegate (step 3)
ROOT = Path("/")
_NEEDED = ("memory", "pids")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _mounts(root: Path) -> tuple[tuple[Path, str] | None, dict[str, tuple[Path, str]]]:
    """The cgroup2 (mount point, mount root), and per v1 controller (pids, memory) its (mount point, mount root)."""
    v2, v1 = None, {}
    for line in _read(root / "proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2" and v2 is None:
            v2 = (root / fields[4].lstrip("/"), fields[3])
        elif tail[0] == "cgroup":
            for name in _NEEDED:
                if name in tail[2].split(","):
                    v1[name] = (root / fields[4].lstrip("/"), fields[3])
    return v2, v1


def _own_paths(root: Path) -> dict[str, str]:
    """This process's cgroup path per v1 controller name, and "" for the v2 hierarchy."""
    out = {}
    for line in _read(root / "proc/self/cgroup").splitlines():
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


def _under(mount: Path, mount_root: str, path: str) -> Path:
    rel = path[len(mount_root):] if mount_root != "/" and path.startswith(mount_root) else path
    return mount / rel.lstrip("/")


def _enabled(directory: Path) -> set[str]:
    return set(_read(directory / "cgroup.subtree_control").split())


@dataclass
class Placement:
    """Where sandbox cgroups are made: ``version`` 2 ({"": dir}) or 1 ({"pids": dir, "memory": dir}), or 0 (none),
    and ``note``: how they were made possible, or why they are not."""

    version: int = 0
    dirs: dict[str, Path] = field(default_factory=dict)
    note: str = ""


def _v2_parent(own: Path, at_root: bool, pid: int) -> tuple[Path | None, str]:
    """The cgroup under which sandbox cgroups get memory and pids on v2 (steps 1-3 above), and how, or why not."""
    needed = set(_NEEDED)
    if own.name == SELF_LEAF and needed <= _enabled(own.parent) and os.access(own.parent, os.W_OK):
        return own.parent, f"cgroup v2: sandbox cgroups under {own.parent} (this process in its leaf {own.name})"
    if needed <= _enabled(own) and os.access(own, os.W_OK):
        return own, f"cgroup v2: sandbox cgroups under {own}"
    delegated = set(_read(own / "cgroup.controllers").split())
    if not needed <= delegated:
        return None, (f"cgroup v2: the {' and '.join(sorted(needed - delegated))} controller(s) are not delegated "
                      f"to {own} (its cgroup.controllers: {' '.join(sorted(delegated)) or 'none'})")
    if not os.access(own, os.W_OK):
        return None, f"cgroup v2: {own} is not writable by this user (no delegation)"
    if at_root:
        try:
            (own / "cgroup.subtree_control").write_text("+memory +pids")
            return own, f"cgroup v2: enabled memory and pids for the children of {own} (the hierarchy's root)"
        except OSError:
            pass  # a namespace's root is no real root: the no-internal-process rule holds, go on to step 3
    leaf = own / SELF_LEAF
    try:
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(pid))
    except OSError as err:
        _leave(own, leaf, pid)
        return None, f"cgroup v2: could not move this process into {leaf} ({err.strerror or err})"
    try:
        (own / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError as err:
        others = [p for p in _read(own / "cgroup.procs").split() if p != str(pid)]
        _leave(own, leaf, pid)
        return None, (f"cgroup v2: could not enable memory and pids for the children of {own} "
                      f"({err.strerror or err}" + (f"; {len(others)} other process(es) share it" if others else "")
                      + ")")
    return own, (f"cgroup v2: moved this process into {leaf} and enabled memory and pids for the children of "
                 f"{own}")


def _leave(own: Path, leaf: Path, pid: int) -> None:
    """Undo step 3: this process back in ``own``, the leaf removed."""
    try:
        (own / "cgroup.procs").write_text(str(pid))
    except OSError:
        pass
    try:
        leaf.rmdir()
    except OSError:
        pass


def _place(root: Path = ROOT) -> Placement:
    """Where this process can make sandbox cgroups (v2 first, then v1), or why it cannot."""
    v2, v1 = _mounts(root)
    own = _own_paths(root)
    why = []
    if v2 and "" in own:
        own_dir = _under(*v2, own[""])
        parent, note = _v2_parent(own_dir, own_dir == v2[0], os.getpid())
        if parent is not None:
            return Placement(2, {"": parent}, note)
        why.append(note)
    if set(_NEEDED) <= set(v1) and set(_NEEDED) <= set(own):
        dirs = {name: _under(*v1[name], own[name]) for name in _NEEDED}
        locked = [str(d) for d in dirs.values() if not os.access(d, os.W_OK)]
        if not locked:
            return Placement(1, dirs, f"cgroup v1: sandbox cgroups under {dirs['pids']} and {dirs['memory']}")
        why.append(f"cgroup v1: {', '.join(locked)} not writable by this user")
    elif v1 or not v2:
        why.append("no cgroup v1 pids and memory hierarchies mounted" if v2 else "no cgroup filesystem mounted")
    return Placement(0, {}, "; ".join(why))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(parent: Path) -> None:
    """Remove sandbox cgroups left by a process that is gone (empty by then: their processes died with it)."""
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(_PREFIX):].split("-")[0]
        if entry.name.startswith(_PREFIX) and pid.isdigit() and not _pid_alive(int(pid)):
            try:
                entry.rmdir()
            except OSError:
                pass


class Cgroup:
    """One sandbox's cgroup (one dir on v2, a pids and a memory dir on v1)."""

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs
        self._kill_file = dirs[""] / "cgroup.kill" if version == 2 else None

    @property
    def _pids_dir(self) -> Path:
        return self.dirs["" if self.version == 2 else "pids"]

    @property
    def _memory_dir(self) -> Path:
        return self.dirs["" if self.version == 2 else "memory"]

    @property
    def procs_files(self) -> list[str]:
        """The files a new process writes its pid into to join (from its pre-exec hook)."""
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]

    def _write(self, name: str, directory: Path, value: str) -> None:
        (directory / name).write_text(value)

    def set_limits(self, memory_bytes: int, max_procs: int) -> None:
        self._write("pids.max", self._pids_dir, str(max_procs))
        if self.version == 2:
            self._write("memory.max", self._memory_dir, str(memory_bytes))
            try:  # no swapping around the limit
                self._write("memory.swap.max", self._memory_dir, "0")
            except OSError:
                pass
        else:
            self._write("memory.limit_in_bytes", self._memory_dir, str(memory_bytes))
            try:
                self._write("memory.memsw.limit_in_bytes", self._memory_dir, str(memory_bytes))
            except OSError:  # no swap accounting on this kernel
                pass

    def _read(self, name: str, directory: Path) -> str:
        try:
            return (directory / name).read_text()
        except OSError:
            return ""

    def pids(self) -> list[int]:
        return sorted({int(p) for d in dict.fromkeys(self.dirs.values())
                       for p in self._read("cgroup.procs", d).split() if p.isdigit()})

    def counters(self) -> dict[str, int]:
        """How often the sandbox hit its limits so far: ``pids`` (forks refused), ``oom`` (processes OOM-killed)."""
        events = self._read("pids.events", self._pids_dir).split()
        pids = int(events[events.index("max") + 1]) if "max" in events else 0
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        memory = self._read(name, self._memory_dir).split()
        oom = int(memory[memory.index("oom_kill") + 1]) if "oom_kill" in memory else 0
        return {"pids": pids, "oom": oom}

    def memory_bytes(self) -> int:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        text = self._read(name, self._memory_dir).strip()
        return int(text) if text.isdigit() else 0

    def kill(self, keep: set[int] | frozenset = frozenset()) -> int:
        """SIGKILL every member (but ``keep``) until none is left, or 2 s have passed; returns how many were seen."""
        seen: set[int] = set()
        if not keep and self._kill_file is not None and self._kill_file.exists():
            seen.update(self.pids())
            try:
                self._kill_file.write_text("1")
            except OSError:
                pass
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            members = [p for p in self.pids() if p not in keep]
            if not members:
                break
            for pid in members:
                seen.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)
        return len(seen)

    def close(self) -> None:
        """Kill what is left and remove the cgroup (waits up to 2 s for the kernel to let go of it)."""
        self.kill()
        for directory in dict.fromkeys(self.dirs.values()):
            for _ in range(200):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def create(memory_bytes: int, max_procs: int, root: Path = ROOT) -> Cgroup | None:
    """A fresh cgroup with these limits for one sandbox, or None where this machine does not let us make one."""
    found = _place(root)
    if not found.version:
        return None
    name = f"{_PREFIX}{os.getpid()}-{next(_counter)}"
    dirs: dict[str, Path] = {}
    try:
        for key, parent in found.dirs.items():
            _remove_stale(parent)
            (parent / name).mkdir()
            dirs[key] = parent / name
        group = Cgroup(found.version, dirs)
        group.set_limits(memory_bytes, max_procs)
        return group
    except OSError:
        for directory in dirs.values():
            try:
                directory.rmdir()
            except OSError:
                pass
        return None


@functools.lru_cache(maxsize=None)
def available() -> str:
    """"cgroup v2" or "cgroup v1" when sandbox cgroups with memory and process limits can be made here, else ""."""
    group = create(64 * 1024 * 1024, 8)
    if group is None:
        return ""
    group.close()
    return f"cgroup v{group.version}"


def explain(root: Path = ROOT) -> str:
    """One line for the run log: where sandbox cgroups are made and how that was made possible, or why none can
    be (the sandbox then falls back to rlimits, tmpfs sizes and polling)."""
    found = _place(root)
    if found.version and (root != ROOT or available()):
        return found.note
    why = found.note or f"a cgroup under {', '.join(map(str, found.dirs.values()))} could not be made"
    return f"no sandbox cgroup: {why}; whole-sandbox limits fall back to rlimits, tmpfs sizes and polling"


if __name__ == "__main__":
    print(explain())
