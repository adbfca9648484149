"""The harness sandbox: every call into harness code goes through a ``HarnessWorker``, in a separate process.

Harness code (prompt.py, rewards.py, filters.py, curriculum.py, diagnostics.py, tests/) is written by agents
and is untrusted, so it never runs in the framework's process. A ``HarnessWorker`` starts one long-lived
sandboxed process running ``runner.py`` (standard library only) on one harness directory and talks to it over
JSON lines on stdin/stdout. The interface is the same for every backend:

* ``docker``  -- the image built from ``sandbox/Dockerfile`` (a bare Python and runner.py, no framework), one
  container per sandbox made with the docker SDK: no network, read-only root and harness mount, memory/CPU/pid
  limits, sized tmpfs mounts, non-root user, no capabilities. Used when the ``docker`` package
  (``pip install 'evotrainer[docker]'``), a daemon and the image (``sandbox.image`` in the config) are there.
* ``bwrap``   -- bubblewrap, all namespaces unshared (no network), no capabilities.
* ``unshare`` -- util-linux ``unshare`` (user, mount, pid, net, ipc, uts namespaces), the same filesystem view as
  bwrap, built by a shell script with ``mount`` and ``pivot_root``; capabilities dropped with ``setpriv``.
* ``process`` -- a plain child process: NO isolation. Harness code runs as this user and can read the
  evaluator, the run directories and the framework, and write any file this user can; only resource limits,
  a scrubbed environment and a temp working dir. The last resort, for machines without any of the above.

bwrap and unshare show harness code a filesystem of its own: an empty read-only root holding, read-only, the
system dirs (``/usr``, and ``/bin``, ``/lib``, ... as binds or as the symlinks they are), the dynamic loader's
``/etc/ld.so.cache``, the Python installation (``sys.prefix``, ``sys.base_prefix``, site-packages, the
interpreter's symlink chain), ``runner.py`` (with ``guard.py`` and ``frames.py``) and the harness dir; a fresh
``/proc`` (read-only), a ``/dev`` of harmless device nodes and a private tmpfs ``/tmp``. Nothing else of the host
exists there: no ``/etc``, ``/home``, ``/work``, run directories or repository. Where framework code -- the
``evotrainer`` and ``agents`` packages and every file of this package but those three -- or a ``hide`` path lies
inside one of those visible paths (e.g. a non-editable install in site-packages), an empty read-only tmpfs
(``/dev/null`` for a file) masks it. Nothing of the host is writable: the working dir (also ``$HOME``) and /tmp
are the sandbox's own sized tmpfs mounts. The process has no capabilities, so it cannot unmount a mask or remount anything writable, and mounts copied into any namespace it
creates are locked by the kernel. Without a mount namespace (``process``) nothing is hidden (the audit hook
denies naive reads of hidden paths, but that is evidence, not isolation); docker hides everything but the
harness mount.

Limits hold for the whole sandbox, not per process (``confine.py``): a cgroup per sandbox (processes, memory with
its tmpfs pages) where the machine lets us make one, else RLIMIT_NPROC inside the user namespace or polling;
/tmp and the scratch working dir are tmpfs mounts of a set size (bwrap, unshare, docker); rlimits per process
(address space, CPU seconds, file size, open files) come on top, with a scrubbed environment. Every backend has
a wall-clock limit per call; on timeout, crash or protocol garbage the whole sandbox is killed and restarted on
the next call, and processes a call leaves running are killed when it ends.

What harness code tries and must never do -- network, environment variables beyond the scrubbed ones, paths
outside the harness and scratch, processes, signals, native code, a forged response -- is denied and recorded
(``guard.py`` in the sandbox, the kernel's counters outside it) and reaches the caller as ``worker.attempts``
(and ``attempts_log(dir)`` over every worker of a dir): the backtest rejects a candidate for any of them. Every
response is checked before use (``responses.py``), and rows cross the protocol as column frames (``frames.py``). ``choose_backend("auto")`` picks the strongest available one (probed once per process); the trainer
and the backtester report it in the run log with ``describe_backend``. Errors in harness code surface as
``HarnessError``, whose ``str()`` is one readable line such as ``rewards.py:12 ZeroDivisionError: division by
zero``; the full traceback is on ``.traceback``. A worker imports each harness module once: start a new worker
after the harness files change.

Modules, lowest layer first:

* ``runner.py``    -- runs inside the sandbox: loads harness code, serves the JSON-lines protocol (stdlib only,
  executed as a script; it never imports this package), with ``guard.py`` (the audit of attempts) and
  ``frames.py`` (column frames), loaded by path.
* ``limits.py``    -- ``SandboxLimits``, the typed resource limits (``sandbox.limits`` in the config).
* ``processes.py`` -- start a child that dies with us, with rlimits and a scrubbed env; pipes with deadlines;
  kill the whole process group.
* ``cgroups.py``   -- one cgroup per sandbox (v2 or v1): pids and memory limits, kill everything in it.
* ``confine.py``   -- the whole-sandbox limits of each backend, polling, the kernel's evidence, the run log.
* ``backends.py``  -- which backends this machine has, the mount plan, the argv for each backend.
* ``container.py`` -- the docker backend: the container's settings, created through the docker SDK.
* ``responses.py`` -- what a response may look like; anything else is rejected, never trusted.
* ``worker.py``    -- ``HarnessWorker``, ``HarnessError``, ``run_selftest``, ``attempts_log``.

Run a piece alone: ``python -c "import sandbox; print(sandbox.choose_backend())"`` (the backend this machine
gets), ``python -c "from sandbox import run_selftest; print(run_selftest('harness_repo/math'))"`` (a harness's
self-tests in the sandbox), ``python -I sandbox/runner.py harness_repo/math`` and type
``{"op": "ping"}`` (the runner without any sandbox), ``python -m pytest -q tests/test_sandbox.py`` (the tests).
"""

from sandbox.backends import BACKENDS, DEFAULT_IMAGE, choose_backend, describe_backend
from sandbox.limits import SandboxLimits
from sandbox.processes import exit_reason
from sandbox.worker import HarnessError, HarnessWorker, attempts_log, run_selftest

__all__ = [
    "BACKENDS",
    "DEFAULT_IMAGE",
    "HarnessError",
    "HarnessWorker",
    "SandboxLimits",
    "attempts_log",
    "choose_backend",
    "describe_backend",
    "exit_reason",
    "run_selftest",
]
