"""Sandbox backends: which isolation this machine has, and the argv that starts the runner under it.

``choose_backend`` probes docker, bwrap and unshare (once per process, by starting the interpreter exactly as
a worker does) and ``describe_backend`` says in one line what each isolates. For bwrap and unshare, ``_view``
is the mount plan -- what of the host harness code sees -- and ``_bwrap_argv`` / ``_unshare_argv`` turn it
into a command. Framework code (the ``evotrainer`` and ``agents`` packages, and every file of this package but
``runner.py``) is masked wherever it lies inside a visible path. Try it alone:
``python -c "import sandbox.backends as b; print(b.choose_backend()); print(*b._view('/tmp', '/tmp', []), sep='\\n')"``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable

BACKENDS = ("docker", "bwrap", "unshare", "process")
DEFAULT_IMAGE = "evotrainer-sandbox:latest"

_DESCRIPTIONS = {
    "docker": "docker: no network, read-only root and harness mount, sized tmpfs /tmp and scratch, memory/CPU/pid "
              "limits for the container, non-root user, no capabilities, audited attempts, time limit per call",
    "bwrap": "bwrap: no network, no capabilities, own filesystem showing only the system dirs, the Python "
             "installation, the runner and the harness (all read-only; framework code and hidden paths "
             "masked), sized tmpfs /tmp and scratch, whole-sandbox limits, audited attempts, scrubbed env, time "
             "limit per call",
    "unshare": "unshare: no network, no capabilities, own filesystem (as bwrap) showing only the system dirs, "
               "the Python installation, the runner and the harness (all read-only; framework code and "
               "hidden paths masked), sized tmpfs /tmp and scratch, whole-sandbox limits, audited attempts, "
               "scrubbed env, time limit per call",
    "process": "process: NO ISOLATION - harness code runs as this user and could read the evaluator, run "
               "directories and framework code, write any file this user can, and use the network; the audit "
               "hook denies and reports such attempts (evidence, not isolation); whole-sandbox limits, scrubbed "
               "env, scratch working dir and a time limit per call",
}


@functools.lru_cache(maxsize=None)
def _docker_available(image: str) -> bool:
    """The docker package imports, a daemon answers ping within 2 s, the CLI exists and the image is local."""
    if shutil.which("docker") is None:
        return False
    try:
        import docker  # type: ignore[import-not-found]

        client = docker.from_env(timeout=2)
        client.ping()
        client.images.get(image)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return False


# The host paths a namespace sandbox (bwrap, unshare) shows, besides the Python installation, the runner and the
# harness: the system directories (as symlinks where they are symlinks, on a merged-/usr system) and the one
# /etc file the dynamic loader wants. Nothing else of the host: no /etc, /home, /root, /work, /sys, /run.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache",)
_FRAMEWORK_PACKAGES = ("evotrainer", "agents")
_HERE = Path(__file__).resolve().parent  # this package's dir: framework code, but for what runs in the sandbox
_IN_SANDBOX = ("runner.py", "guard.py", "frames.py")


def _runner_path() -> Path:
    """sandbox/runner.py, the script the sandbox runs (source checkout and installed wheel alike)."""
    path = _HERE / "runner.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the sandbox package is incomplete")
    return path


def _framework_paths() -> list[str]:
    """Framework code, never visible to harness code: the evotrainer and agents package dirs (source checkout
    or site-packages; found without importing them) and every entry of this package's dir except runner.py,
    which stays visible (masked one by one, so where site-packages shows this dir the runner still runs)."""
    paths: list[str] = []
    for name in _FRAMEWORK_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        paths += list(spec.submodule_search_locations or []) if spec is not None else []
    return paths + [str(entry) for entry in sorted(_HERE.iterdir()) if entry.name not in _IN_SANDBOX]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _python_paths() -> list[str]:
    """What the runner's interpreter needs: its prefixes, site-packages and every hop of its symlink chain."""
    import site
    import sysconfig

    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    try:
        paths += site.getsitepackages()
    except AttributeError:  # old virtualenv's site.py
        pass
    paths += [sysconfig.get_paths().get(key, "") for key in ("purelib", "platlib")]
    hop = os.path.abspath(sys.executable)
    for _ in range(40):  # venv/bin/python -> python3 -> /base/bin/python3 -> python3.11
        paths.append(hop)
        if not os.path.islink(hop):
            break
        hop = os.path.normpath(os.path.join(os.path.dirname(hop), os.readlink(hop)))
    return [p for p in paths if p]


