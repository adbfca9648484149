"""Resource limits of one sandbox, typed and explained (nested in the config as ``sandbox.limits``).

``memory_mb``, ``max_procs``, ``tmpfs_mb`` and ``scratch_mb`` hold for the whole sandbox (all its processes
together), ``call_timeout_s`` for each call; ``sandbox/confine.py`` says how each backend enforces them (cgroup,
tmpfs sizes, rlimits in a user namespace, polling), and rlimits per process come on top. Try it alone:
``python -c "from sandbox.limits import SandboxLimits; print(SandboxLimits(cpu_s=0))"`` (a readable error).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SandboxLimits(BaseModel):
    """Resource limits of one sandbox (``cpu_s`` is its process's lifetime CPU budget).

    Change one with ``limits.model_copy(update={"call_timeout_s": 5})``.
    """

    model_config = ConfigDict(extra="forbid")

    memory_mb: int = Field(2048, ge=64, description="memory of the whole sandbox (all its processes and its tmpfs "
                           "mounts together), in MiB; also each process's address-space limit")
    cpu_s: int = Field(
        300, ge=1, description="CPU seconds one sandboxed process may use over its life; the worker starts a fresh "
        "process once half is spent"
    )
    call_timeout_s: float = Field(
        60, gt=0, description="wall-clock limit of one call into harness code; on timeout the process is killed "
        "and restarted on the next call"
    )
    file_size_mb: int = Field(64, ge=1, description="largest file sandboxed harness code may write, in MiB")
    max_procs: int = Field(
        64, ge=1, description="processes (and threads) of the whole sandbox at once, the runner included"
    )
    tmpfs_mb: int = Field(256, ge=1, description="size of the sandbox's private /tmp (a tmpfs), in MiB")
    scratch_mb: int = Field(256, ge=1, description="size of the sandbox's writable scratch dir (its working dir and "
                            "$HOME), in MiB")
    cgroup: bool = Field(
        True, description="enforce memory and process limits with a cgroup per sandbox where this machine lets us "
        "make one (false: rlimits in a user namespace and polling only)"
    )
