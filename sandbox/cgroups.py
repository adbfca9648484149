"""Whole-sandbox limits through Linux control groups: one cgroup per sandbox process holds everything it starts.

A limit on one process (an rlimit) is no limit on a sandbox: three processes of 1.5 GB each pass a 2 GB address
space limit, and a fork bomb passes a per-user process limit. A cgroup counts every process the sandbox starts,
however it starts them, so its limits hold for the sandbox as a whole:

* ``pids.max``  -- processes and threads of the whole sandbox (a fork fails with EAGAIN past it);
* memory        -- ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1): every process's memory *and* the pages
  of the sandbox's tmpfs mounts; past it the kernel's OOM killer ends a process of the sandbox, never one outside;
* kill          -- ``cgroup.kill`` (v2) or SIGKILL to every member until none is left (v1): nothing outlives it.

Both layouts are supported: v2 (the unified hierarchy, where the ``memory`` and ``pids`` controllers are enabled
for the cgroup we run in, i.e. delegated to us) and v1 (separate ``pids`` and ``memory`` hierarchies). The
sandbox's cgroup is made beside nothing else: a child of the cgroup this process runs in, named
``evotrainer-<pid>-<n>``; those left by a process that died are removed the next time one is made. Where no
cgroup can be made (no write access to ``/sys/fs/cgroup``, as for most unprivileged users and containers),
:func:`create` returns None and ``sandbox.confine`` falls back to rlimits, tmpfs sizes and polling.

Try it alone: ``python -m sandbox.cgroups`` (prints what this machine allows).
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import time
from pathlib import Path

_counter = itertools.count()
_PREFIX = "evotrainer-"


def _mounts() -> tuple[str | None, dict[str, tuple[str, str]]]:
    """The cgroup2 mount point, and per v1 controller (pids, memory) its (mount point, mount root)."""
    v2, v1 = None, {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None, {}
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2" and v2 is None:
            v2 = fields[4]
        elif tail[0] == "cgroup":
            for name in ("pids", "memory"):
                if name in tail[2].split(","):
                    v1[name] = (fields[4], fields[3])
    return v2, v1


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller name, and "" for the v2 hierarchy."""
    out = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


def _under(mount: str, root: str, path: str) -> Path:
    rel = path[len(root):] if root != "/" and path.startswith(root) else path
    return Path(mount) / rel.lstrip("/")


def _parents() -> tuple[int, dict[str, Path]] | None:
    """Where sandbox cgroups can be made: (2, {"": dir}) or (1, {"pids": dir, "memory": dir}), else None."""
    v2, v1 = _mounts()
    own = _own_paths()
    if v2 and "" in own:
        parent = _under(v2, "/", own[""])
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            enabled = []
        if {"memory", "pids"} <= set(enabled) and os.access(parent, os.W_OK):
            return 2, {"": parent}
    if {"pids", "memory"} <= set(v1) and {"pids", "memory"} <= set(own):
        dirs = {name: _under(*v1[name], own[name]) for name in ("pids", "memory")}
        if all(os.access(d, os.W_OK) for d in dirs.values()):
            return 1, dirs
    return None


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


def create(memory_bytes: int, max_procs: int) -> Cgroup | None:
    """A fresh cgroup with these limits for one sandbox, or None where this machine does not let us make one."""
    found = _parents()
    if found is None:
        return None
    version, parents = found
    name = f"{_PREFIX}{os.getpid()}-{next(_counter)}"
    dirs: dict[str, Path] = {}
    try:
        for key, parent in parents.items():
            _remove_stale(parent)
            (parent / name).mkdir()
            dirs[key] = parent / name
        group = Cgroup(version, dirs)
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


if __name__ == "__main__":
    print(available() or "no cgroup can be made here: whole-sandbox limits fall back to rlimits, tmpfs sizes and "
          "polling")