def _view(harness_dir: str, workdir: str, hidden: Iterable[str]) -> list[tuple[str, ...]]:
    """The mount plan of a namespace sandbox, in order, as ("link", target, path), ("ro", path),
    ("mask", path) and ("rw", path) steps, applied on top of a fresh tmpfs root with /dev, /proc and /tmp.

    Read-only: the system dirs, the Python installation, the runner, the harness. Masked (empty read-only
    tmpfs, or /dev/null for a file) wherever they lie inside one of those: framework code (``_framework_paths``)
    and the ``hidden`` paths. Writable: ``workdir`` only. Paths that don't exist are left out.
    """
    steps: list[tuple[str, ...]] = []
    links: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            steps.append(("link", os.readlink(path), path))
            links.append(path)
    wanted = [*_SYSTEM_DIRS, *_SYSTEM_FILES, *_python_paths(), *(str(_HERE / n) for n in _IN_SANDBOX), harness_dir]
    candidates = set()
    for path in wanted:
        if path not in links and os.path.exists(path):
            path = os.path.abspath(path)
            # never mount through a symlink of the new root: a path under /lib -> usr/lib goes by its real name
            candidates.add(os.path.realpath(path) if any(_under(path, link) for link in links) else path)
    bound: list[str] = []
    for path in sorted(candidates):  # parents before children; a path inside a bound one is visible already
        if not any(_under(path, parent) for parent in bound):
            bound.append(path)
            steps.append(("ro", path))
    masks: list[str] = []
    for mask in sorted({os.path.realpath(p) for p in [*_framework_paths(), *hidden] if os.path.exists(p)}):
        if not any(_under(mask, outer) for outer in masks):  # inside a masked dir: gone already
            masks.append(mask)
    for path in bound:  # masks after every bind: a mask inside a bound dir hides what that bind showed
        real = os.path.realpath(path)
        for mask in masks:
            if _under(mask, real):
                steps.append(("mask", path + mask[len(real):]))
    steps.append(("rw", workdir))
    return steps


def _bwrap_argv(steps: list[tuple[str, ...]], workdir: str, command: list[str], tmp_bytes: int = 0) -> list[str]:
    size = ["--size", str(tmp_bytes)] if tmp_bytes else []
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--cap-drop", "ALL",
            "--dev", "/dev", "--proc", "/proc", "--remount-ro", "/proc", *size, "--tmpfs", "/tmp"]
    for step in steps:
        kind, path = step[0], step[-1]
        if kind == "link":
            argv += ["--symlink", step[1], path]
        elif kind == "ro":
            argv += ["--ro-bind", path, path]
        elif kind == "rw":
            argv += ["--bind", path, path]
        elif kind == "scratch":  # a tmpfs of its own size: the sandbox's writable working dir
            argv += ["--size", step[1], "--perms", "0700", "--tmpfs", path]
        elif os.path.isdir(path):  # mask
            argv += ["--tmpfs", path, "--remount-ro", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    return argv + ["--remount-ro", "/", "--chdir", workdir, *command]


_UNSHARE_FLAGS = ("-r", "-m", "-n", "-p", "-u", "-i", "--fork", "--kill-child")

# Runs as root of new user, mount, pid, net, ipc and uts namespaces, with the arguments ROOT WORKDIR STEP... --
# COMMAND... (see _view; paths come as arguments, so no quoting is ever needed). It builds the sandbox's
# filesystem the way bwrap does: a tmpfs on ROOT (an empty host directory), a fresh read-only /proc, a /dev
# of the harmless device nodes, a tmpfs /tmp, then the steps (read-only binds are non-recursive: a bound
# directory with mounts below it fails the start rather than showing them writable); then it pivots into
# ROOT, detaches the host's root, makes the new root read-only and runs COMMAND with every capability
# dropped, so harness code cannot undo a mount. The shell stays as PID 1 of the pid namespace (which ignores
# default-action signals such as SIGXCPU) and reports a signal death of the command as exit status
# 128 + signal. Any failed step ends it with exit status 97 and one line on stderr.
_UNSHARE_SCRIPT = """
fail() { echo "evotrainer sandbox setup failed: $*" >&2; exit 97; }
user_path=$PATH
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
root=$1 work=$2 tmpsize=$3
shift 3
mount -n -t tmpfs -o mode=0755 evotrainer-root "$root" || fail "tmpfs on $root"
mkdir "$root/proc" "$root/dev" "$root/tmp" "$root/.old" || fail "mkdir in $root"
mount -n -t proc -o nosuid,nodev,noexec proc "$root/proc" && mount -n -o remount,ro,bind "$root/proc" \\
  || fail /proc
mount -n -t tmpfs -o mode=0755,nosuid evotrainer-dev "$root/dev" && mkdir "$root/dev/shm" || fail /dev
for node in null zero full random urandom tty; do
  : > "$root/dev/$node" && mount -n --bind "/dev/$node" "$root/dev/$node" || fail "/dev/$node"
done
ln -s /proc/self/fd "$root/dev/fd" && ln -s /proc/self/fd/0 "$root/dev/stdin" \\
  && ln -s /proc/self/fd/1 "$root/dev/stdout" && ln -s /proc/self/fd/2 "$root/dev/stderr" || fail /dev
mount -n -t tmpfs -o "mode=1777,nosuid,nodev${tmpsize:+,size=$tmpsize}" evotrainer-tmp "$root/tmp" || fail /tmp
while [ "$1" != "--" ]; do
  case "$1" in
    link) mkdir -p "$root${3%/*}" && ln -s "$2" "$root$3" || fail "symlink $3"; shift 3 ;;
    scratch) mkdir -p "$root$3" && mount -n -t tmpfs -o "mode=0700,nosuid,nodev,size=$2" evotrainer-scratch "$root$3" \\
      || fail "scratch $3"; shift 3 ;;
    ro|rw)
      if [ -d "$2" ]; then mkdir -p "$root$2"
      else mkdir -p "$root${2%/*}" && { [ -e "$root$2" ] || : > "$root$2"; }; fi || fail "mount point $2"
      mount -n --bind "$2" "$root$2" || fail "bind $2"
      [ "$1" = rw ] || mount -n -o remount,ro,bind "$root$2" || fail "read-only $2"
      shift 2 ;;
    mask)
      if [ -d "$2" ]; then mount -n -t tmpfs -o size=4k,mode=0555 evotrainer-hidden "$root$2"
      else mount -n --bind /dev/null "$root$2"; fi && mount -n -o remount,ro,bind "$root$2" || fail "mask $2"
      shift 2 ;;
    *) fail "unknown step $1" ;;
  esac
done
shift
cd "$root" && pivot_root . .old && umount -n -l /.old && rmdir /.old || fail pivot_root
mount -n -o remount,ro,bind / || fail "read-only /"
setpriv=$(command -v setpriv) || fail "setpriv not found"
cd "$work" || fail "cd $work"
PATH=$user_path
"$setpriv" --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"
exit $?
"""


def _unshare_argv(root: str, steps: list[tuple[str, ...]], workdir: str, command: list[str],
                  tmp_bytes: int = 0) -> list[str]:
    args = [part for step in steps for part in step]
    return ["unshare", *_UNSHARE_FLAGS, "sh", "-c", _UNSHARE_SCRIPT, "sh", root, workdir, str(tmp_bytes or ""),
            *args, "--", *command]


def _sandbox_argv(backend: str, harness_dir: str, base: str, hidden: Iterable[str], command: list[str],
                  tmp_bytes: int = 0, scratch_bytes: int = 0) -> tuple[list[str], str]:
    """The argv that runs ``command`` under ``backend`` (not docker), and its working dir, made inside ``base``.

    With ``tmp_bytes`` / ``scratch_bytes``, /tmp and the working dir are tmpfs mounts of those sizes (bwrap,
    unshare); otherwise /tmp is an unsized tmpfs and the working dir a bind of the host dir."""
    workdir = os.path.join(base, "work")
    os.makedirs(workdir, exist_ok=True)
    if backend == "process":
        return command, workdir
    steps = _view(harness_dir, workdir, hidden)
    if scratch_bytes:
        steps = [("scratch", str(scratch_bytes), workdir) if step == ("rw", workdir) else step for step in steps]
    if backend == "bwrap":
        return _bwrap_argv(steps, workdir, command, tmp_bytes), workdir
    root = os.path.join(base, "root")
    os.makedirs(root, exist_ok=True)
    return _unshare_argv(root, steps, workdir, command, tmp_bytes), workdir


def _probe(backend: str) -> bool:
    """Start the interpreter under ``backend`` exactly as a worker does, with a hidden dir and file to mask."""
    base = os.path.realpath(tempfile.mkdtemp(prefix="evotrainer-probe-"))
    try:
        harness = os.path.join(base, "harness")
        os.makedirs(os.path.join(harness, "hidden"))
        Path(harness, "hidden.txt").write_text("")
        hidden = [os.path.join(harness, "hidden"), os.path.join(harness, "hidden.txt")]
        argv, workdir = _sandbox_argv(backend, harness, base, hidden, [sys.executable, "-I", "-B", "-c", ""])
        try:
            return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, cwd=workdir, timeout=20).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False
    finally:
        shutil.rmtree(base, ignore_errors=True)


