"""``evotrainer backtest RUN_DIR REF [--json]``: exit 0 would promote, 1 rejected, 2 could not run (one line).

The run directory is made without training (``tests/backtest_world.py``: one phase of synthetic rollouts on real
tasks); the commits are written by hand with plain git in a worktree of the run's harness repo, as a person would,
never through the project's helpers. The backtest is the real one (sandbox, replay, safety checks). Exit 0 and 1
run the installed command in a subprocess; the many ways it cannot run go through typer's in-process runner (the
same command function, no start-up cost). A 1 must only ever mean "rejected": every failure (a broken harness repo,
a ref that names no commit, a git command that fails, an unreadable rollout file) is a 2 with one line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evotrainer import config as C
from evotrainer.cli import app
from evotrainer.rundir import RunDir
from tests.backtest_world import HACK_REWARDS, NUMERIC_REWARDS, make_run
from tests.conftest import cli


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=A Person", "-c", "user.email=person@example.org", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def commit_by_hand(rd: RunDir, branch: str, files: dict[str, str], message: str) -> str:
    """A branch off main with ``files`` changed, committed in a worktree with plain git; its sha."""
    wt = rd.root.parent / f"wt-{branch}"
    git("worktree", "add", "-q", "-b", branch, str(wt), "main", cwd=rd.harness)
    for name, text in files.items():
        (wt / name).write_text(text)
    git("commit", "-q", "-a", "-m", message, cwd=wt)
    sha = git("rev-parse", "HEAD", cwd=wt)
    git("worktree", "remove", str(wt), cwd=rd.harness)
    return sha


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> RunDir:
    rd = make_run(tmp_path_factory.mktemp("backtest-cli") / "run")
    commit_by_hand(rd, "by-hand", {"rewards.py": NUMERIC_REWARDS}, "Numeric answers: +12 and 012 are 12")
    commit_by_hand(rd, "fix/hack", {"rewards.py": HACK_REWARDS},
                   "Reward any completion that holds the answer\n\nMore credit for near misses.\n\n"
                   "Variable: rewards.correct\nHypothesis: partial answers deserve credit\n"
                   "Expected: reward_verified_auc up\n")
    return rd


def refs_and_notes(rd: RunDir) -> tuple[str, str]:
    return git("for-each-ref", cwd=rd.harness), git("notes", "--ref=backtest", "list", cwd=rd.harness)


def test_a_hand_written_fix_would_promote_exit_0_json(run: RunDir, cli_env: dict) -> None:
    before = refs_and_notes(run)
    proc = cli(["backtest", str(run.root), "by-hand", "--json"], cli_env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["exit"] == 0 and out["verdict"] == "promote" and out["report"]["verdict"] == "promote"
    cand = out["candidate"]
    assert cand["sha"] == git("rev-parse", "by-hand", cwd=run.harness) and cand["branch"] == "by-hand"
    # no trailers: no declared variable (the check infers it), the subject as hypothesis, the default target
    assert cand["variable"] == "" and cand["hypothesis"] == "Numeric answers: +12 and 012 are 12"
    assert cand["files"] == ["rewards.py"] and cand["target_metric"] == "reward_verified_auc"
    checks = {c["name"]: c for c in out["report"]["checks"]}
    assert checks["variable"]["passed"] and "changes rewards.correct" in checks["variable"]["detail"]
    assert checks["effect"]["passed"] and all(c["passed"] for c in checks.values())
    assert "judged on 160 rollouts of phase(s) 1" in out["reason"] and "A/B trial would still decide" in out["reason"]
    assert "no Target trailer and no Expected '<metric> up|down': the target is the default" in out["reason"]
    assert refs_and_notes(run) == before  # nothing of the run changed: no note, no branch


def test_a_hand_written_reward_hack_is_rejected_exit_1(run: RunDir, cli_env: dict) -> None:
    proc = cli(["backtest", str(run.root), "fix/hack"], cli_env, timeout=300, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = " ".join(proc.stdout.split())  # the table wraps at the terminal's width
    assert "FAIL main_tests" in text and "test_known_reward_hack" in text
    assert "fix/hack (rewards.correct): rejected: " in text and "Traceback" not in proc.stderr


def test_the_json_of_a_rejection_names_the_trailers_and_the_reasons(run: RunDir) -> None:
    result = CliRunner().invoke(app, ["backtest", str(run.root), "fix/hack", "--json"])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["verdict"] == "reject" and out["candidate"]["variable"] == "rewards.correct"
    assert out["candidate"]["hypothesis"] == "partial answers deserve credit"
    assert "no Target trailer: the target is read from its Expected trailer" in out["reason"]
    assert any(r.startswith("main_tests:") and "test_known_reward_hack" in r for r in out["report"]["reasons"])


def _copy(run: RunDir, tmp_path: Path) -> RunDir:
    shutil.copytree(run.root, tmp_path / "run", symlinks=True)
    return RunDir(tmp_path / "run")


def _no_git(rd: RunDir) -> str:
    shutil.rmtree(rd.harness / ".git")
    (rd.harness / ".git").mkdir()
    return "by-hand"


def _lost_tree(rd: RunDir) -> str:
    """A branch whose commit is there but its tree object is gone (a damaged clone): ``git diff`` fails on it."""
    tree = git("rev-parse", "fix/hack^{tree}", cwd=rd.harness)
    blob = git("hash-object", "-w", "--stdin", cwd=rd.harness)  # an empty file, so the tree below is new
    listing = git("ls-tree", tree, cwd=rd.harness) + f"\n100644 blob {blob}\tNOTES.txt\n"
    lost = subprocess.run(["git", "mktree"], cwd=rd.harness, input=listing, capture_output=True, text=True,
                          check=True).stdout.strip()
    child = git("commit-tree", lost, "-p", "main", "-m", "on a lost tree", cwd=rd.harness)
    git("update-ref", "refs/heads/damaged", child, cwd=rd.harness)
    (rd.harness / ".git" / "objects" / lost[:2] / lost[2:]).unlink()
    return "damaged"


def _no_rollouts(rd: RunDir) -> str:
    shutil.rmtree(rd.rollouts)
    rd.rollouts.mkdir()
    return "by-hand"


def _corrupt_rollouts(rd: RunDir) -> str:
    rd.rollout_file(1).write_bytes(b"not parquet at all")
    return "by-hand"


CANNOT = [  # (id, prepare the copied run -> ref, words of the reason)
    ("no such ref", lambda rd: "no-such-branch", ("'no-such-branch' is not a branch, tag or commit",)),
    ("a tree, not a commit", lambda rd: "main^{tree}", ("is not a branch, tag or commit",)),
    ("main itself", lambda rd: "main", ("same files as main", "nothing to judge")),
    ("harness is not a git repo", _no_git, ("is not a git repository",)),
    ("a git command fails", _lost_tree, ("git diff failed (exit 128)",)),
    ("no retained rollouts", _no_rollouts, ("no retained rollouts",)),
    ("unreadable rollouts", _corrupt_rollouts, ("phase-0001.parquet",)),
]


@pytest.mark.parametrize("prepare, words", [pytest.param(p, w, id=i) for i, p, w in CANNOT])
def test_when_it_cannot_run_it_exits_2_with_one_line(run: RunDir, tmp_path: Path, prepare, words) -> None:
    rd = _copy(run, tmp_path)
    ref = prepare(rd)
    result = CliRunner().invoke(app, ["backtest", str(rd.root), ref])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), (result.exception, result.output)
    line = result.output.strip()
    assert "\n" not in line and line.startswith(f"could not backtest {ref}: "), line
    assert all(w in line for w in words), line
    out = json.loads(CliRunner().invoke(app, ["backtest", str(rd.root), ref, "--json"]).stdout)
    assert out["exit"] == 2 and out["verdict"] == "error" and out["reason"] == line.split(": ", 1)[1]


def test_a_folder_that_is_no_run_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["backtest", str(tmp_path), "main"])
    assert result.exit_code == 2 and "not a run directory" in result.output and "\n" not in result.output.strip()


def test_the_replay_takes_at_most_replay_batches_batches(run: RunDir, tmp_path: Path) -> None:
    """``evotrainer backtest`` replays on the same bounded rows as the loop: whole batches, at most
    ``backtest.replay_batches`` of them (the world's phase has 10 batches of 4 groups of 4)."""
    rd = _copy(run, tmp_path)
    rd.save_config(C.apply_overrides(rd.load_config(), ["backtest.replay_batches=4"]))
    result = CliRunner().invoke(app, ["backtest", str(rd.root), "by-hand", "--json"])
    assert result.exit_code == 0, result.output
    assert "judged on 64 rollouts of phase(s) 1" in json.loads(result.stdout)["reason"]


def test_the_target_is_the_one_the_engineer_committed_read_from_the_commit_alone(run: RunDir, tmp_path: Path) -> None:
    """The Engineer's commit carries its target (the ``Target`` trailer): ``evotrainer backtest REF`` reads it back
    as committed, direction included, where the Expected text is free prose (an LLM's, a subtraction's). Older
    commits without it fall back to an Expected trailer that opens with the metric, then to the default."""
    from agents.engineer import commit
    from agents.roles import EngineerContext
    from evotrainer.contracts import Candidate, Diagnosis
    from evotrainer.harness.repo import HarnessRepo, target_trailer
    from evotrainer.judge.ref import DEFAULT_TARGET, candidate_for, target

    repo = HarnessRepo(_copy(run, tmp_path).harness)
    main = repo.sha("main")
    ctx = EngineerContext(phase=3, round=1, repo=repo, base_sha=main, knobs=repo.knobs(main), domain="math")
    d = Diagnosis(id="d1", layer="signal", failure_mode="dead_groups", statement="most groups carry no signal",
                  severity=0.5, confidence=0.5, status="confirmed")
    cand = Candidate(branch="candidates/phase-3-1", base_sha=main, diagnosis_id="d1", intervention="by-test",
                     hypothesis="If X, Y, because Z", variable="rewards.correct", target_metric="kept_dead_ratio",
                     direction="up", expected="fewer groups without signal reach the update", rollback="revert")
    commit(ctx, d, cand, {"rewards.py": NUMERIC_REWARDS}, "rewards.correct: numeric", "a test edit")
    read = candidate_for(repo, cand.branch)
    assert (read.target_metric, read.direction) == ("kept_dead_ratio", "up") and read.variable == "rewards.correct"
    # the order: Target, then an Expected that opens with "<metric> up|down", then the default; a Target that does
    # not read (no direction) falls through, saying so
    assert target({**target_trailer("dev accuracy", "down"), "Expected": "kept_dead_ratio up"}) == (
        "dev accuracy", "down", "")
    assert target({"Target": "kept_dead_ratio sideways", "Expected": "kept_dead_ratio up by a lot"})[:2] == (
        "kept_dead_ratio", "up")
    assert target({"Expected": "fewer dead groups"})[:2] == DEFAULT_TARGET and target({})[2]
