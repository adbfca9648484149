"""Resource limits of one sandboxed harness process, typed and explained (nested in the config as ``sandbox.limits``).

Every backend applies them: docker as container limits, the others as rlimits set before the runner starts,
plus a wall-clock limit per call enforced by the worker. Try it alone:
``python -c "from sandbox.limits import SandboxLimits; print(SandboxLimits(cpu_s=0))"`` (a readable error).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SandboxLimits(BaseModel):
    """Resource limits of one sandboxed harness process (``cpu_s`` is its lifetime CPU budget).

    Change one with ``limits.model_copy(update={"call_timeout_s": 5})``.
    """

    model_config = ConfigDict(extra="forbid")

    memory_mb: int = Field(2048, ge=64, description="address-space / memory limit of sandboxed harness code, in MiB")
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
        64, ge=1, description="how many processes sandboxed harness code may start (its own process included)"
    )
