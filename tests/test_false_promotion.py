"""benchmarks/false_promotion.py: main against itself through the gate's own decision, on a real run folder.

Slow: every trial trains four short pilots of the tiny policy. Checks that ``--first`` draws new trials (their
numbers continue), that the summary gives the rate and what the gate's margin means, and that the figures add up.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST, ROOT, cli


@pytest.mark.slow
def test_main_against_itself_prints_each_trial_the_rate_and_the_gate_s_margin(tmp_path: Path, cli_env) -> None:
    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], cli_env)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "false_promotion.py"), "--run-dir", str(run),
                          "--rounds", "2", "--per-round", "2", "--first", "5", "--steps", "1", "--seeds", "2", "--probe",
                          "40"],
                         env=cli_env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    trials = re.findall(r"^round +(\d+) trial (\d): (PROMOTED|rejected) +gain ([-+][\d.]+) \(99.2% CI ([-+][\d.]+) "
                        r"to", out.stdout, re.M)
    assert [(int(t[0]), int(t[1])) for t in trials] == [(6, 1), (6, 2), (7, 1), (7, 2)]  # after 5 rounds: new draws
    rounds = {int(t[0]) for t in trials if t[2] == "PROMOTED"}
    promoted = sum(t[2] == "PROMOTED" for t in trials)
    assert f"null=seeds: {len(rounds)} of 2 rounds promoted" in out.stdout
    assert f"{promoted} of 4 trials; each trial at level 99.17%" in out.stdout
    gains = [float(t[3]) for t in trials]
    margins = [float(t[3]) - float(t[4]) for t in trials]
    summary = re.search(r"the null's gain: mean ([-+][\d.]+), sd ([\d.]+) \(se [\d.]+\); the gate's margin: "
                        r"mean ([\d.]+)", out.stdout)
    assert summary, out.stdout[-1000:]
    assert float(summary[1]) == pytest.approx(sum(gains) / 4, abs=2e-4)
    assert float(summary[3]) == pytest.approx(sum(margins) / 4, abs=2e-4) and float(summary[3]) >= 0


def test_init_must_be_a_checkpoint_folder(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "false_promotion.py"), "--init",
                          str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "not a checkpoint folder (no config.json)" in out.stderr, out.stderr[-500:]


def test_main_needs_an_edit_to_restore(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "false_promotion.py"), "--main",
                          "learning_rate: 5.0e-5"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "--main needs --edit" in out.stderr, out.stderr[-500:]


@pytest.mark.slow
def test_an_edit_restoring_a_weakened_main_trains_main_s_arm_at_the_weakened_value(tmp_path: Path, cli_env) -> None:
    from evotrainer.harness.repo import HarnessRepo

    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], cli_env)
    main_before = HarnessRepo(run / "harness").sha("main")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "false_promotion.py"), "--run-dir", str(run),
                          "--rounds", "1", "--steps", "1", "--seeds", "1", "--probe", "40",
                          "--main", "learning_rate: 5.0e-5", "--edit", "learning_rate: 1.0e-4"],
                         env=cli_env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "main='learning_rate: 5.0e-5' edit='learning_rate: 1.0e-4': " in out.stdout, out.stdout[-1000:]
    assert "the gate's power at the edit's worth; goal >= 80% at +3 points" in out.stdout  # not the null's goal
    repo = HarnessRepo(run / "harness")
    assert repo.sha("main") == main_before  # the run's own main is untouched
    weak = repo.show_file("candidates/power-main-learning_rate", "harness.yaml")
    edit = repo.show_file("candidates/power-edit-learning_rate", "harness.yaml")
    assert "learning_rate: 5.0e-5  # main's arm under --main" in weak
    assert "learning_rate: 1.0e-4  # the edit under test" in edit and "5.0e-5" not in edit
    assert repo.sha("candidates/power-edit-learning_rate~1") == repo.sha("candidates/power-main-learning_rate")
