"""The backtest: candidate and main replayed on retained rollouts in the sandbox; only passing edits promote.

Each test commits a real edit to a real harness repo and judges it with ``run_backtest`` on synthetic rollouts
whose ground truth (``verified``) is known, so every verdict here can be checked by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.playbook import find
from evotrainer.config import BacktestConfig, SandboxConfig
from evotrainer.contracts import Candidate
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import HarnessRepo, seed_dir
from evotrainer.judge.checks import run_backtest
from sandbox import SandboxLimits
from tests.conftest import VIEW_CHECKING_FILTERS, rollouts, tasks_for

LIMITS = SandboxLimits(memory_mb=1024, cpu_s=60, call_timeout_s=5)
SANDBOX = SandboxConfig(limits=LIMITS)
SETTINGS = BacktestConfig(bootstrap=100, test_timeout_s=4)


@pytest.fixture
def repo(tmp_path: Path) -> HarnessRepo:
    return HarnessRepo.create(tmp_path / "harness", "math")


@pytest.fixture
def rows() -> list[dict]:
    """40 groups of 4: most all-wrong (dead), some mixed, a few all-right."""
    groups = []
    for g in range(40):
        if g % 5 == 0:
            groups.append([("9", True), ("8", False), ("9", True), ("7", False)])
        elif g % 5 == 1:
            groups.append([("9", True)] * 4)
        else:
            groups.append([("1", False), ("12", False), ("3", False), ("x", False)])
    return rollouts(groups)


def _commit(repo: HarnessRepo, edits: dict[str, str], variable: str, metric: str, direction: str,
            intervention: str = "custom") -> Candidate:
    cand = Candidate(branch="candidates/phase-1-1", base_sha=repo.sha("main"), diagnosis_id="d1-1",
                     intervention=intervention, hypothesis="if X then Y because Z", variable=variable,
                     target_metric=metric, direction=direction, expected=f"{metric} {direction}",
                     rollback="revert", files=sorted(edits))
    cand.sha = repo.commit_candidate(cand.branch, cand.base_sha, edits, f"{variable}: test", "body", {})
    return cand


def _judge(repo: HarnessRepo, cand: Candidate, rows: list[dict]):
    return run_backtest(repo, cand, rows, tasks_for(rows), main_sha=repo.sha("main"), settings=SETTINGS,
                        sandbox=SANDBOX, hide=[])


def test_a_filter_that_only_drops_zero_advantage_groups_is_rejected_as_no_effect(repo, rows):
    """Negative control: dropping all-equal groups moves kept_dead_ratio 0.8 -> 0 by construction, but every rollout
    that trains keeps its advantage, so the update is unchanged (up to the loss's scale): "no effect"."""
    edits = find("math", "drop_zero_variance_groups").edit({"filters.py": repo.show_file("main", "filters.py")},
                                                           read_knobs(repo.path), {})
    cand = _commit(repo, edits, "filters.keep_group", "kept_dead_ratio", "down", "drop_zero_variance_groups")
    report = _judge(repo, cand, rows)
    assert report.verdict == "reject" and report.reasons[0].startswith("effect: no effect"), report.reasons
    target = next(c for c in report.checks if c.name == "target:kept_dead_ratio")
    assert (target.base, target.candidate) == (pytest.approx(32 / 40), 0.0) and "informational" in target.detail
    assert report.sandbox in ("unshare", "bwrap", "docker", "process")


def test_an_oversample_edit_alone_is_not_no_effect(repo, rows):
    """``oversample`` changes the batch training generates (more groups to refill from), which a replay of retained
    rollouts cannot show: alone, with keep-all filters, it still changes the update and goes on to its trial."""
    knobs = repo.show_file("main", "harness.yaml")
    cand = _commit(repo, {"harness.yaml": knobs.replace("oversample: 1 ", "oversample: 2 ")}, "harness.yaml:oversample",
                   "kept_dead_ratio", "down")
    effect = next(c for c in _judge(repo, cand, rows).checks if c.name == "effect")
    assert effect.passed and "oversample" in effect.detail, effect


def test_without_trials_the_target_on_replay_decides(repo, rows):
    edits = find("math", "drop_zero_variance_groups").edit({"filters.py": repo.show_file("main", "filters.py")},
                                                           read_knobs(repo.path), {})
    cand = _commit(repo, edits, "filters.keep_group", "kept_dead_ratio", "down", "drop_zero_variance_groups")
    report = run_backtest(repo, cand, rows, tasks_for(rows), main_sha=repo.sha("main"), sandbox=SANDBOX, hide=[],
                          settings=SETTINGS.model_copy(update={"trial_steps": 0}))
    target = next(c for c in report.checks if c.name == "target:kept_dead_ratio")
    assert target.passed and "informational" not in target.detail  # it moved; the no-effect check still rejects
    assert [r.split(":")[0] for r in report.reasons] == ["effect"]


def test_a_reward_that_splits_dead_groups_passes_the_safety_checks(repo, rows):
    """Partial credit gives all-wrong groups reward spread: it changes the update, keeps the ordering against
    verified, and goes on to the A/B trial (run by the loop's Testbed)."""
    edit = find("math", "partial_credit_reward").edit(
        {n: repo.show_file("main", n) for n in ("rewards.py", "harness.yaml")}, read_knobs(repo.path), {})
    cand = _commit(repo, edit, "rewards.closeness", "dead_group_ratio", "down", "partial_credit_reward")
    report = _judge(repo, cand, rows)
    assert report.verdict == "promote", report.reasons
    effect = next(c for c in report.checks if c.name == "effect")
    assert effect.passed and effect.candidate > 0


def test_reward_edit_that_crashes_is_rejected_with_its_reason(repo, rows):
    src = repo.show_file("main", "rewards.py").replace(
        'return 1.0 if', 'return 1 / 0 if')
    cand = _commit(repo, {"rewards.py": src}, "rewards.correct", "dead_group_ratio", "down")
    report = _judge(repo, cand, rows)
    assert report.verdict == "reject"
    assert any("ZeroDivisionError" in r for r in report.reasons), report.reasons
    assert repo.sha("main") == cand.base_sha


def test_edit_that_crashes_only_on_real_rollouts_fails_replay(repo, rows):
    # passes the harness's own tests (they never see a completion 'x') but crashes when replayed
    src = repo.show_file("main", "filters.py").replace(
        "def keep_rollout(rollout: dict) -> bool:\n    return True",
        "def keep_rollout(rollout: dict) -> bool:\n    return int(rollout['completion']) >= 0")
    cand = _commit(repo, {"filters.py": src}, "filters.keep_rollout", "kept_fraction", "down")
    report = _judge(repo, cand, rows)
    assert report.verdict == "reject"
    assert any(r.startswith("replay:") and "ValueError" in r for r in report.reasons), report.reasons


def test_edit_that_hangs_is_stopped_and_rejected(repo, rows):
    src = repo.show_file("main", "filters.py").replace(
        "def keep_group(group: list[dict]) -> bool:\n    return True",
        "def keep_group(group: list[dict]) -> bool:\n    while True:\n        pass")
    cand = _commit(repo, {"filters.py": src}, "filters.keep_group", "kept_dead_ratio", "down")
    report = _judge(repo, cand, rows)
    assert report.verdict == "reject"
    # the harness's own tests call keep_group first: their time limit (backtest.test_timeout_s) stops it
    assert any(r.startswith("self_tests") and "exceeded 4s and was killed" in r for r in report.reasons), report.reasons


def test_reward_hack_is_caught_by_ordering_against_verified(repo, rows):
    # a "looser" correctness reward that also pays an answer of 7: main's own tests (which a candidate cannot
    # weaken) do not notice, but a wrong answer now scores like a right one
    src = repo.show_file("main", "rewards.py").replace(
        'return 1.0 if _answer(sample["completion"]) == sample["task"]["answer"] else 0.0',
        'text = _answer(sample["completion"])\n'
        '    return 1.0 if text in (sample["task"]["answer"], "7") else 0.0')
    cand = _commit(repo, {"rewards.py": src}, "rewards.correct", "dead_group_ratio", "down")
    report = _judge(repo, cand, rows)
    assert report.verdict == "reject"
    assert any(r.startswith("ordering_violations") for r in report.reasons), report.reasons
    assert any(r.startswith("reward_verified_auc") for r in report.reasons), report.reasons


def test_broken_knobs_are_rejected_before_any_code_runs(repo, rows):
    text = repo.show_file("main", "harness.yaml").replace("group_size: 8", "group_size: 0")
    cand = _commit(repo, {"harness.yaml": text}, "harness.yaml:group_size", "dead_group_ratio", "down")
    report = _judge(repo, cand, rows)
    assert report.verdict == "reject"
    assert report.reasons[0].startswith("knobs_valid: harness.yaml: group_size")


def test_filters_see_the_same_rollout_fields_in_replay_as_in_training(repo, rows, tmp_path):
    from evotrainer.judge.replay import replay
    from sandbox import HarnessWorker

    cand = _commit(repo, {"filters.py": VIEW_CHECKING_FILTERS}, "filters.keep_rollout", "kept_fraction", "down")
    harness = repo.export(cand.sha, tmp_path / "candidate")
    with HarnessWorker(harness, limits=LIMITS) as worker:  # raises HarnessError if the view differs
        out = replay(worker, harness, rows, tasks_for(rows))
    assert all(r["kept"] for r in out["rows"])  # test_trainer runs the same filter in a real GRPO phase


def test_a_diagnostic_already_out_of_bounds_on_main_may_improve_but_not_worsen():
    from evotrainer.judge.checks import _diag_checks

    high = {"m": {"value": 0.9, "min": 0.1, "max": 0.5}}  # above its max on main
    assert _diag_checks(high, {"m": {"value": 0.6}})[0].passed  # better, though still out of bounds
    assert _diag_checks(high, {"m": {"value": 0.9}})[0].passed
    assert not _diag_checks(high, {"m": {"value": 0.95}})[0].passed
    low = {"m": {"value": 0.05, "min": 0.1, "max": 0.5}}  # below its min on main
    assert _diag_checks(low, {"m": {"value": 0.08}})[0].passed and _diag_checks(low, {"m": {"value": 0.3}})[0].passed
    assert not _diag_checks(low, {"m": {"value": 0.01}})[0].passed
    inside = {"m": {"value": 0.3, "min": 0.1, "max": 0.5}}
    assert not _diag_checks(inside, {"m": {"value": 0.6}})[0].passed


def test_dynamic_sampling_is_one_variable_and_its_refill_cut_is_not_a_dropped_signal(repo):
    """DAPO's dynamic sampling (a filter dropping groups without spread plus ``oversample: 2``) is one variable, and
    its replay keeps only the step's prompt count of the kept groups: the spare ones are the refill's extra
    generation, not verified-correct rollouts the edit takes away, so it goes on to the A/B trial."""
    from evotrainer.judge.variables import covers

    # batches of 4 groups: 3 with reward spread and 1 all right, so half the batch (2 groups) leaves a spread group
    # spare; the all-right group's correct rollouts train with advantage 0 on main and not at all on the candidate
    rows = rollouts([[("9", True), ("8", False), ("9", True), ("7", False)] if g % 4 else [("9", True)] * 4
                     for g in range(40)])
    files = {n: repo.show_file("main", n) for n in ("filters.py", "harness.yaml")}
    edits = find("math", "dynamic_sampling").edit(files, read_knobs(repo.path), {})
    assert sorted(edits) == ["filters.py", "harness.yaml"] and "oversample: 2" in edits["harness.yaml"]
    cand = _commit(repo, edits, "filters.keep_group", "kept_dead_ratio", "down", "dynamic_sampling")
    report = _judge(repo, cand, rows)
    assert report.verdict == "promote", report.reasons  # the safety checks pass; the trial decides
    checks = {c.name: c for c in report.checks}
    assert checks["variable"].passed and checks["verified_dropped"].passed
    assert checks["verified_dropped"].candidate == checks["verified_dropped"].base == pytest.approx(4 / 10)
    assert checks["effect"].passed and checks["effect"].candidate > 0
    assert covers("filters.keep_group", "harness.yaml:oversample")
    assert not covers("filters.keep_group", "harness.yaml:temperature")
    assert not covers("rewards.closeness", "harness.yaml:oversample")
    # with main's filter already dropping those groups, only the refill budget changes
    dropped = find("math", "drop_zero_variance_groups").edit(files, read_knobs(repo.path), {})
    only = find("math", "dynamic_sampling").edit({**files, **dropped}, read_knobs(repo.path), {})
    assert sorted(only) == ["harness.yaml"]
    # and on a main that has dynamic sampling, dropping those groups again is nothing to propose
    assert find("math", "drop_zero_variance_groups").edit({**files, **edits}, read_knobs(repo.path), {}) is None


def test_a_curriculum_edit_that_brings_back_levels_the_rollouts_never_held_is_not_no_effect(repo, rows):
    """Main samples only level 4, so the retained rollouts hold level 4 alone. An edit that gives levels 1-3 weight
    again changes what training samples (the RL pool has every level), though no retained rollout trains otherwise:
    it must reach its trial, not be rejected as "no effect"."""
    from agents.move_kit import set_yaml_entry
    from evotrainer.rollouts import level_history
    from tests.conftest import task

    text = repo.show_file("main", "harness.yaml")
    for level in "123":
        text = set_yaml_entry(text, "curriculum_weights", level, "0.0")
    repo.commit_candidate("candidates/phase-0-1", repo.sha("main"), {"harness.yaml": text}, "starve", "b", {})
    repo.promote("candidates/phase-0-1", "Promote", "h", {})
    only4 = [dict(r, difficulty="4", task_id=f"train-4-{r['group_id']}") for r in rows]
    tasks = {r["task_id"]: task(0, "4") | {"id": r["task_id"]} for r in only4}
    tasks.update({f"train-{lv}-{i}": task(i, lv) for lv in "123" for i in range(3)})  # the pool holds every level
    edits = find("math", "reweight_curriculum").edit({"harness.yaml": repo.show_file("main", "harness.yaml")},
                                                     repo.knobs("main"),
                                                     {"level_stats": level_history(only4)})
    cand = _commit(repo, edits, "harness.yaml:curriculum_weights", "dead_group_ratio", "down", "reweight_curriculum")
    report = run_backtest(repo, cand, only4, tasks, main_sha=repo.sha("main"), settings=SETTINGS, sandbox=SANDBOX,
                          hide=[])
    effect = next(c for c in report.checks if c.name == "effect")
    assert effect.passed and "curriculum's mix" in effect.detail, effect


def test_a_turn_cap_edit_is_not_no_effect_and_every_knob_replay_does_not_apply_counts_as_acting():
    """``max_turns`` changes how far a rollout runs, which a replay of retained rollouts cannot show: raising it is
    never "no effect" (the tools demo's raise_max_turns was, while the list of such knobs missed it). The knobs that
    act outside replay are every knob but those replay applies, so a new knob cannot be missed again."""
    from evotrainer.harness.knobs import Knobs
    from evotrainer.judge.checks import _REPLAYED_KNOBS, _TRAINING_KNOBS, effect_check

    assert set(_TRAINING_KNOBS) | set(_REPLAYED_KNOBS) == set(Knobs.model_fields)
    assert not set(_TRAINING_KNOBS) & set(_REPLAYED_KNOBS) and "max_turns" in _TRAINING_KNOBS
    knobs = read_knobs(seed_dir("tools"))
    main = {"knobs": knobs, "rows": [], "mix": {}}
    cand = {"knobs": knobs.model_copy(update={"max_turns": (knobs.max_turns or 2) + 1}), "rows": [], "mix": {}}
    check = effect_check(main, cand, Candidate(branch="b", sha="s", base_sha="m", diagnosis_id="d",
                                               intervention="raise_max_turns", hypothesis="h",
                                               variable="harness.yaml:max_turns", target_metric="turn_cap_rate",
                                               direction="down", expected="e", rollback="r", files=["harness.yaml"]))
    assert check.passed and "max_turns" in check.detail, check
    assert not effect_check(main, {**main}, Candidate(branch="b", sha="s", base_sha="m", diagnosis_id="d",
                                                       intervention="x", hypothesis="h", variable="filters.keep_group",
                                                       target_metric="kept_dead_ratio", direction="down",
                                                       expected="e", rollback="r", files=["filters.py"])).passed
