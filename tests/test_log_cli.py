"""``evotrainer log RUN_DIR``: one line per candidate (branch, variable, verdict, the reason that decided, realized
effect), at most 100 characters whatever the terminal; ``evotrainer show RUN_DIR REF`` the whole record.

The run directory is made without training (``tests/backtest_world.py``); its candidates are committed on the run's
harness repo, and their backtest notes are made by the judge's own rule (``with_check``: verdict and reasons from the
checks), with long fields to cut: a rejection whose first failed check says more than a line holds, a promotion
decided by an A/B trial with a realized effect, a pass not promoted, keep/discard's branch, one not judged yet.
"""

from __future__ import annotations

import json

import pytest

from evotrainer.contracts import BacktestReport, Check
from evotrainer.harness.repo import HarnessRepo
from evotrainer.judge.checks import TRIAL, with_check
from evotrainer.rundir import RunDir
from tests.backtest_world import NUMERIC_REWARDS, make_run
from tests.conftest import cli

LONG = ("self_tests: test_numbers_with_a_plus_sign_score_like_plain_ones: AssertionError: expected 1.0 for '+12' "
        "and '012', got 0.0 on 3 of 4 cases")


def judged(repo: HarnessRepo, branch: str, sha: str, *checks: Check) -> dict:
    """The backtest note of ``sha``: a passing replay, then ``checks`` added by the judge's rule."""
    report = BacktestReport(branch=branch, candidate_sha=sha, base_sha=repo.sha("main"),
                            target_metric="reward_verified_auc", checks=[Check(name="knobs_valid", passed=True)],
                            noise_floor=0.01, verdict="promote", reasons=["all 1 checks passed"], runtime_s=1.0,
                            rollouts=200, sandbox="process")
    for check in checks:
        report = with_check(report, check)
    note = report.model_dump(mode="json")
    repo.add_note(sha, note)
    return note


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> RunDir:
    rd = make_run(tmp_path_factory.mktemp("log-cli") / "run")
    repo = HarnessRepo(rd.harness)
    main = repo.sha("main")
    seed_filters = repo.show_file("main", "filters.py")

    def commit(branch: str, variable: str, edits: dict[str, str]) -> str:
        return repo.commit_candidate(branch, main, edits, f"{variable}: an edit", "Why it should help.",
                                     {"Diagnosis": "d1-1 reward/format: '+12' scores 0", "Variable": variable,
                                      "Hypothesis": "if the reward reads numbers, correct answers score",
                                      "Expected": "reward_verified_auc up"})

    rejected = commit("candidates/phase-1-1", "rewards.correct_numeric_answers_of_every_form",
                      {"rewards.py": NUMERIC_REWARDS})
    judged(repo, "candidates/phase-1-1", rejected, Check(name="self_tests", passed=False, detail=LONG[12:]),
           Check(name="replay_time", passed=False, candidate=99.0, threshold=60.0))
    won = commit("candidates/phase-1-2", "rewards.correct", {"rewards.py": NUMERIC_REWARDS})
    judged(repo, "candidates/phase-1-2", won, Check(
        name=TRIAL, passed=True, base=0.4, candidate=0.431, threshold=0.41,
        detail="gain +0.0310 (95% CI +0.0100 to +0.0520, 40 probe tasks x 1 seed(s), paired)"))
    repo.promote("candidates/phase-1-2", "Promote candidates/phase-1-2", "test", {})
    repo.add_note(won, {"counterfactual": True, "gain": 0.025, "low": 0.005, "high": 0.045, "won": True,
                        "lost": False, "measured_in_phase": 2, "summary": "reward_verified_auc 0.610 -> 0.742 (as "
                        "promised); held-out accuracy 45.0% with the edit vs 42.5% without it (same checkpoint and "
                        "seeds): +2.5% (95% CI +0.5% to +4.5%, paired on 40 tasks x 1 seed(s)); win"}, ref="effect")
    passed = commit("candidates/phase-1-3", "filters.keep_group", {"filters.py": seed_filters + "\n# kept\n"})
    judged(repo, "candidates/phase-1-3", passed, Check(name=TRIAL, passed=True, detail="gain +0.0120 (95% CI "
                                                       "+0.0010 to +0.0230, 40 probe tasks x 1 seed(s), paired)"))
    kd = commit("candidates/phase-1-kd", "harness.yaml:temperature", {"filters.py": seed_filters + "\n# kd\n"})
    judged(repo, "candidates/phase-1-kd", kd, Check(name="effect", passed=False, detail="no effect: every "
                                                    "rollout would train with the same advantage as on main"))
    commit("candidates/phase-2-1", "rewards.correct", {"filters.py": seed_filters + "\n# pending\n"})
    return rd


