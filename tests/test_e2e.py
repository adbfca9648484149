"""End to end: `evotrainer init` + `evotrainer run` for 2 phases through the real trainer service process.

This is what a user does: the CLI starts a trainer service (a separate FastAPI process) which trains the tiny
policy with TRL's GRPOTrainer, logs every rollout to parquet and evaluates on the held-out split; the
built-in agents diagnose, edit the harness repo and backtest in the sandbox; `status`, `log` and `show` read it
all back. The test then checks what a user would check afterwards, including that no trainer process is left.
"""

from __future__ import annotations

import json
from pathlib import Path

import git
import pandas as pd
import psutil
import pytest

from evotrainer.contracts import Rollout
from evotrainer.harness.repo import parse_trailers
from tests.conftest import FAST, cli


def init_args(run_dir: Path, phases: int, extra: list[str] = ()) -> list[str]:
    sets = [a for o in [*FAST, f"phases={phases}", *extra] for a in ("--set", o)]
    return ["init", str(run_dir), "--domain", "math", *sets]


def trainer_processes(run_dir: Path) -> list[psutil.Process]:
    """Trainer service processes that belong to ``run_dir`` (started with its port file)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "evotrainer.trainer.service" in cmd and str(run_dir) in cmd:
            out.append(p)
    return out


def check_finished_run(run_dir: Path, phases: int, env: dict) -> dict:
    """Everything a finished run must show; shared with the resume test. Returns `status --json`."""
    status = json.loads(cli(["status", str(run_dir), "--json"], env).stdout)
    assert status["state"] == "done" and status["phase"] == phases, status
    assert sorted(status["accuracy"]) == [str(p) for p in range(1, phases + 1)]
    for phase, accuracy in status["accuracy"].items():  # what status shows is what the trainer published
        result = json.loads((run_dir / "checkpoints" / f"phase-{int(phase):04d}" / "result.json").read_text())
        assert accuracy == result["eval"]["accuracy"] and result["eval"]["n"] == status["eval_n"] == 40
        assert round(accuracy * 40, 6) == int(round(accuracy * 40))  # a share of 40 scored items
    baseline = json.loads((run_dir / "baseline.json").read_text())  # the starting policy, measured by the service
    assert status["baseline_accuracy"] == baseline["held_out"]["accuracy"] and baseline["held_out"]["n"] == 40
    assert baseline["dev"]["n"] == result["dev"]["n"] > 0  # and on the dev split, which decisions read

    # every rollout of every phase, with the Rollout fields, exactly once
    per_phase = 6 * 4 * 8  # steps x prompts x group size of the FAST config
    for phase in range(1, phases + 1):
        frame = pd.read_parquet(run_dir / "rollouts" / f"phase-{phase:04d}.parquet")
        assert list(frame.columns) == list(Rollout.model_fields)
        assert len(frame) >= per_phase // 2 and frame.groupby(["group_id", "sample_idx"]).size().max() == 1
        assert set(frame["phase"]) == {phase} and frame["verified"].dtype == bool
        assert (frame.loc[~frame["kept"], "advantage"] == 0).all()
        assert (run_dir / "checkpoints" / f"phase-{phase:04d}" / "result.json").is_file()

    # the harness repo: main is clean, every merge carries its trailers and a passing backtest
    repo = git.Repo(run_dir / "harness")
    assert repo.active_branch.name == "main" and not repo.is_dirty(untracked_files=True)
    assert not (Path(repo.git_dir) / "MERGE_HEAD").exists()
    assert {t.name for t in repo.tags} >= {f"phase-{p}" for p in range(1, phases + 1)}
    for commit in repo.iter_commits("main"):
        if len(commit.parents) == 2:
            trailers = parse_trailers(commit.message)
            assert {"Diagnosis", "Hypothesis", "Variable", "Expected", "Backtest"} <= set(trailers)
            assert trailers["Backtest"].startswith("promote:")
            note = json.loads(repo.git.notes("--ref=backtest", "show", commit.parents[1].hexsha))
            assert note["verdict"] == "promote" and all(c["passed"] for c in note["checks"])

    # the harness log agrees with the repo: every candidate judged (or not judged, saying why: another of its round
    # passed first), rejections kept with reasons
    entries = json.loads(cli(["log", str(run_dir), "--json"], env).stdout)
    for e in entries:
        assert e["verdict"] in ("promote", "reject", "not judged") and e["reasons"], e
        assert e["diagnosis"] and e["hypothesis"] and e["variable"], e
        assert repo.is_ancestor(e["sha"], "main") == (e["state"] == "promoted")
        if e["state"] == "rejected":
            assert e["branch"] in repo.heads  # rejected candidates stay as branches
    assert status["candidates"] == len(entries)

    # the audit trail names every node of every phase
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    done = {(e["node"], e["phase"]) for e in events if e["kind"] == "node"}
    for phase in range(1, phases + 1):
        assert {("train", phase), ("diagnose", phase), ("critique", phase), ("librarian", phase)} <= done
        calls = {e["agent"] for e in events if e.get("agent") and e.get("phase") == phase}
        assert {"diagnostician", "critic", "librarian"} <= calls, calls  # every agent call, with its model
        made = [e for e in events if e["kind"] == "candidate" and e["phase"] == phase]
        assert not made or {"engineer", "backtester"} <= calls, calls
    assert not trainer_processes(run_dir), "a trainer service outlived its run"
    assert not (run_dir / "trainer.json").exists()
    return status


@pytest.mark.slow  # a full 2-phase run through the CLI (3 minutes); the fast suite runs the pieces
def test_two_phase_run_through_the_real_trainer_service(tmp_path: Path, cli_env):
    run_dir = tmp_path / "run"
    cli(init_args(run_dir, phases=2), cli_env)
    assert json.loads(cli(["status", str(run_dir), "--json"], cli_env).stdout)["state"] == "initialized"
    proc = cli(["run", str(run_dir)], cli_env)
    out = " ".join(proc.stdout.split())
    assert "starting policy: held-out accuracy" in out and "vs start, 95% CI" in out
    assert "phase 1 held-out accuracy" in out and "phase 2 held-out accuracy" in out
    assert "what the loop's decisions read" in out  # each phase shows its dev score beside the held-out one
    assert "candidate harness edits" in out or "diagnoses: none" in out
    check_finished_run(run_dir, 2, cli_env)

    # the policy was warmed up and cached, and each phase continued from the previous checkpoint
    assert (run_dir / "policy" / "base" / "config.json").is_file()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "trainer" and e.get("pid") for e in events)

    # show explains any candidate: its message, diff and backtest report
    entries = json.loads(cli(["log", str(run_dir), "--json"], cli_env).stdout)
    assert entries, "the run proposed no candidate"
    shown = cli(["show", str(run_dir), entries[0]["branch"]], cli_env).stdout
    assert "backtest" in shown and "+++" in shown and entries[0]["sha"] in shown
    # the loop evolved: a diagnosis was confirmed, a candidate committed, backtested with a note, and logged
    critiques = [e for e in events if e["kind"] == "node_end" and e["node"] == "critique"]
    assert any(status == "confirmed" for e in critiques for status, _ in e["verdicts"].values()), critiques
    assert entries and all(e["verdict"] in ("promote", "reject", "not judged") for e in entries), entries
    repo = git.Repo(run_dir / "harness")
    note = json.loads(repo.git.notes("--ref=backtest", "show", entries[0]["sha"]))
    assert note["branch"] == entries[0]["branch"] and note["checks"] and note["verdict"] == entries[0]["verdict"]
    assert any(e["kind"] == "verdict" and e["branch"] == entries[0]["branch"] for e in events)
    log_text = " ".join(cli(["log", str(run_dir)], cli_env).stdout.split())
    assert entries[0]["branch"] in log_text and entries[0]["verdict"] in log_text

    bad = cli(["show", str(run_dir), "no-such-ref"], cli_env, check=False)
    assert bad.returncode == 2 and "unknown ref" in bad.stdout

    # raising the budget trains on from where the run stopped, without retraining finished phases
    cli(["run", str(run_dir), "--phases", "3"], cli_env)
    check_finished_run(run_dir, 3, cli_env)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    trained = [e["phase"] for e in events if e["kind"] == "node" and e["node"] == "train"]
    assert trained == [1, 2, 3]
    assert len([e for e in events if e["kind"] == "baseline"]) == 1  # the starting policy is evaluated once
