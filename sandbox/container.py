"""The docker backend: one container per sandbox process, made with the docker SDK, spoken to over its stdio.

:func:`container_spec` turns ``SandboxLimits`` into the container's settings: no network, read-only root
filesystem, the harness and the in-sandbox files (``runner.py``, ``guard.py``, ``frames.py``, always the framework's own, so an
old image cannot run a stale runner) mounted read-only, a sized tmpfs for /tmp and one for the scratch dir,
memory (tmpfs included, no swap), pids, CPU, open files and file size limits for the whole container, every
capability dropped, no new privileges, a non-root user. :func:`start_container` creates it through the SDK and
attaches to its stdin/stdout/stderr with ``docker start --attach --interactive`` (a plain pipe per stream, the
same ``_Process`` every other backend uses); killing the process removes the container through the SDK.

Needs the ``docker`` package (``pip install 'evotrainer[docker]'``), a daemon and the image built from
``sandbox/Dockerfile``; ``sandbox.backends.choose_backend`` uses it only when all three are there. Try it alone
(without a daemon too): ``python -c "from sandbox.container import container_spec as c; from sandbox import
SandboxLimits as L; print(c('/h', '/r/runner.py', L(), 'img', 'n'))"``.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from sandbox.backends import _IN_SANDBOX
from sandbox.limits import SandboxLimits
from sandbox.processes import _make_preexec, _Process

MIB = 1024 * 1024


def container_spec(harness_dir: str | os.PathLike, runner: str | os.PathLike, limits: SandboxLimits, image: str,
                   name: str) -> dict[str, Any]:
    """Keyword arguments of ``docker.from_env().containers.create`` for one sandbox (SDK types as plain dicts)."""
    here = Path(runner).parent
    mounts = [{"type": "bind", "source": str(Path(harness_dir)), "target": "/harness", "read_only": True}]
    mounts += [{"type": "bind", "source": str(here / f), "target": f"/sandbox/{f}", "read_only": True}
               for f in _IN_SANDBOX]
    return {
        "image": image, "name": name, "command": ["/harness", "--scratch", "/scratch", "--private-tmp"],
        "stdin_open": True, "tty": False, "detach": True, "network_mode": "none", "read_only": True,
        "mounts": mounts, "working_dir": "/scratch", "user": "10001:10001",
        "environment": {"HOME": "/scratch", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
                        "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"},
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777",
                  "/scratch": f"rw,nosuid,nodev,size={limits.scratch_mb}m,mode=1777"},
        "mem_limit": limits.memory_mb * MIB, "memswap_limit": limits.memory_mb * MIB,
        "pids_limit": limits.max_procs, "nano_cpus": 1_000_000_000,
        "ulimits": [{"name": "nofile", "soft": 256, "hard": 256},
                    {"name": "fsize", "soft": limits.file_size_mb * MIB, "hard": limits.file_size_mb * MIB},
                    {"name": "cpu", "soft": limits.cpu_s, "hard": limits.cpu_s + 1}],
        "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"], "labels": {"evotrainer.sandbox": "1"},
    }


def _sdk_kwargs(spec: dict[str, Any]) -> dict[str, Any]:
    """``container_spec`` with the SDK's own types for mounts and ulimits."""
    from docker.types import Mount, Ulimit  # type: ignore[import-not-found]

    out = dict(spec)
    out["mounts"] = [Mount(m["target"], m["source"], type=m["type"], read_only=m["read_only"]) for m in spec["mounts"]]
    out["ulimits"] = [Ulimit(**u) for u in spec["ulimits"]]
    out.pop("detach")
    return out


def start_container(harness_dir: str | os.PathLike, runner: str | os.PathLike, limits: SandboxLimits,
                    image: str) -> _Process:
    """Create the sandbox's container (SDK) and attach to it; the returned process removes it when killed."""
    import docker  # type: ignore[import-not-found]

    client = docker.from_env(timeout=30)
    name = f"evotrainer-sandbox-{uuid.uuid4().hex[:12]}"
    container = client.containers.create(**_sdk_kwargs(container_spec(harness_dir, runner, limits, image, name)))
    try:
        argv = ["docker", "start", "--attach", "--interactive", container.id]
        # the limits apply inside the container; the docker CLI itself only has to die with us
        return _Process(argv, env=None, cwd=None, preexec=_make_preexec(None), workdir=None, container=container)
    except BaseException:
        container.remove(force=True)
        raise
