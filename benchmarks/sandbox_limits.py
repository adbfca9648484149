"""Whole-sandbox limits at full size, per backend: which limit each one enforces, and what harness code got.

    python benchmarks/sandbox_limits.py [--backends bwrap,unshare,process] [--no-cgroup]

Runs the probes of ``tests/test_sandbox_limits.py`` at the sizes the limits are meant for (a 200-process fork
bomb against 64 processes, three processes of 1.5 GB against 2 GB, 1.5 GB written to /tmp and to scratch against
256 MiB each) on every available backend, with and without a cgroup where this machine can make one, and prints
for each: the mechanism ``sandbox.confine.enforcement`` reports for the run log, and the measured outcome
(processes started, processes that kept their 1.5 GB, MiB written, or the error that stopped the sandbox).
Harness code runs without the audit hook (it would deny the forks): this measures the enforcement beneath it.
Needs about 2 GB of free memory (more without a cgroup, for up to one polling interval).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox import SandboxLimits, cgroups  # noqa: E402
from sandbox.confine import enforcement  # noqa: E402
from tests import test_sandbox_limits as probes  # noqa: E402

FULL = SandboxLimits(call_timeout_s=60, cpu_s=300, file_size_mb=4096)
CASES = [("processes", probes.FORK_BOMB.replace("NPROCS", "200"), "started"),
         ("memory", probes.MEMORY.replace("MIB", "1536"), "kept 1.5 GB"),
         ("tmpfs", probes.WRITE.replace("PATH", "'/tmp/fill'").replace("MIB", "1536"), "MiB written"),
         ("scratch", probes.WRITE.replace("PATH", "'fill'").replace("MIB", "1536"), "MiB written")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="bwrap,unshare,process")
    parser.add_argument("--no-cgroup", action="store_true", help="only the mechanisms used without a cgroup")
    args = parser.parse_args()
    probes.LIMITS = FULL
    modes = [(b, c) for b in args.backends.split(",") if probes._available(b)
             for c in ((False,) if args.no_cgroup or not cgroups.available() else (True, False))]
    print(f"limits: {FULL.max_procs} processes, {FULL.memory_mb} MiB, /tmp {FULL.tmpfs_mb} MiB, scratch "
          f"{FULL.scratch_mb} MiB; cgroup here: {cgroups.available() or 'none'}")
    for backend, cgroup in modes:
        limits = FULL.model_copy(update={"cgroup": cgroup})
        how = enforcement(backend, limits)
        print(f"\n{backend} ({'cgroup' if cgroup else 'no cgroup'})")
        for limit, body, unit in CASES:
            if backend == "process" and limit == "tmpfs":
                print(f"  {limit:9s} {how[limit]}\n            not measured (writing 1.5 GB into the host's /tmp)")
                continue
            with tempfile.TemporaryDirectory() as tmp:
                value, error, attempts = probes.measure(probes.harness_with(Path(tmp), body), backend, cgroup)
            got = f"{value:.0f} {unit}" if value is not None else f"stopped: {error[:150]}"
            hits = "; ".join(a["what"] for a in attempts if a["kind"] == "limit")
            print(f"  {limit:9s} {how[limit]}\n            measured: {got}" + (f" [{hits}]" if hits else ""))


if __name__ == "__main__":
    main()
