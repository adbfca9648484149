"""benchmarks/learnability.py reads what training learned per level from run folders: checked on a real run folder
(``evotrainer init``) whose starting and phase evaluations are written with known per-item scores."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from evotrainer.contracts import EvalResult, PhaseResult
from evotrainer.rundir import RunDir
from tests.conftest import FAST, ROOT, cli

spec = importlib.util.spec_from_file_location("learnability", ROOT / "benchmarks" / "learnability.py")
learnability = importlib.util.module_from_spec(spec)
spec.loader.exec_module(learnability)


def _eval(items: dict[str, float]) -> EvalResult:
    return EvalResult(accuracy=sum(items.values()) / len(items), n=len(items), items=items)


def _write_phase(rd: RunDir, phase: int, steps: int, items: dict[str, float]) -> None:
    result = PhaseResult(phase=phase, harness_sha="0" * 40, steps=steps, eval=_eval(items), dev=_eval(items), rollout_path="",
                         checkpoint_path=str(rd.checkpoint(phase)), wall_time_s=1.0, tokens=0)
    rd.checkpoint(phase).mkdir(parents=True)
    (rd.checkpoint(phase) / "result.json").write_text(result.model_dump_json())


def test_per_level_gains_paired_per_item_and_pooled_over_runs(tmp_path: Path, cli_env, capsys) -> None:
    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], cli_env)
    rd = RunDir(run)
    tasks = rd.eval_tasks()
    start = {t["id"]: 0.0 for t in tasks}
    with pytest.raises(SystemExit, match="no starting evaluation"):
        learnability.main([str(run)])  # not a run that trained: one line
    rd.save_baseline(str(rd.policy_base), {"held_out": _eval(start), "dev": _eval(start)})
    _write_phase(rd, 1, 6, start)
    learned = {t["id"]: float(str(t["difficulty"]) == "2") for t in tasks}  # phase 2 learned all of level 2
    _write_phase(rd, 2, 6, learned)

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
