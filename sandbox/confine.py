"""Whole-sandbox limits and the kernel's evidence: what one sandbox may use, and what it tried, counted outside it.

Every limit of ``SandboxLimits`` holds for the sandbox as a whole (all its processes together), by the strongest
mechanism the machine and the backend allow (:func:`enforcement` says which, for the run log):

    limit       cgroup (any backend but docker)   without a cgroup                      docker
    processes   pids.max                          RLIMIT_NPROC set inside the user      --pids-limit
                                                  namespace (bwrap, unshare; not as
                                                  root, who is exempt), else polled
    memory      memory limit, tmpfs pages too     the process tree's RSS polled, kill   --memory
    /tmp        tmpfs size (bwrap --size, unshare mount -o size); process: the host's /tmp, NOT limited
    scratch     a tmpfs of that size (bwrap, unshare, docker); process: its size polled, kill
    wall        every call has a time limit and the whole sandbox is killed at it; processes a call leaves
                running are killed by the runner (their subreaper) when the call ends

Polling looks every ``POLL_S`` seconds while a call runs; a sandbox past a limit is killed and the call fails
naming the limit. After each call :meth:`Confinement.evidence` reads what the kernel counted, which harness code
cannot forge: limits hit (``pids.events``, OOM kills), processes still running besides the runner, and, for a
sandbox with its own network namespace, any packet or connection it tried (``/proc/<pid>/net/snmp``). Try it alone: ``python -m sandbox.confine``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import sandbox.cgroups as cgroups
from sandbox.limits import SandboxLimits
from sandbox.processes import POLL_S

MIB = 1024 * 1024
_NET_COUNTERS = {"Ip": ("OutRequests", "OutNoRoutes", "OutDiscards"),
                 "Tcp": ("ActiveOpens", "PassiveOpens", "AttemptFails", "OutSegs"),
                 "Udp": ("OutDatagrams", "NoPorts", "SndbufErrors"), "Icmp": ("OutMsgs",)}
_NET6_COUNTERS = ("Ip6OutRequests", "Ip6OutNoRoutes", "Udp6OutDatagrams")
NAMESPACED = ("bwrap", "unshare")
_CHAIN = {"process": 1, "bwrap": 3, "unshare": 3}  # processes of an idle sandbox: launcher(s) and the runner


def _nproc_in_userns() -> bool:
    """RLIMIT_NPROC set inside a user namespace counts that namespace's processes, except for root (exempt)."""
    return os.geteuid() != 0


def enforcement(backend: str, limits: SandboxLimits) -> dict[str, str]:
    """Per limit, its value and how ``backend`` enforces it on this machine ("NOT ENFORCED: ..." where it cannot)."""
    group = cgroups.available() if limits.cgroup and backend != "docker" else ""
    procs, mem = f"{limits.max_procs} processes", f"{limits.memory_mb} MiB"
    out = {}
    if backend == "docker":
        out["processes"] = f"{procs} (container --pids-limit)"
        out["memory"] = f"{mem} (container --memory, tmpfs included)"
    elif group:
        out["processes"] = f"{procs} ({group} pids.max, whole sandbox)"
        out["memory"] = f"{mem} ({group} memory limit, whole sandbox, tmpfs included)"
    else:
        nproc = backend in NAMESPACED and _nproc_in_userns()
        out["processes"] = f"{procs} (" + ("RLIMIT_NPROC inside the sandbox's user namespace" if nproc else
                                          f"polled every {POLL_S:g} s, sandbox killed past it") + ")"
        out["memory"] = f"{mem} (RSS of the process tree polled every {POLL_S:g} s, sandbox killed past it; " \
                        f"plus {limits.memory_mb} MiB address space per process)"
    if backend == "process":
        out["tmpfs"] = "NOT ENFORCED: /tmp is the host's (writes there are denied by the audit hook only)"
        out["scratch"] = f"{limits.scratch_mb} MiB (size polled every {POLL_S:g} s, sandbox killed past it)"
    else:
        out["tmpfs"] = f"/tmp {limits.tmpfs_mb} MiB (tmpfs size)"
        out["scratch"] = f"{limits.scratch_mb} MiB (tmpfs size)"
    out["wall"] = (f"{limits.call_timeout_s:g} s per call, whole sandbox killed at it; processes left running "
                   "after a call are killed")
    return out


def run_log(preference: str, limits: SandboxLimits, image: str) -> dict:
    """What the run log says of the sandbox: the backend ``preference`` resolves to, what it isolates, and how it
    enforces each limit (``enforcement``); an unavailable explicit backend says so instead of raising."""
    from sandbox.backends import choose_backend, describe_backend

    try:
        backend = choose_backend(preference, image)
    except (RuntimeError, ValueError) as err:
        return {"backend": preference, "error": str(err)}
    out = {"backend": backend, "isolation": describe_backend(backend), "limits": enforcement(backend, limits)}
    if limits.cgroup and backend != "docker":  # where sandbox cgroups are made and how, or why none can be
        out["cgroup"] = cgroups.explain()
    return out