def test_log_is_one_line_per_candidate_within_100_columns_in_an_80_column_terminal(run: RunDir, cli_env: dict):
    entries = json.loads(cli(["log", str(run.root), "--json"], cli_env).stdout)
    assert [e["branch"] for e in entries] == ["candidates/phase-1-1", "candidates/phase-1-2", "candidates/phase-1-3",
                                              "candidates/phase-1-kd", "candidates/phase-2-1"]
    out = cli(["log", str(run.root)], {**cli_env, "COLUMNS": "80"}).stdout
    lines = out.splitlines()
    assert all(len(line) <= 100 for line in lines), "\n".join(lines)
    assert lines[0].split()[:3] == ["branch", "variable", "verdict"] and "evotrainer show" in lines[-1]
    rows = lines[1:-1]
    assert len(rows) == len(entries)  # nothing wrapped: one line per candidate, no more
    for e, row in zip(entries, rows):
        assert row.startswith(e["branch"] + " ") and f" {e['verdict']} " in row, row
    rejected, won, passed, kd, pending = rows
    assert "self_tests: test_numbers_with" in rejected and "…  " in rejected  # cut, not wrapped
    assert "rewards.correct…" in rejected  # a long variable is cut too
    assert "replay_time" not in rejected  # the first failed check decided; the others are in `show`
    assert "promoted, trial +3.1%" in won and won.endswith("+2.5%, win")
    assert "not promoted, trial +1.2%" in passed and passed.endswith(" -")
    assert "effect: no effect: every rollout" in kd
    assert "pending" in pending and "not judged yet" in pending


def test_show_prints_the_whole_record_every_reason_whole(run: RunDir, cli_env: dict):
    out = cli(["show", str(run.root), "candidates/phase-1-1"], {**cli_env, "COLUMNS": "80"}).stdout
    assert LONG in out  # the reason the log cut, whole and on one line
    assert "replay_time: None -> 99.0 (threshold 60.0)" in out  # and the second failed check's
    assert "Variable: rewards.correct_numeric_answers_of_every_form" in out and "+++ b/rewards.py" in out
    out = cli(["show", str(run.root), "phase-1-2"], {**cli_env, "COLUMNS": "80"}).stdout
    assert "all 2 checks passed; trial:probe_accuracy: gain +0.0310 (95% CI +0.0100 to +0.0520" in out
    assert "realized effect: reward_verified_auc 0.610 -> 0.742" in " ".join(out.split())


def test_the_log_keeps_its_json(run: RunDir, cli_env: dict):
    entries = json.loads(cli(["log", str(run.root), "--json"], cli_env).stdout)
    assert all(list(e) == ["phase", "branch", "sha", "state", "subject", "diagnosis", "hypothesis", "variable",
                           "expected", "verdict", "reasons", "realized_effect"] for e in entries)
    assert [e["state"] for e in entries] == ["rejected", "promoted", "passed, not promoted", "rejected", "pending"]
    assert entries[0]["reasons"] == [LONG, "replay_time: None -> 99.0 (threshold 60.0)"]
    assert entries[1]["realized_effect"].endswith("; win") and entries[4]["verdict"] == "pending"


def test_the_deciding_reason_and_the_effect_in_a_few_words_for_every_note_shape():
    from evotrainer.report.history import decided, effect_brief

    assert decided("pending", None) == "not judged yet"
    assert decided("rejected", {"verdict": "reject", "reasons": ["could not judge: OSError: disk full"],
                                "checks": []}) == "could not judge: OSError: disk full"
    # trials off: the target metric decided, and the report's summary says how it moved
    assert decided("promoted", {"verdict": "promote", "checks": [{"name": "target:reward_verified_auc"}],
                                "reasons": ["all 9 checks passed; reward_verified_auc 0.6 -> 0.7"]}) == \
        "promoted: all 9 checks passed; reward_verified_auc 0.6 -> 0.7"
    assert effect_brief(None) == "-"
    assert effect_brief({"counterfactual": True, "gain": -0.031, "won": False, "lost": True}) == "-3.1%, loss"
    assert effect_brief({"counterfactual": True, "gain": 0.004, "won": False, "lost": False}) == "+0.4%, within noise"
    assert effect_brief({"counterfactual": False, "accuracy_before": 0.425, "accuracy_after": 0.45, "won": True}) == \
        "42.5% -> 45.0%, win"
    assert effect_brief({"counterfactual": False, "accuracy_before": 0.425, "accuracy_after": 0.40,
                         "won": False}) == "42.5% -> 40.0%"
    assert effect_brief({"summary": "an older note"}) == "an older note"


def test_log_and_show_of_no_run_directory_are_one_line(tmp_path, cli_env: dict):
    for args in (["log", str(tmp_path)], ["log", str(tmp_path), "--json"], ["show", str(tmp_path), "phase-1-1"]):
        proc = cli(args, cli_env, check=False)
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        assert proc.returncode == 2 and lines == [f"error: {tmp_path}: not a run directory (run `evotrainer init "
                                                  f"{tmp_path}` first)"], proc.stdout + proc.stderr
