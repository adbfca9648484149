"""benchmarks/learnability.py reads what training learned per level from run folders: checked on a real run folder
(``evotrainer init``) whose starting and phase evaluations are written with known per-item scores."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from evotrainer.rundir import RunDir
from tests.conftest import FAST, ROOT, cli

spec = importlib.util.spec_from_file_location("learnability", ROOT / "benchmarks" / "learnability.py")
learnability = importlib.util.module_from_spec(spec)
spec.loader.exec_module(learnability)


def _write_eval(path: Path, items: dict[str, float], **more) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**more, "eval": {"accuracy": sum(items.values()) / len(items), "items": items}}))


def test_per_level_gains_paired_per_item_and_pooled_over_runs(tmp_path: Path, cli_env, capsys) -> None:
    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], cli_env)
    tasks = RunDir(run).eval_tasks()
    start = {t["id"]: 0.0 for t in tasks}
    _write_eval(run / "baseline.json", start)
    _write_eval(run / "checkpoints" / "phase-0001" / "result.json", start, phase=1, steps=6)
    learned = {t["id"]: float(str(t["difficulty"]) == "2") for t in tasks}  # phase 2 learned all of level 2
    _write_eval(run / "checkpoints" / "phase-0002" / "result.json", learned, phase=2, steps=6)
    with pytest.raises(SystemExit, match="no starting evaluation"):
        learnability.main([str(tmp_path)])  # not a run that trained: one line

    again = tmp_path / "again"
    shutil.copytree(run, again)
    out = tmp_path / "learn.json"
    assert learnability.main([str(run), str(again), "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    first = figures["runs"][0]
    assert first["stages"] == [["start", 0], ["phase 1", 6], ["phase 2", 12]]
    n2 = sum(str(t["difficulty"]) == "2" for t in tasks)
    assert first["levels"]["2"]["n"] == n2 > 0 and first["levels"]["2"]["accuracy"] == [0.0, 0.0, 1.0]
    assert first["levels"]["2"]["gain"] == {"diff": 1.0, "low": 1.0, "high": 1.0, "n": n2}
    assert all(lv["gain"]["diff"] == 0.0 for name, lv in first["levels"].items() if name != "2")
    assert figures["pooled"]["2"]["diff"] == 1.0 and figures["pooled"]["1"]["diff"] == 0.0
    assert "level 2 (n=" in capsys.readouterr().out