@functools.lru_cache(maxsize=None)
def _bwrap_available() -> bool:
    return shutil.which("bwrap") is not None and _probe("bwrap")


@functools.lru_cache(maxsize=None)
def _unshare_available() -> bool:
    return shutil.which("unshare") is not None and _probe("unshare")


def _available(name: str, image: str) -> bool:
    if name == "docker":
        return _docker_available(image)
    if name == "bwrap":
        return _bwrap_available()
    if name == "unshare":
        return _unshare_available()
    return name == "process"


def choose_backend(preference: str = "auto", image: str = DEFAULT_IMAGE) -> str:
    """The sandbox backend to use: the strongest available for ``auto``, else exactly ``preference``.

    Raises ValueError for an unknown name and RuntimeError when an explicitly requested backend is not
    available on this machine. Probes run once per process.
    """
    if preference == "auto":
        return next(name for name in BACKENDS if _available(name, image))
    if preference not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {preference!r}; expected auto or one of {', '.join(BACKENDS)}")
    if not _available(preference, image):
        hint = f" (is the daemon up and the image {image!r} built?)" if preference == "docker" else ""
        raise RuntimeError(f"sandbox backend {preference!r} is not available on this machine{hint}")
    return preference


def describe_backend(name: str) -> str:
    """One line for the run log saying what the backend isolates."""
    try:
        return _DESCRIPTIONS[name]
    except KeyError:
        raise ValueError(f"unknown sandbox backend {name!r}") from None
