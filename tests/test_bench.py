"""``evotrainer bench``: four arms on equal budgets, compared with static paired per held-out task and seed.

The fast test checks the comparison on made-up outcomes whose answer is known; the slow one runs every arm for real
(tiny policy, two short phases) and checks that the arms differ only where they should.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evotrainer.bench.arms import expand_arms
from evotrainer.bench.runner import markdown, summarize
from evotrainer.contracts import EvalResult


def _final(correct: set[int], n: int = 200) -> EvalResult:
    return EvalResult(accuracy=len(correct) / n, n=n, items={f"eval-{i}": float(i in correct) for i in range(n)})


def test_each_arm_is_compared_with_static_paired_per_task_and_seed():
    base = {s: set(range(60 + s)) for s in (0, 1, 2)}
    outcomes = {
        "static": {s: {"final": _final(base[s]), "wall_s": 100.0, "training_s": 90.0} for s in base},
        "evotrainer": {s: {"final": _final(base[s] | set(range(100, 130))), "wall_s": 150.0, "training_s": 90.0}
                       for s in base},
        "keep_discard": {s: {"final": _final(base[s]), "wall_s": 100.0, "training_s": 95.0} for s in base},
    }
    arms = summarize(outcomes, [0, 1, 2], 3)["arms"]
    assert arms["evotrainer"]["vs_static"]["diff"] == pytest.approx(30 / 200)
    assert arms["evotrainer"]["vs_static"]["low"] > 0  # the same 30 tasks gained on every seed
    assert arms["keep_discard"]["vs_static"] == {"diff": 0.0, "low": 0.0, "high": 0.0, "n": 200}
    assert arms["evotrainer"]["outside_training"] == pytest.approx(0.4) and "vs_static" not in arms["static"]
    table = markdown({"arms": arms, "seeds": [0, 1, 2], "phases": 3, "wall_s": 1.0})
    assert "| evotrainer | " in table and "+15.0% (" in table and "static_rerun" not in table
    arms["static_rerun"] = arms["keep_discard"]
    assert "static_rerun is static trained again" in markdown({"arms": arms, "seeds": [0], "phases": 3, "wall_s": 1})


def test_with_static_rerun_each_arm_is_compared_with_static_on_its_stream_counting_training_noise():
    def run(correct: set[int]) -> dict:
        return {"final": _final(correct), "wall_s": 100.0, "training_s": 90.0}

    outcomes = {"static": {s: run(set(range(60 + 4 * s))) for s in (0, 1, 2)},  # seed 1's static run was lucky:
                "static_rerun": {s: run(set(range(60 + 4 * s - 16 * (s == 1)))) for s in (0, 1, 2)},  # -16
                "evotrainer": {s: run(set(range(60 + 4 * s)) | set(range(100, 105))) for s in (0, 1, 2)}}
    arms = summarize(outcomes, [0, 1, 2], 3)["arms"]
    assert "vs_static_runs" not in arms["static"] and "vs_static_runs" not in arms["static_rerun"]
    vs, paired = arms["evotrainer"]["vs_static_runs"], arms["evotrainer"]["vs_static"]
    # static on the arm's own stream, not the static runs' mean (that would add seed 1's static luck: +13 tasks)
    assert vs["diff"] == pytest.approx(5 / 200) and vs["df"] == 5 and vs["seeds"] == 3
    assert vs["run_sd"] == pytest.approx((2 * (8 / 200) ** 2 / 3) ** 0.5)  # a pair 16 tasks apart, 2 equal: 3 df
    assert paired["low"] > 0 and vs["low"] < 0  # 5 tasks clear the item bootstrap, not training noise
    table = markdown({"arms": arms, "seeds": [0, 1, 2], "phases": 3, "wall_s": 1.0})
    assert "training noise counted (95% CI) |" in table and "one run's training noise at 3.3% (sd)" in table
    row = next(line for line in table.splitlines() if line.startswith("| evotrainer |"))
    assert f"| {vs['diff']:+.1%} ({vs['low']:+.1%} to {vs['high']:+.1%}) |" in row
    static_row = next(line for line in table.splitlines() if line.startswith("| static |"))
    assert static_row.count("|") == row.count("|")  # every row has every column


def test_more_static_reruns_measure_the_noise_and_an_arm_identical_to_static_scores_zero():
    def run(correct: set[int]) -> dict:
        return {"final": _final(correct), "wall_s": 100.0, "training_s": 90.0}

    shifts = {"static": 0, "static_rerun": -16, "static_rerun2": -8}  # three runs of one harness per seed
    outcomes = {arm: {s: run(set(range(60 + 4 * s + d))) for s in (0, 1, 2)} for arm, d in shifts.items()}
    outcomes["evotrainer"] = {s: run(set(range(60 + 4 * s))) for s in (0, 1, 2)}
    arms = summarize(outcomes, [0, 1, 2], 3)["arms"]
    vs = arms["evotrainer"]["vs_static_runs"]
    assert all("vs_static_runs" not in arms[a] for a in shifts)
    assert vs["diff"] == 0.0 and vs["df"] == 2 + 3 * 2  # identical to static on its stream; 2 + 2 per seed
    assert vs["run_sd"] == pytest.approx(8 / 200)  # runs 0, -16, -8 tasks: sd 8 tasks on every seed
    table = markdown({"arms": arms, "seeds": [0, 1, 2], "phases": 3, "wall_s": 1.0})
    assert "the spread of the 3 static runs (static, static_rerun, static_rerun2)" in table
    assert "static_rerun, static_rerun2 are static trained again" in table
    # without static, the reruns are plain arms compared with nothing but static's absence
    del outcomes["static"]
    assert all("vs_static_runs" not in e for e in summarize(outcomes, [0, 1, 2], 3)["arms"].values())


def test_reruns_add_static_runs_beside_static_rerun_and_bad_names_are_refused(tmp_path, cli_env):
    from evotrainer import config as C
    from evotrainer.bench.runner import arm_config, run_bench
    from tests.conftest import cli

    assert expand_arms(["evotrainer", "static_rerun", "static"], 3) == [
        "static", "static_rerun", "static_rerun2", "static_rerun3", "evotrainer"]  # arm order
    assert expand_arms(["static", "evotrainer"], 3) == ["static", "evotrainer"]  # no static_rerun, no reruns
    assert expand_arms(["static_rerun4", "static"]) == ["static", "static_rerun4"]  # named alone
    cfg = arm_config("static_rerun3", 1, 2, None, [])
    assert (cfg.training.rerun, cfg.evolution.mode, cfg.seed) == (3, "static", 1)
    assert arm_config("static_rerun", 1, 2, None, []).training.rerun == 1
    for arms, reruns, message in ((["static_rerun1"], 1, r"unknown arm\(s\) \['static_rerun1'\]"),
                                  (["static_rerun02", "nope"], 1, r"\['static_rerun02', 'nope'\] \(allowed: static"),
                                  (["static", "static_rerun"], 0, r"--reruns: 0 \(at least 1")):
        with pytest.raises(C.ConfigError, match=message):
            run_bench(tmp_path / "bench", arms, [0], 2, reruns=reruns)
    proc = cli(["bench", str(tmp_path / "bench"), "--arms", "static,static_rerun", "--reruns", "-1"], cli_env,
               check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and "error: --reruns: -1 (at least 1" in out and "Traceback" not in out
    assert not (tmp_path / "bench").exists()  # refused before anything is made


@pytest.mark.slow
def test_every_arm_trains_the_same_budget_and_only_the_evolving_arms_edit(tmp_path, policy_cache, monkeypatch):
    import git

    from evotrainer.bench.runner import run_bench
    from evotrainer.console import Reporter
    from evotrainer.report.history import phase_results
    from evotrainer.rollouts import read_rollouts
    from evotrainer.rundir import RunDir
    from tests.conftest import FAST

    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    arms = ["static", "static_rerun", "reference", "keep_discard", "evotrainer"]
    summary = run_bench(tmp_path / "bench", arms, [0], 2, overrides=FAST, reporter=Reporter(quiet=True), reruns=2)
    assert list(summary["arms"]) == ["static", "static_rerun", "static_rerun2", *arms[2:]]
    data = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert data["arms"]["evotrainer"]["vs_static"]["n"] == 40 and (tmp_path / "bench" / "bench.md").is_file()
    # the last arm's report (written after each of its phases) draws every arm of its seed on one chart
    page = (tmp_path / "bench" / "evotrainer-seed0" / "report.html").read_text()
    assert 'data-chart="bench"' in page and "evotrainer (this run)" in page and "keep_discard" in page
    steps = {}
    for arm in summary["arms"]:
        rd = RunDir(tmp_path / "bench" / f"{arm}-seed0")
        steps[arm] = sum(r.steps for r in phase_results(rd))
        history = list(git.Repo(rd.harness).iter_commits("main"))
        if arm in ("static", "static_rerun", "static_rerun2", "reference"):
            assert len(history) == 1, arm  # never edited
        if arm == "keep_discard":
            assert any(c.message.startswith("Try candidates/phase-1-kd") for c in history)
        if arm == "reference":
            assert "oversample: 2" in (rd.harness / "harness.yaml").read_text()
    assert len(set(steps.values())) == 1  # the same training budget in every arm
    # the rerun trains the same harness on other draws, and is scored on the same held-out tasks as static
    static, *reruns = (RunDir(tmp_path / "bench" / f"{arm}-seed0") for arm in ("static", "static_rerun",
                                                                               "static_rerun2"))
    prompts = [{r["task_id"] for r in read_rollouts(rd.rollout_file(1))} for rd in (static, *reruns)]
    assert len({frozenset(p) for p in prompts}) == 3  # each run its own draws
    assert all(static.eval_tasks() == rd.eval_tasks() for rd in reruns)
    assert all(static.baseline().items == rd.baseline().items for rd in reruns)  # one starting policy
    assert data["arms"]["evotrainer"]["vs_static_runs"]["df"] == 2  # one seed, three static runs
    assert "static_rerun, static_rerun2 are static trained again" in (tmp_path / "bench" / "bench.md").read_text()


def test_a_bench_folder_made_with_other_settings_is_refused_before_anything_trains(tmp_path):
    from evotrainer import config as C
    from evotrainer.bench.arms import run_dir_name
    from evotrainer.bench.runner import arm_config, check_same_settings, run_bench
    from evotrainer.console import Reporter
    from evotrainer.rundir import RunDir

    small = ["training.train_pool_size=400", "training.eval_size=40"]
    made = RunDir(tmp_path / "bench" / run_dir_name("static", 0))
    made.init(arm_config("static", 0, 2, None, [*small, "training.steps_per_phase=500"]), log=lambda _: None)
    events = made.events.path.read_text()
    default = C.parse({}).training.steps_per_phase
    with pytest.raises(C.ConfigError, match=r"static-seed0 was made with other settings: training.steps_per_phase "
                                            rf"500 \(this bench: {default}\); use a new bench folder"):
        run_bench(tmp_path / "bench", ["static", "evotrainer"], [0], 3, overrides=small, reporter=Reporter(quiet=True))
    assert made.events.path.read_text() == events and not (tmp_path / "bench" / "evotrainer-seed0").exists()
    # the same settings with a larger phase budget are accepted: every arm trains on (checked, not run here)
    check_same_settings(made, arm_config("static", 0, 3, None, [*small, "training.steps_per_phase=500"]))
    # ... and so is one whose name (a label) differs: a run made by hand with an arm's settings, copied in
    renamed = arm_config("static", 0, 2, None, [*small, "training.steps_per_phase=500"])
    renamed = renamed.model_copy(update={"name": "x"})
    check_same_settings(made, renamed)
    # a static run reads none of the evolving loop's settings: a bench that differs only there shares it; an
    # evolving run does read them
    check_same_settings(made, arm_config("static", 0, 2, None, [*small, "training.steps_per_phase=500",
                                                                 "evolution.max_engineer_rounds=3"]))
    evolving = RunDir(tmp_path / "bench" / run_dir_name("evotrainer", 0))
    evolving.init(arm_config("evotrainer", 0, 2, None, small), log=lambda _: None)
    rounds = C.parse({}).evolution.max_engineer_rounds
    with pytest.raises(C.ConfigError, match=rf"evolution.max_engineer_rounds {rounds} \(this bench: 3\)"):
        check_same_settings(evolving, arm_config("evotrainer", 0, 2, None, [*small, "evolution.max_engineer_rounds=3"]))


def test_a_task_mix_file_reaches_every_arm_s_training_pool_and_held_out_split(tmp_path):
    """``--tasks FILE``: config overrides (here a task mix) applied to every arm, so the same bench runs on another
    mix; a wrong key or a file that is not a mapping fails in one line naming the file."""
    from collections import Counter

    from evotrainer import config as C
    from evotrainer.bench.runner import arm_config, load_tasks
    from evotrainer.rundir import RunDir

    mix = tmp_path / "mix.yaml"
    mix.write_text('tasks: {mix: {"1": 1, "4": 3}}\n')
    tasks = load_tasks(mix)
    assert load_tasks(None) is None
    small = ["training.eval_size=400", "training.train_pool_size=400"]
    for arm in ("static", "evotrainer"):
        cfg = arm_config(arm, 1, 2, tasks, small)
        assert cfg.tasks.mix == {"1": 1.0, "4": 3.0} and cfg.seed == 1
    rd = RunDir(tmp_path / "run")
    rd.init(arm_config("static", 1, 2, tasks, small), log=lambda _: None)
    for split in (rd.train_tasks(), rd.eval_tasks()):
        levels = Counter(t["difficulty"] for t in split)
        assert set(levels) == {"1", "4"} and abs(levels["4"] / levels["1"] - 3) < 0.1, levels  # 1 : 3
    for text, says in (("tasks: {mixx: {}}\n", "tasks.mixx"), ("- 1\n", "expected a mapping of config keys"),
                       ("tasks: {mix: [\n", "--tasks")):
        mix.write_text(text)
        with pytest.raises(C.ConfigError, match=says) as err:
            load_tasks(mix)
        assert str(mix) in str(err.value) and "\n" not in str(err.value).strip()
    with pytest.raises(C.ConfigError, match="--tasks"):
        load_tasks(tmp_path / "missing.yaml")


def test_a_run_longer_than_the_bench_is_scored_after_the_bench_s_last_phase(tmp_path):
    """A run trained on to more phases (a bench resumed with a larger --phases, or a run copied in) is scored after
    the bench's last phase like every other arm, not after its own last one, and the table says its time covers
    more."""
    from evotrainer.bench.runner import arm_config, run_outcome
    from evotrainer.contracts import PhaseResult
    from evotrainer.rundir import RunDir

    rd = RunDir(tmp_path / "static-seed0")
    rd.init(arm_config("static", 0, 3, None, ["training.train_pool_size=400", "training.eval_size=40"]),
            log=lambda _: None)
    for phase, correct in ((1, 10), (2, 20), (3, 30)):
        folder = rd.checkpoints / f"phase-{phase}"
        folder.mkdir(parents=True)
        result = PhaseResult(phase=phase, harness_sha="0" * 40, steps=60, eval=_final(set(range(correct))),
                             dev=_final(set()),
                             rollout_path="", checkpoint_path=str(folder), wall_time_s=10.0, tokens=0)
        (folder / "result.json").write_text(result.model_dump_json())
    out = run_outcome(rd, 2)
    assert out["final"].accuracy == 20 / 200 and out["accuracy"] == [10 / 200, 20 / 200]
    assert out["phases_trained"] == 3 and out["training_s"] == 30.0
    other = {"final": _final(set(range(20))), "wall_s": 100.0, "training_s": 20.0, "phases_trained": 2}
    summary = summarize({"static": {0: {**out, "wall_s": 100.0}}, "evotrainer": {0: other}}, [0], 2)
    assert summary["arms"]["evotrainer"]["vs_static"]["diff"] == 0.0  # the same budget: no gain from phase 3
    assert summary["arms"]["static"]["phases_trained"] == {"0": 3} and "phases_trained" not in \
        summary["arms"]["evotrainer"]
    table = markdown({**summary, "seeds": [0], "phases": 2, "wall_s": 1.0})
    assert "static-seed0 trained 3 phases: it is scored after phase 2" in table


def test_seeds_default_to_the_bench_s_kind():
    """`evotrainer bench --calibration` without --seeds runs on the calibration seeds (it was refused: the bench
    seeds were the default either way)."""
    from evotrainer.bench.arms import BENCH_SEEDS, CALIBRATION_SEEDS, check_seeds, parse_seeds

    assert parse_seeds(None) == list(BENCH_SEEDS) and parse_seeds(None, calibration=True) == list(CALIBRATION_SEEDS)
    check_seeds(parse_seeds(None, calibration=True), calibration=True)  # accepted as it is
    assert parse_seeds("0, 2,", calibration=True) == [0, 2]  # given seeds are taken as given (and checked after)
    with pytest.raises(ValueError):
        parse_seeds("0,x")


def test_bench_seeds_and_calibration_seeds_never_meet(tmp_path: Path):
    """Defaults are chosen on calibration seeds; a bench that judges them is refused before anything trains."""
    from evotrainer.bench.arms import BENCH_SEEDS, CALIBRATION_SEEDS
    from evotrainer.bench.runner import run_bench
    from evotrainer.config import ConfigError

    assert not set(BENCH_SEEDS) & set(CALIBRATION_SEEDS)
    with pytest.raises(ConfigError, match=r"--seeds: \[100\] are calibration seeds"):
        run_bench(tmp_path / "b", ["static"], [0, 100], 1)
    with pytest.raises(ConfigError, match=r"--seeds: \[0\] are no calibration seeds"):
        run_bench(tmp_path / "b", ["static"], [0, 101], 1, calibration=True)
    assert not (tmp_path / "b").exists()  # refused before any folder was made


def test_each_arm_reports_the_completions_it_generated_beside_its_steps():
    """Equal steps are not an equal budget when an arm also trains trials and counterfactuals: both are counted."""
    def run(judging: int) -> dict:
        return {"final": _final(set(range(60))), "wall_s": 100.0, "training_s": 90.0,
                "completions": {"phases": 3 * 60 * 256, "judging": judging}}

    arms = summarize({"static": {s: run(0) for s in (0, 1)}, "evotrainer": {s: run(7_680) for s in (0, 1)}},
                     [0, 1], 3)["arms"]
    assert arms["static"]["completions"] == {"phases": 92_160, "judging": 0}
    assert arms["evotrainer"]["completions"] == {"phases": 92_160, "judging": 15_360}
    table = markdown({"arms": arms, "seeds": [0, 1], "phases": 3, "wall_s": 1.0})
    assert "| 92,160 + 15,360 |" in table and "| 92,160 + 0 |" in table