class Confinement:
    """The whole-sandbox limits of one sandbox process (its cgroup, or polling), and the kernel's evidence."""

    def __init__(self, backend: str, limits: SandboxLimits, workdir: str) -> None:
        self.backend, self.limits, self.workdir = backend, limits, workdir
        use = limits.cgroup and backend != "docker"
        self.cgroup = cgroups.create(limits.memory_mb * MIB, limits.max_procs) if use else None
        polled = self.cgroup is None and backend != "docker"
        self.nproc = polled and backend in NAMESPACED and _nproc_in_userns()
        self.poll_memory = polled
        self.poll_procs = polled and not self.nproc
        self.poll_scratch = backend == "process"
        self._counters = self.cgroup.counters() if self.cgroup else {"pids": 0, "oom": 0}
        self._net_pid: int | None = None
        self._net_seen = 0
        self._next_poll = 0.0

    def runner_args(self) -> list[str]:
        """Options for runner.py: RLIMIT_NPROC from inside the user namespace, where that is the mechanism."""
        return ["--max-procs", str(self.limits.max_procs)] if self.nproc else []

    @property
    def join_files(self) -> list[str]:
        return self.cgroup.procs_files if self.cgroup else []

    # ------------------------------------------------------------------ while a call runs
    def poll(self, root: int) -> str | None:
        """Called often while a call runs: a message when the sandbox is past a polled limit (then kill it)."""
        if not (self.poll_memory or self.poll_procs or self.poll_scratch):
            return None
        now = time.monotonic()
        if now < self._next_poll:
            return None
        self._next_poll = now + POLL_S
        procs = _tree(root)
        if self.poll_procs and len(procs) > self.limits.max_procs + 3:  # + the backend's own launcher processes
            return f"ran {len(procs)} processes, over the sandbox's limit of {self.limits.max_procs}"
        if self.poll_memory:
            rss = sum(_rss(p) for p in procs)
            if rss > self.limits.memory_mb * MIB:
                return (f"used {rss / MIB:.0f} MiB in {len(procs)} processes, over the sandbox's memory limit "
                        f"of {self.limits.memory_mb} MiB")
        if self.poll_scratch:
            size = _du(self.workdir, self.limits.scratch_mb * MIB)
            if size > self.limits.scratch_mb * MIB:
                return f"wrote over {self.limits.scratch_mb} MiB to its scratch dir, over the sandbox's limit"
        return None

    def start_call(self) -> None:
        self._next_poll = time.monotonic() + POLL_S  # short calls never pay for a poll

    # ------------------------------------------------------------------ after a call
    def evidence(self, root: int) -> list[dict]:
        """What the kernel counted since the last call: limits hit, network activity. Attempts, as the runner's."""
        out = []
        if self.cgroup is not None:
            now = self.cgroup.counters()
            if now["pids"] > self._counters["pids"]:
                out.append({"kind": "limit", "what": f"hit the sandbox's process limit ({self.limits.max_procs}): "
                            f"{now['pids'] - self._counters['pids']} fork(s) refused", "where": ""})
            if now["oom"] > self._counters["oom"]:
                out.append({"kind": "limit", "what": f"hit the sandbox's memory limit ({self.limits.memory_mb} MiB):"
                            f" the kernel killed {now['oom'] - self._counters['oom']} process(es)", "where": ""})
            self._counters = now
        alive = len(self.cgroup.pids()) if self.cgroup is not None else len(_tree(root))
        if alive > _CHAIN.get(self.backend, alive):  # the runner kills what a call leaves, unless it was tampered
            out.append({"kind": "process", "what": f"{alive - _CHAIN[self.backend]} process(es) of the sandbox still "
                        "running after the call (counted outside it)", "where": ""})
        if self.backend in NAMESPACED:
            seen = self._network(root)
            if seen > self._net_seen:
                out.append({"kind": "network", "what": f"the sandbox's network namespace counted "
                            f"{seen - self._net_seen} packet(s) or connection attempt(s)", "where": ""})
                self._net_seen = seen
        return out

    def _network(self, root: int) -> int:
        """Activity counters of the sandbox's own network namespace (a process of it found once, then kept)."""
        if self._net_pid is None or not os.path.exists(f"/proc/{self._net_pid}"):
            self._net_pid = None
            try:
                own = os.readlink("/proc/self/ns/net")
                for pid in _tree(root):
                    if os.readlink(f"/proc/{pid}/ns/net") != own:
                        self._net_pid = pid
                        break
            except OSError:
                return self._net_seen
            if self._net_pid is None:
                return self._net_seen
        total = 0
        try:
            lines = Path(f"/proc/{self._net_pid}/net/snmp").read_text().splitlines()
            for head, values in zip(lines[::2], lines[1::2]):
                name, *keys = head.split()
                wanted = _NET_COUNTERS.get(name.rstrip(":"), ())
                total += sum(int(v) for k, v in zip(keys, values.split()[1:]) if k in wanted)
            for line in Path(f"/proc/{self._net_pid}/net/snmp6").read_text().splitlines():
                key, _, value = line.partition(" ")
                total += int(value) if key in _NET6_COUNTERS else 0
        except (OSError, ValueError):
            return self._net_seen
        return total

    # ------------------------------------------------------------------ the end
    def kill(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.close()
            self.cgroup = None


def _tree(root: int) -> list[int]:
    """``root`` and its live descendants."""
    try:
        import psutil

        proc = psutil.Process(root)
        return [root, *(p.pid for p in proc.children(recursive=True))]
    except Exception:  # noqa: BLE001 - gone, or psutil missing
        return []


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _du(path: str, stop: int) -> int:
    """Bytes used under ``path`` (stops counting once past ``stop``)."""
    total, todo = 0, [path]
    while todo and total <= stop:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
                    else:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            pass
    return total


if __name__ == "__main__":
    from sandbox.backends import BACKENDS

    for name in BACKENDS:
        print(name)
        for key, how in enforcement(name, SandboxLimits()).items():
            print(f"  {key:10s} {how}")
