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


def _eval(items: dict[str, float], tolerant: dict[str, float] | None = None) -> EvalResult:
    lenient = {"tolerant_accuracy": sum(tolerant.values()) / len(tolerant), "tolerant_items": tolerant} if tolerant \
        else {}
    return EvalResult(accuracy=sum(items.values()) / len(items), n=len(items), items=items, **lenient)


def _write_phase(rd: RunDir, phase: int, steps: int, items: dict[str, float],
                 tolerant: dict[str, float] | None = None) -> None:
    ev = _eval(items, tolerant)
    result = PhaseResult(phase=phase, harness_sha="0" * 40, steps=steps, eval=ev, dev=ev, rollout_path="",
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
    assert first["all"]["n"] == len(tasks) and abs(first["all"]["diff"] - n2 / len(tasks)) < 1e-9  # every level at once
    assert "level 2 (n=" in capsys.readouterr().out


def test_the_tolerant_score_s_gain_is_read_apart_from_the_strict_one(tmp_path: Path, cli_env) -> None:
    """A run whose strict score learned level 2 (the slip dropped where the sum was already right) while the tolerant
    score learned level 3 (sums it could not do before): ``--tolerant`` reads the second; a run evaluated before the
    tolerant score existed is refused in one line."""
    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], cli_env)
    rd = RunDir(run)
    tasks = rd.eval_tasks()
    level = {t["id"]: str(t["difficulty"]) for t in tasks}
    strict_start = {i: 0.0 for i in level}
    tolerant_start = {i: float(lv == "2") for i, lv in level.items()}  # level 2 right but for the period
    rd.save_baseline(str(rd.policy_base), {"held_out": _eval(strict_start, tolerant_start),
                                           "dev": _eval(strict_start, tolerant_start)})
    _write_phase(rd, 1, 6, {i: float(lv == "2") for i, lv in level.items()},
                 {i: float(lv in ("2", "3")) for i, lv in level.items()})
    out = tmp_path / "t.json"
    assert learnability.main([str(run), "--json", str(out)]) == 0
    strict = json.loads(out.read_text())["runs"][0]["levels"]
    assert strict["2"]["gain"]["diff"] == 1.0 and strict["3"]["gain"]["diff"] == 0.0
    assert learnability.main([str(run), "--tolerant", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    tolerant = figures["runs"][0]["levels"]
    assert figures["score"] == "tolerant"
    assert tolerant["2"]["gain"]["diff"] == 0.0 and tolerant["3"]["gain"]["diff"] == 1.0
    _write_phase(rd, 2, 6, strict_start)  # no tolerant score: evaluated before it existed
    with pytest.raises(SystemExit, match="without the tolerant score"):
        learnability.main([str(run), "--tolerant"])
