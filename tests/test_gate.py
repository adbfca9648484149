"""The gate's negative controls: edits that must not be promoted, judged as the loop judges them.

The replay checks run in the sandbox on synthetic rollouts; the A/B trial trains real arms in process (the tiny
policy, a few generated batches, the same seeds and tasks for both arms) and scores them on the probe split. An
edit that only rescales the loss, or main against itself, never reaches a trial ("no effect"); a reward that breaks
ties with noise and a curriculum that skips the hardest level change the updates, pass the safety checks, and are
then rejected by the trial.
"""

from __future__ import annotations

import pytest

from agents.playbook import find
from evotrainer import config as C
from evotrainer.config import BacktestConfig, PolicyConfig, SandboxConfig, TrainingConfig
from evotrainer.contracts import Candidate
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import HarnessRepo
from evotrainer.judge.checks import run_backtest, trial_verdict, with_check
from evotrainer.rundir import RunDir
from tests.conftest import FAST, rollouts, tasks_for

NOISE_REWARD = '''

def tie_break(sample):
    """Pure noise: a tiny hash of the completion, so no two completions of a group score alike."""
    import hashlib

    return int(hashlib.sha256(sample["completion"].encode()).hexdigest()[:8], 16) / 16 ** 8 * 1e-3


COMPONENTS = {"correct": correct, "tie_break": tie_break}
'''
SETTINGS = BacktestConfig(bootstrap=100, test_timeout_s=10, trial_steps=8, trial_seeds=2, probe_size=200)
TRAINING = TrainingConfig(prompts_per_step=4, eval_max_new_tokens=8)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, policy_cache) -> RunDir:
    import os

    os.environ["EVOTRAINER_CACHE"] = str(policy_cache)
    rd = RunDir(tmp_path_factory.mktemp("gate") / "run")
    rd.init(C.apply_overrides(C.parse({}), FAST), log=lambda _: None)
    rd.ensure_policy(log=lambda _: None)
    return rd


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    groups = [[("9", True), ("8", False)] * 2 if g % 3 == 0 else [("1", False), ("12", False), ("3", False), ("x", False)]
              for g in range(60)]
    return rollouts(groups)


def _candidate(repo: HarnessRepo, name: str, edits: dict, variable: str, metric: str) -> Candidate:
    cand = Candidate(branch=f"candidates/gate-{name}", base_sha=repo.sha("main"), diagnosis_id="d1-1",
                     intervention=name, hypothesis="If X, Y, because Z", variable=variable, target_metric=metric,
                     direction="down", expected="down", rollback="revert", files=sorted(edits))
    cand.sha = repo.commit_candidate(cand.branch, cand.base_sha, edits, name, "gate test", {})
    return cand


def _pilots(rd: RunDir, sha: str) -> list:
    from evotrainer.trainer.grpo import run_pilot
    from evotrainer.trainer.wire import PhaseRequest

    return [run_pilot(PhaseRequest(run_dir=str(rd.root), phase=1, harness_sha=sha, pilot=True, replicate=r,
                                   init_checkpoint=str(rd.root / "policy" / "base"), steps=SETTINGS.trial_steps,
                                   training=TRAINING,
                                   probe_size=SETTINGS.probe_size,
                                   sandbox=SandboxConfig(backend="process")))
            for r in range(SETTINGS.trial_seeds)]


@pytest.fixture(scope="module")
def main_arm(run_dir: RunDir) -> list:
    return _pilots(run_dir, HarnessRepo(run_dir.harness).sha("main"))


@pytest.fixture(scope="module")
def start(run_dir: RunDir) -> dict[str, str]:
    """The answers of the checkpoint both arms train from (the starting policy) on the probe, scored as a pilot's
    probe is: what a trial's arms must have changed to say anything."""
    from evotrainer.domains import get_domain
    from evotrainer.trainer.model import evaluate_as_configured, load_policy

    model, tokenizer, _ = load_policy(str(run_dir.root / "policy" / "base"), "cpu", "float32", False, 0)
    return evaluate_as_configured(model, tokenizer, get_domain("math"), run_dir.probe_tasks(SETTINGS.probe_size),
                                  "cpu", TRAINING, PolicyConfig(), answers=True).answers


def _judged(run_dir: RunDir, rows: list[dict], cand: Candidate, main_arm: list, start: dict[str, str]):
    repo = HarnessRepo(run_dir.harness)
    report = run_backtest(repo, cand, rows, tasks_for(rows), main_sha=repo.sha("main"), settings=SETTINGS,
                          sandbox=SandboxConfig(), hide=[])
    if report.verdict == "promote":  # what the loop's Testbed does next
        report = with_check(report, trial_verdict(main_arm, _pilots(run_dir, cand.sha), start=start))
    return report


