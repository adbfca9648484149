"""The demo's last words: the evolved run against the same faulty seed left alone, paired per held-out task, and the
defect named plainly (from its card) before anything trains."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer import demo
from evotrainer.contracts import EvalResult, PhaseResult
from evotrainer.harness import faults
from evotrainer.rundir import RunDir


def _write_phases(root: Path, finals: list[list[float]]) -> None:
    rd = RunDir(root)
    for phase, items in enumerate(finals, 1):
        scores = {f"held_out-{i}": s for i, s in enumerate(items)}
        ev = EvalResult(accuracy=sum(items) / len(items), n=len(items), items=scores)
        result = PhaseResult(phase=phase, harness_sha="a" * 40, steps=1, eval=ev, dev=ev, rollout_path="",
                             checkpoint_path="", wall_time_s=1.0, tokens=1)
        rd.checkpoint(phase).mkdir(parents=True)
        (rd.checkpoint(phase) / "result.json").write_text(result.model_dump_json())


def test_the_summary_compares_the_evolved_run_with_the_faulty_seed_left_alone(tmp_path: Path):
    run = tmp_path / "demo"
    n = 400
    _write_phases(run, [[1.0] * 200 + [0.0] * 200, [1.0] * 240 + [0.0] * 160])  # 60% after phase 2
    _write_phases(demo.static_dir(run), [[0.0] * n, [1.0] * 20 + [0.0] * 380])  # 5% after phase 2
    assert demo.static_dir(run) == tmp_path / "demo-static"
    c = demo.comparison(run)
    assert c["phases"] == 2 and c["evotrainer"] == pytest.approx(0.60) and c["static"] == pytest.approx(0.05)
    assert c["gain"]["diff"] == pytest.approx(0.55) and 0.45 < c["gain"]["low"] < 0.55 < c["gain"]["high"] < 0.65
    lines = demo.summary_lines(run, "divergence")
    assert "planted defect, divergence" in lines[0] and "EvoTrainer 60.0%" in lines[0] and "left alone 5.0%" in lines[0]
    assert "+55.0%" in lines[1] and "paired on 400 held-out tasks" in lines[1]
    _write_phases(tmp_path / "short", [[1.0] * n])
    _write_phases(tmp_path / "short-static", [[0.0] * n, [0.0] * n])
    assert demo.comparison(tmp_path / "short")["phases"] == 1  # compared after the phases both trained


def test_the_demo_s_defect_is_catalogued_and_said_plainly():
    assert demo.DEFAULT_FAULT in faults.names()
    for name in faults.names():
        said = demo.what_is_wrong(name)
        assert 40 < len(said) < 800 and "\n" not in said and not said.startswith("#"), (name, said)
