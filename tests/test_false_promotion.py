"""benchmarks/false_promotion.py: edits that cannot help, judged by the gate's own decision, on a real run folder.

The placebo nulls must be what they claim: each moves its declared target on replay, by construction, and cannot help
(checked here on synthetic rollouts whose ground truth is known: the replay is the loop's own). A tiny round runs the
whole script (the replay on a pilot's rollouts, the confirmation by the loop's rule). Slow: more rounds of main
against itself, and the power mode.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST, ROOT, cli, rollouts, tasks_for

SCRIPT = ROOT / "benchmarks" / "false_promotion.py"


def _script():
    spec = importlib.util.spec_from_file_location("false_promotion", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("null, target, reaches_a_trial", [
    ("placebo-reward", "dead_group_ratio", True),    # it changes every update: the confirmation decides
    ("placebo-filter", "kept_dead_ratio", False),    # what it drops never trained: "no effect", before any trial
])
def test_a_placebo_moves_its_declared_target_on_replay(tmp_path: Path, null: str, target: str,
                                                      reaches_a_trial: bool) -> None:
    from evotrainer.config import BacktestConfig, SandboxConfig
    from evotrainer.harness.repo import HarnessRepo
    from evotrainer.judge.checks import run_backtest

    repo = HarnessRepo.create(tmp_path / "harness", "math")
    groups = [[("9", True), ("8", False)] * 2 if g % 3 == 0 else [("1", False), ("12", False), ("3", False),
                                                                   ("x", False)] for g in range(30)]
    rows = rollouts(groups)
    cand = _script().placebo(repo, repo.sha("main"), null)
    assert cand.target_metric == target and cand.direction == "down"
    report = run_backtest(repo, cand, rows, tasks_for(rows), main_sha=repo.sha("main"),
                          settings=BacktestConfig(bootstrap=100, test_timeout_s=10), sandbox=SandboxConfig(), hide=[])
    moved = next(c for c in report.checks if c.name == f"target:{target}")
    assert moved.candidate < moved.base and moved.detail.startswith("moved as promised"), moved  # by construction
    effect = next(c for c in report.checks if c.name == "effect")
    assert effect.passed == reaches_a_trial, effect.detail
    assert (report.verdict == "promote") == reaches_a_trial, report.reasons  # every other replay check passes


@pytest.mark.slow  # a benchmark script's whole round (init, a trained arm pair, the confirmation): ~30 s
def test_a_tiny_placebo_round_runs_the_replay_and_the_confirmation(tmp_path: Path, cli_env) -> None:
    """One round at a tiny size: the replay on main's first arm's rollouts, the confirmation by the loop's rule, and
    the count with its Wilson interval."""
    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], cli_env)
    out = subprocess.run([sys.executable, str(SCRIPT), "--run-dir", str(run), "--null", "placebo-reward",
                          "--rounds", "1", "--steps", "1", "--seeds", "1", "--probe", "20"],
                         env=cli_env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "the start's answers on 20 probe tasks" in out.stdout
    line = re.search(r"^round  1: (PROMOTED|nothing promoted)  (.*)$", out.stdout, re.M)
    assert line and line[2].startswith("replay passed (target:dead_group_ratio "), out.stdout[-1500:]
    assert re.search(r"; trial:(probe_accuracy|answers_changed): ", line[2]), line[2]
    count = 1 if line[1] == "PROMOTED" else 0
    assert re.search(rf"^null=placebo-reward: {count} of 1 rounds promoted \({count:.1%}, 95% Wilson interval "
                     r"[\d.]+% to [\d.]+%; goal <= 5%\); the confirmation alone passed \d, \d were uninformative; "
                     r"each confirmation at level [\d.]+%, 1 batches x 1 seed\(s\) per arm, 20 probe tasks",
                     out.stdout, re.M), out.stdout[-800:]


@pytest.mark.slow
def test_main_against_itself_prints_each_round_the_rate_and_the_gate_s_margin(tmp_path: Path, cli_env) -> None:
    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], cli_env)
    out = subprocess.run([sys.executable, str(SCRIPT), "--run-dir", str(run), "--rounds", "3", "--first", "5",
                          "--steps", "2", "--seeds", "2", "--probe", "40"],
                         env=cli_env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    rounds = re.findall(r"^round +(\d+): (PROMOTED|nothing promoted)  no edit: no replay; (trial:\w+): (.*)$",
                        out.stdout, re.M)
    assert [int(r[0]) for r in rounds] == [6, 7, 8]  # after 5 rounds: new draws
    promoted = sum(r[1] == "PROMOTED" for r in rounds)
    assert f"null=seeds: {promoted} of 3 rounds promoted" in out.stdout
    decided = [r for r in rounds if r[2] == "trial:probe_accuracy"]
    if len(decided) > 1:
        gains = [float(re.match(r"gain ([-+][\d.]+)", r[3])[1]) for r in decided]
        summary = re.search(r"the null's gain: mean ([-+][\d.]+), sd ([\d.]+) \(se [\d.]+\); the gate's margin: "
                            r"mean ([\d.]+)", out.stdout)
        assert summary and float(summary[1]) == pytest.approx(sum(gains) / len(gains), abs=2e-4)


def test_init_must_be_a_checkpoint_folder(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--init", str(tmp_path / "nowhere")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "not a checkpoint folder (no config.json)" in out.stderr, out.stderr[-500:]


def test_main_needs_an_edit_to_restore(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--main", "learning_rate: 5.0e-5"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "--main needs --edit" in out.stderr, out.stderr[-500:]


@pytest.mark.slow
def test_an_edit_restoring_a_weakened_main_trains_main_s_arm_at_the_weakened_value(tmp_path: Path, cli_env) -> None:
    from evotrainer.harness.repo import HarnessRepo

    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], cli_env)
    main_before = HarnessRepo(run / "harness").sha("main")
    out = subprocess.run([sys.executable, str(SCRIPT), "--run-dir", str(run), "--rounds", "1", "--steps", "1",
                          "--seeds", "1", "--probe", "40", "--main", "learning_rate: 5.0e-5", "--edit",
                          "learning_rate: 1.0e-4"],
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