def test_main_against_itself_never_reaches_a_trial(run_dir, rows, main_arm, start):
    repo = HarnessRepo(run_dir.harness)
    same = repo.show_file("main", "filters.py") + "\n# a comment changes the text, not the harness\n"
    report = _judged(run_dir, rows, _candidate(repo, "itself", {"filters.py": same}, "filters.py",
                                               "kept_fraction"), main_arm, start)
    assert report.verdict == "reject" and any(r.startswith("effect: no effect") for r in report.reasons)
    assert not any(c.name.startswith("trial:") for c in report.checks), report.reasons


def test_a_loss_rescaling_filter_alone_is_no_effect(run_dir, rows, main_arm, start):
    repo = HarnessRepo(run_dir.harness)
    edit = find("math", "drop_zero_variance_groups").edit({"filters.py": repo.show_file("main", "filters.py")},
                                                          read_knobs(repo.path), {})
    report = _judged(run_dir, rows, _candidate(repo, "rescale", edit, "filters.keep_group", "kept_dead_ratio"),
                     main_arm, start)
    assert report.verdict == "reject" and any(r.startswith("effect: no effect") for r in report.reasons)
    assert not any(c.name.startswith("trial:") for c in report.checks)


def test_a_pure_noise_tie_break_passes_safety_and_loses_the_trial(run_dir, rows, main_arm, start):
    repo = HarnessRepo(run_dir.harness)
    rewards = repo.show_file("main", "rewards.py").replace('COMPONENTS = {"correct": correct}', NOISE_REWARD.strip())
    cand = _candidate(repo, "noise", {"rewards.py": rewards}, "rewards.py", "dead_group_ratio")
    report = _judged(run_dir, rows, cand, main_arm, start)
    target = next(c for c in report.checks if c.name == "target:dead_group_ratio")
    assert target.candidate < target.base  # it "cures" dead groups by construction...
    safety = [c for c in report.checks if not c.name.startswith("trial:")]
    assert all(c.passed for c in safety), report.reasons  # ...passes every safety check and changes the update...
    trial = next(c for c in report.checks if c.name.startswith("trial:"))
    assert report.verdict == "reject" and not trial.passed, trial  # ...and the trial does not see a gain


def test_a_curriculum_that_skips_the_hardest_level_loses_the_trial(run_dir, rows, main_arm, start):
    repo = HarnessRepo(run_dir.harness)
    knobs = repo.show_file("main", "harness.yaml").replace('"4": 1.0', '"4": 0.0')
    cand = _candidate(repo, "skip-hard", {"harness.yaml": knobs}, "harness.yaml:curriculum_weights",
                      "dead_group_ratio")
    report = _judged(run_dir, rows, cand, main_arm, start)
    # the safety checks already refuse a curriculum that stops sampling a level; were it let through, the trial
    # would judge it on the probe split, which keeps every level
    assert report.verdict == "reject", report.reasons
    assert any(r.startswith(("curriculum_coverage", "trial:probe_accuracy")) for r in report.reasons), report.reasons


TRAINING_ONLY_REWARD = '''

def patience(sample):
    """Behaves in the backtest's replay; in training (the trainer's worktree) it tries the network."""
    if "evo-wt-" in __file__:
        import socket

        try:
            socket.create_connection(("192.0.2.1", 80), timeout=0.1)
        except OSError:
            pass
    return -0.01 * sample["completion_tokens"]


COMPONENTS = {"correct": correct, "patience": patience}
'''


def test_code_that_misbehaves_only_while_training_is_rejected_by_the_trial(run_dir, rows, main_arm, start):
    repo = HarnessRepo(run_dir.harness)
    rewards = repo.show_file("main", "rewards.py").split("\nCOMPONENTS")[0] + TRAINING_ONLY_REWARD
    knobs = repo.show_file("main", "harness.yaml").replace("  correct: 1.0", "  correct: 1.0\n  patience: 0.5")
    cand = _candidate(repo, "patience", {"rewards.py": rewards, "harness.yaml": knobs}, "rewards.patience",
                      "dead_group_ratio")
    report = _judged(run_dir, rows, cand, main_arm, start)
    assert all(c.passed for c in report.checks if not c.name.startswith("trial:")), report.reasons
    assert report.verdict == "reject" and report.reasons[0].startswith("trial:sandbox_attempts: network"), \
        report.reasons
    assert "192.0.2.1" in report.reasons[0] and "rewards.py" in report.reasons[0]
