"""The oldest Python that pyproject.toml admits can read every module: the suite runs on one interpreter, so syntax
newer than that floor (``Annotated[T, *validators]`` is 3.11 syntax) would otherwise pass every test and fail a user
on the floor at import. Runs when such an interpreter is on this machine (``python3.10`` on PATH or in pyenv)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _floor() -> tuple[int, int]:
    found = re.search(r'requires-python\s*=\s*">=(\d+)\.(\d+)"', (ROOT / "pyproject.toml").read_text())
    assert found, "pyproject.toml names no requires-python floor"
    return int(found.group(1)), int(found.group(2))


def _interpreter(version: tuple[int, int]) -> str | None:
    """An interpreter of ``version`` that runs (a pyenv shim for a version pyenv has not selected does not)."""
    pyenv = sorted(Path.home().glob(f".pyenv/versions/{version[0]}.{version[1]}.*/bin/python"), reverse=True)
    for python in [*map(str, pyenv), shutil.which(f"python{version[0]}.{version[1]}")]:
        if python and subprocess.run([python, "-c", "pass"], capture_output=True, timeout=30).returncode == 0:
            return python
    return None


def test_every_module_compiles_on_the_oldest_python_admitted():
    floor = _floor()
    python = _interpreter(floor)
    if python is None:
        pytest.skip(f"no Python {floor[0]}.{floor[1]} on this machine")
    files = [str(p) for d in ("evotrainer", "agents", "sandbox", "benchmarks", "tests") for p in (ROOT / d).rglob("*.py")]
    script = ("import sys\nbad = []\nfor f in sys.argv[1:]:\n    try:\n        compile(open(f).read(), f, 'exec')\n"
              "    except SyntaxError as e:\n        bad.append(f'{f}:{e.lineno}: {e.msg}')\nprint('\\n'.join(bad))\n")
    out = subprocess.run([python, "-c", script, *files], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr
