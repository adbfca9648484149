"""``evotrainer bench --faults``: each catalogue defect planted in the seed, compared with the clean seed's oracle.

    plan          which run folders a bench makes (shared clean-seed runs once), --arms, unknown names and
                  calibration seeds refused in one line before anything is made
    runs          each run's config (the oracle is the ordinary bench's static), a whole bench through
                  run_fault_bench with training replaced by synthetic results: faults.json/.md written, a finished
                  run reused on the next bench
    summary       on synthetic result.json files and events.jsonl: recovery, an arm identical to static scoring 0
                  exactly, the diagnosis and its phase, the pooled row, the no-harm row, the Markdown rows
    repair        the repairing commit on a real tiny harness repo (create, commit_candidate, promote)
    report        a run in BENCH/<defect>/ sits beside its defect's arms and the clean seed's oracle on one chart

Nothing is trained: ``python -m pytest -q tests/test_fault_bench.py`` takes seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evotrainer import config as C
from evotrainer.bench import faults as fb
from evotrainer.bench.arms import DEFAULT_FAULT_ARMS, arms_beside, expand_fault_arms
from evotrainer.contracts import EvalResult, PhaseResult
from evotrainer.rundir import RunDir

ALL = list(DEFAULT_FAULT_ARMS)
SMALL = ["training.train_pool_size=400", "training.eval_size=40"]


def _final(correct: set[int], n: int = 200) -> EvalResult:
    return EvalResult(accuracy=len(correct) / n, n=n, items={f"eval-{i}": float(i in correct) for i in range(n)})


def _write_results(root: Path, finals: list[EvalResult]) -> None:
    """A run folder's phase results (checkpoints/phase-NNNN/result.json), as a finished run leaves them."""
    for phase, final in enumerate(finals, 1):
        folder = RunDir(root).checkpoint(phase)
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(PhaseResult(
            phase=phase, harness_sha="0" * 40, steps=60, eval=final, dev=_final(set()), rollout_path="",
            checkpoint_path=str(folder), wall_time_s=10.0, tokens=0, completions=100).model_dump_json())


def _events(root: Path, events: list[dict]) -> None:
    with open(root / "events.jsonl", "a") as fh:
        for e in events:
            fh.write(json.dumps(e) + "\n")


# --- the plan ----------------------------------------------------------------------------------------------------
def test_a_two_defect_bench_makes_each_defect_s_runs_and_the_clean_seed_s_runs_once_per_seed():
    runs = fb.plan(fb.parse_faults("truncation,divergence"), expand_fault_arms(ALL), [0, 1])
    clean = {f"clean/{a}-seed{s}" for a in ("oracle", "clean_evotrainer") for s in (0, 1)}
    per_defect = {f"{d}/{a}-seed{s}" for d in ("truncation", "divergence")
                  for a in ("static", "evotrainer", "keep_discard") for s in (0, 1)}
    assert set(runs) == clean | per_defect and len(runs) == 4 + 12  # the shared runs once, not once per defect
    assert list(runs)[:4] == ["clean/oracle-seed0", "clean/clean_evotrainer-seed0", "clean/oracle-seed1",
                              "clean/clean_evotrainer-seed1"]  # trained first: every defect reads them
    assert runs["clean/oracle-seed1"] == (None, "oracle", 1) and runs["divergence/static-seed0"] == (
        "divergence", "static", 0)
    # --arms restricts the arms (the quick form); order and duplicates do not matter
    quick = fb.plan(["truncation"], expand_fault_arms(["oracle", "evotrainer", "static", "static"]), [0])
    assert list(quick) == ["clean/oracle-seed0", "truncation/static-seed0", "truncation/evotrainer-seed0"]
    assert fb.parse_faults("all") == fb.catalogue.names("math") and len(fb.parse_faults("all")) >= 4  # math: default
    assert fb.parse_faults(" truncation , truncation,") == ["truncation"]


def test_unknown_faults_arms_and_calibration_seeds_are_refused_in_one_line_before_anything_is_made(
        tmp_path: Path, cli_env):
    from tests.conftest import cli

    for call, says in ((lambda: fb.parse_faults("truncation,nope"),
                        r"--faults: unknown fault\(s\) \['nope'\] \(known for math: divergence, .*, or all, or "
                        r"generated:N\[@SEED\]\)"),
                       (lambda: fb.parse_faults(" , "), "--faults: no fault given"),
                       (lambda: expand_fault_arms(["static", "reference"]), r"unknown arm\(s\) \['reference'\] for "
                                                                            r"a fault bench \(allowed: static, "),
                       (lambda: fb.run_fault_bench(tmp_path / "b", ["truncation"], ["static"], [0, 100], 1),
                        r"--seeds: \[100\] are calibration seeds"),
                       (lambda: fb.run_fault_bench(tmp_path / "b", ["truncation"], ["static"], [0], 1,
                                                   calibration=True), r"--seeds: \[0\] are no calibration seeds"),
                       (lambda: fb.run_fault_bench(tmp_path / "b", ["truncation"], ["oracle"], [0], 1,
                                                   overrides=["fault=starvation"]), "leave fault and harness unset")):
        with pytest.raises(C.ConfigError, match=says) as err:
            call()
        assert "\n" not in str(err.value)
    assert not (tmp_path / "b").exists()
    proc = cli(["bench", str(tmp_path / "b"), "--faults", "truncation,nope"], cli_env, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and "error: --faults: unknown fault(s) ['nope']" in out and "Traceback" not in out
    assert not (tmp_path / "b").exists()


# --- the runs ----------------------------------------------------------------------------------------------------
def test_each_run_is_an_ordinary_arm_on_the_faulty_or_the_clean_seed_and_the_oracle_is_the_bench_s_static():
    from evotrainer.bench.runner import arm_config

    runs = fb.plan(["truncation"], ALL, [1])
    cfgs = fb.configs(runs, 3, None, SMALL)
    modes = {rel: (c.evolution.mode, c.fault, c.seed, c.phases) for rel, c in cfgs.items()}
    assert modes == {"clean/oracle-seed1": ("static", None, 1, 3),
                     "clean/clean_evotrainer-seed1": ("evolve", None, 1, 3),
                     "truncation/static-seed1": ("static", "truncation", 1, 3),
                     "truncation/evotrainer-seed1": ("evolve", "truncation", 1, 3),
                     "truncation/keep_discard-seed1": ("keep_discard", "truncation", 1, 3)}
    ordinary = arm_config("static", 1, 3, None, SMALL)
    assert cfgs["clean/oracle-seed1"].model_copy(update={"name": ordinary.name}) == ordinary
    assert cfgs["truncation/static-seed1"].name == "faults-truncation-static-seed1"


def test_a_bench_trains_each_run_once_writes_its_tables_and_reuses_finished_runs(tmp_path: Path, monkeypatch):
    """run_fault_bench end to end with training replaced: the runs are initialised from the faulty or the clean
    seed, each trained once (the clean seed's oracle once for both defects), and a second bench reuses them all."""
    import evotrainer.run
    from evotrainer.console import Reporter
    from evotrainer.harness.repo import HarnessRepo

    trained = []

    def train(root, phases, reporter):  # a finished run: results for every phase, state done
        trained.append(Path(root).relative_to(tmp_path / "b").as_posix())
        _write_results(Path(root), [_final(set(range(40 + 20 * ("evotrainer" in str(root)))))] * phases)
        RunDir(root).set_status("done", phase=phases)

    monkeypatch.setattr(evotrainer.run, "run", train)
    args = (tmp_path / "b", ["truncation", "divergence"], ["static", "evotrainer", "oracle"], [0], 1)
    summary = fb.run_fault_bench(*args, overrides=SMALL, reporter=Reporter(quiet=True))
    assert trained == ["clean/oracle-seed0", "truncation/static-seed0", "truncation/evotrainer-seed0",
                       "divergence/static-seed0", "divergence/evotrainer-seed0"]
    data = json.loads((tmp_path / "b" / "faults.json").read_text())
    assert list(data["defects"]) == ["truncation", "divergence"] and data["arm_order"] == ["static", "evotrainer",
                                                                                          "oracle"]
    assert data["defects"]["truncation"]["arms"]["evotrainer"]["vs_static"]["diff"] == pytest.approx(0.1)
    assert (tmp_path / "b" / "faults.md").read_text() == fb.markdown(summary)
    knobs = {rel: HarnessRepo(tmp_path / "b" / rel / "harness").knobs("main") for rel in
             ("clean/oracle-seed0", "truncation/static-seed0", "divergence/static-seed0")}
    assert knobs["truncation/static-seed0"].max_completion_length == 2  # the faulty seed
    assert knobs["clean/oracle-seed0"].max_completion_length == 8 and knobs["clean/oracle-seed0"].learning_rate == 1e-4
    assert knobs["divergence/static-seed0"].learning_rate == pytest.approx(1e-3)
    # the fault bench's own budget sits under --set: its judging as its table was measured, whatever the default's
    cfg = RunDir(tmp_path / "b" / "truncation" / "evotrainer-seed0").load_config()
    assert (cfg.evolution.max_engineer_rounds, cfg.evolution.counterfactual) == (2, True)
    assert data["overrides"] == [*fb.BUDGET, *SMALL] and "training.steps_per_phase=60" in fb.BUDGET
    trained.clear()
    fb.run_fault_bench(*args, overrides=SMALL, reporter=Reporter(quiet=True))
    assert trained == []  # every run finished: cached, nothing trains again


# --- the summary -------------------------------------------------------------------------------------------------
def _synthetic_bench(out: Path) -> None:
    """Two defects x two seeds, every arm, one phase each: truncation costs 40 items (oracle - static) and evotrainer
    wins back 20 (recovery 50%); keep_discard is static exactly; divergence costs nothing (oracle = static);
    clean_evotrainer is the oracle exactly (no harm)."""
    for seed in (0, 1):
        base = set(range(60 + 5 * seed))
        gap = set(range(100, 140))  # what the defect costs
        runs = {"clean/oracle": base | gap, "clean/clean_evotrainer": base | gap,
                "truncation/static": base, "truncation/keep_discard": base,
                "truncation/evotrainer": base | set(range(100, 120)),
                "divergence/static": base | gap, "divergence/keep_discard": base | gap,
                "divergence/evotrainer": base | gap | set(range(150, 160))}
        for rel, correct in runs.items():
            _write_results(out / f"{rel}-seed{seed}", [_final(correct)])


def test_the_summary_gives_recovery_an_exact_zero_for_an_arm_identical_to_static_and_the_diagnosis_phase(
        tmp_path: Path):
    out = tmp_path / "b"
    _synthetic_bench(out)
    diagnose = [{"id": "d1-1", "failure_mode": "dead_groups", "statement": "38% of groups are dead"},
                {"id": "d1-2", "failure_mode": "correct_but_truncated", "statement": "58% of correct answers cut"}]
    _events(out / "truncation" / "evotrainer-seed0", [  # phase 1: the mechanism rejected; phase 2: confirmed
        {"kind": "node_end", "node": "diagnose", "phase": 1, "diagnoses": diagnose},
        {"kind": "node_end", "node": "critique", "phase": 1,
         "verdicts": {"d1-1": ["confirmed", "ok"], "d1-2": ["rejected", "no interval"]}},
        {"kind": "node_end", "node": "diagnose", "phase": 2, "diagnoses": [{**diagnose[1], "id": "d2-1"}]},
        {"kind": "node_end", "node": "critique", "phase": 2, "verdicts": {"d2-1": ["confirmed", "holds"]}}])
    summary = {**fb.collect(out, ["truncation", "divergence"], ALL, [0, 1], 1), "seeds": [0, 1], "phases": 1}
    trunc, div = summary["defects"]["truncation"], summary["defects"]["divergence"]
    # the phases above the bench's (1) are not read: the confirmation in phase 2 comes too late
    assert trunc["diagnosis"]["0"] == {"named": False, "phase": None, "failure_mode": None, "statement": None,
                                       "confirmed": [[1, "dead_groups"]]}
    assert trunc["arms"]["evotrainer"]["vs_static"]["diff"] == pytest.approx(20 / 200)
    assert trunc["arms"]["oracle"]["vs_static"]["diff"] == pytest.approx(40 / 200)
    assert trunc["recovery"] == {"evotrainer": pytest.approx(0.5), "keep_discard": 0.0} and not trunc["recovery_note"]
    assert trunc["arms"]["keep_discard"]["vs_static"] == {"diff": 0.0, "low": 0.0, "high": 0.0, "n": 200}
    assert trunc["mechanism"] == ["truncation", "correct_but_truncated"] and trunc["repair"]["evotrainer"]["0"] is None
    assert div["recovery"] == {"evotrainer": None, "keep_discard": None}
    assert "the defect costs nothing here" in div["recovery_note"]
    pooled = summary["pooled"]
    assert pooled["keep_discard"] == {"diff": 0.0, "low": 0.0, "high": 0.0, "groups": 2, "replicates": 4}
    assert pooled["evotrainer"]["diff"] == pytest.approx((20 / 200 + 10 / 200) / 2) and pooled["evotrainer"]["low"] > 0
    counts = summary["counts"]
    assert counts["evotrainer"] == {"repaired": 2, "of": 2, "mean_recovery": pytest.approx(0.5), "repaired_3pt": 2,
                                    "of_3pt": 2}
    assert counts["keep_discard"]["repaired"] == 0 and counts["keep_discard"]["mean_recovery"] == 0.0
    assert counts["defect_seeds"] == 4 and [x.split(":")[0] for x in counts["left_out"]] == ["divergence seed 0",
                                                                                              "divergence seed 1"]
    row = trunc["per_seed"]["0"]
    assert row["recovery"]["evotrainer"]["value"] == pytest.approx(0.5) and row["repaired"] and row["cost"]
    assert 0 < row["recovery"]["evotrainer"]["low"] <= 0.5 <= row["recovery"]["evotrainer"]["high"] < 1
    assert summary["no_harm"]["clean"]["pooled"] == {"diff": 0.0, "low": 0.0, "high": 0.0, "n": 200}
    assert set(summary["no_harm"]["clean"]["per_seed"]) == {"0", "1"}
    assert summary["named"]["modes"] == {"dead_groups": {"truncation": 1}}
    assert summary["unregistered"] == []  # the catalogue's families ran before the register's baseline
    assert summary["named"]["first"]["truncation"] == {"seeds": 0, "of": 2}

    # with two phases the phase-2 confirmation counts, after phase 2
    for rel in ("clean/oracle", "clean/clean_evotrainer", "truncation/static", "truncation/keep_discard",
                "truncation/evotrainer", "divergence/static", "divergence/keep_discard", "divergence/evotrainer"):
        for seed in (0, 1):
            results = RunDir(out / f"{rel}-seed{seed}").checkpoints
            (results / "phase-0002").mkdir()
            (results / "phase-0002" / "result.json").write_text(
                (results / "phase-0001" / "result.json").read_text().replace('"phase":1', '"phase":2'))
    summary = {**fb.collect(out, ["truncation", "divergence"], ALL, [0, 1], 2), "seeds": [0, 1], "phases": 2}
    named = summary["defects"]["truncation"]["diagnosis"]["0"]
    assert named["named"] and named["phase"] == 2 and named["failure_mode"] == "correct_but_truncated"
    assert named["statement"] == "58% of correct answers cut"
    assert summary["named"]["first"]["truncation"] == {"seeds": 0, "of": 2}  # dead_groups came first, off the card

    table = fb.markdown(summary)
    row = next(line for line in table.splitlines() if line.startswith("| truncation (truncation) | 0 |"))
    assert "| +20.0% (" in row and "| +10.0% (" in row and "| 50% (" in row and "| yes |" in row
    assert "| dead_groups, correct_but_truncated | none |" in row
    div_row = next(line for line in table.splitlines() if line.startswith("| divergence (optimisation) | 1 |"))
    assert "| - (no cost) | yes |" in div_row  # no recovery where the defect costs nothing (a gain all the same)
    assert "- evotrainer: repaired on **2 of 2** defect-seeds" in table and "mean recovery **50%** over" in table
    assert "- left out of the means (2 of 4): divergence seed 0: oracle - static is +0.0%" in table
    assert "| correct_but_truncated | **1** | 0 | 0 |" in table  # the named-matrix: truncation, divergence, clean
    assert "- clean: clean_evotrainer - oracle +0.0% (+0.0% to +0.0%)" in table
    assert "keep_discard - static +0.0% (+0.0% to +0.0%)" in table  # the pooled bootstrap, below, labelled
    assert "## truncation" in table and "## clean seeds (shared by every defect)" in table
    assert "Seed 0: confirmed after phase 2, correct_but_truncated: 58% of correct answers cut" in table
    section = table[table.index("## truncation"):table.index("## divergence")]
    assert "| keep_discard | 31.2% |" in section and "| 400 + 0 |" in section  # the ordinary bench's arm table
    assert "| oracle | 51.2% |" in section


def test_a_diagnosis_counts_only_when_confirmed_and_of_the_mechanism():
    events = [
        {"kind": "node_end", "node": "train", "phase": 1},
        {"kind": "node_end", "node": "diagnose", "phase": 1, "diagnoses": [
            {"id": "d1-1", "failure_mode": "reward_disagreement", "statement": "rewarded but wrong"},
            {"id": "d1-2", "failure_mode": "length_growth", "statement": "longer"}]},
        {"kind": "node_end", "node": "critique", "phase": 1, "verdicts": {"d1-1": ["revised", "say more"],
                                                                          "d1-2": ["confirmed", "ok"]}},
        {"kind": "node_end", "node": "diagnose", "phase": 1, "diagnoses": [  # the next evidence round
            {"id": "d1-1", "failure_mode": "reward_disagreement", "statement": "31% rewarded but wrong"}]},
        {"kind": "node_end", "node": "critique", "phase": 1, "verdicts": {"d1-1": ["confirmed", "holds"],
                                                                          "d9-9": ["confirmed", "unknown id"]}},
    ]
    got = fb.diagnosis(events, ["reward_disagreement"], 3)
    assert got == {"named": True, "phase": 1, "failure_mode": "reward_disagreement",
                   "statement": "31% rewarded but wrong", "confirmed": [[1, "length_growth"],
                                                                        [1, "reward_disagreement"]]}
    assert not fb.diagnosis(events, ["dead_groups"], 3)["named"]
    assert not fb.diagnosis(events[:3], ["reward_disagreement"], 3)["named"]  # revised is not confirmed


# --- the repairing commit ----------------------------------------------------------------------------------------
def _faulty_run(root: Path, fault: str) -> tuple[RunDir, object]:
    """A run folder (config and harness repo) started from the faulty seed, as `init --fault` makes it."""
    from evotrainer.bench.runner import arm_config
    from evotrainer.harness.faults import materialize
    from evotrainer.harness.repo import HarnessRepo

    rd = RunDir(root)
    root.mkdir(parents=True)
    rd.save_config(arm_config("evotrainer", 0, 3, None, [*SMALL, f"fault={fault}"]))
    seed = materialize("math", fault, root.parent / f"{root.name}-seed-harness")
    return rd, HarnessRepo.create(rd.harness, "math", str(seed))


def _promote(rd: RunDir, repo, phase: int, k: int, edits: dict[str, str]) -> str:
    branch = f"candidates/phase-{phase}-{k}"
    repo.commit_candidate(branch, repo.sha("main"), edits, f"edit {k}", "why", {})
    sha = repo.promote(branch, f"Promote {branch}", "why", {})
    rd.events.emit("promoted", phase=phase, branch=branch, main_sha=sha, variable="x")
    return sha


def test_the_repairing_commit_is_the_first_trained_promotion_that_changed_the_overlay(tmp_path: Path):
    from evotrainer.harness.repo import seed_dir

    clean_yaml = (seed_dir("math") / "harness.yaml").read_text()
    # seed 0: a promotion elsewhere (filters.py), then one that restores the seed's budget: clean at the end
    rd, repo = _faulty_run(tmp_path / "truncation" / "evotrainer-seed0", "truncation")
    assert fb.repair(rd, "truncation", 3) == {"commit": None, "at_end": "faulty", "end_ref": "main"}
    filters = repo.read("main", "filters.py") + "\n# keep every rollout\n"
    _promote(rd, repo, 1, 1, {"filters.py": filters})
    # ... and one in the defect's own file that leaves its planted line as it was: no repair either
    faulty = repo.read("main", "harness.yaml")
    _promote(rd, repo, 1, 2, {"harness.yaml": faulty.replace("temperature: 1.0 ", "temperature: 0.9 ")})
    assert fb.repair(rd, "truncation", 3)["commit"] is None
    fixed = _promote(rd, repo, 2, 1, {"harness.yaml": clean_yaml})
    repo.tag("phase-3", "main", "harness that trained phase 3")
    undone = clean_yaml.replace("max_completion_length: 8", "max_completion_length: 2")
    _promote(rd, repo, 3, 1, {"harness.yaml": undone})
    got = fb.repair(rd, "truncation", 3)  # the phase-3 promotion came after the last phase: it trained nothing
    assert got == {"commit": {"sha": fixed, "branch": "candidates/phase-2-1", "phase": 2, "files": ["harness.yaml"]},
                   "at_end": "clean", "end_ref": "phase-3"}
    # seed 1: the budget raised to 5, not the seed's 8: removed, not restored
    rd, repo = _faulty_run(tmp_path / "truncation" / "evotrainer-seed1", "truncation")
    faulty = repo.read("main", "harness.yaml")
    _promote(rd, repo, 1, 1, {"harness.yaml": faulty.replace("max_completion_length: 2", "max_completion_length: 5")})
    got = fb.repair(rd, "truncation", 3)
    assert got["commit"]["phase"] == 1 and got["at_end"] == "changed" and got["end_ref"] == "main"
    assert fb._repair_text(got).startswith("candidates/phase-1-1 ") and fb._repair_text(got).endswith(
        "(after phase 1: harness.yaml), at the end changed")
    assert fb.repair(RunDir(tmp_path / "none"), "truncation", 3) is None


def test_a_defect_s_planted_lines_are_its_own_and_not_its_self_tests():
    assert fb.planted("truncation") == {"harness.yaml": [
        "max_completion_length: 2       # generation budget in tokens (characters for the tiny policy)"]}
    lenient = fb.planted("reward_hacking")
    assert list(lenient) == ["rewards.py"] and lenient["rewards.py"]  # the overlay's tests are not the defect


# --- the report --------------------------------------------------------------------------------------------------
def test_a_run_in_a_defect_s_folder_shows_that_defect_s_arms_and_the_oracle_on_one_chart(tmp_path: Path):
    from evotrainer.report import html
    from evotrainer.report.collect import bench_arms

    out = tmp_path / "b"
    _synthetic_bench(out)
    for path in out.glob("*/*-seed*"):
        (path / "config.yaml").write_text("name: x\n")  # arms_beside needs a run's config, nothing more
    in_defect = arms_beside(out / "truncation" / "evotrainer-seed0")
    assert in_defect == {a: out / d / f"{a}-seed0" for a, d in (("static", "truncation"), ("evotrainer", "truncation"),
                                                               ("keep_discard", "truncation"), ("oracle", "clean"))}
    assert list(arms_beside(out / "clean" / "oracle-seed1")) == ["oracle", "clean_evotrainer"]
    (tmp_path / "lone" / "truncation" / "static-seed0").mkdir(parents=True)  # an ordinary bench named truncation
    for arm in ("static", "reference"):
        (tmp_path / "lone" / "truncation" / f"{arm}-seed0").mkdir(parents=True, exist_ok=True)
        (tmp_path / "lone" / "truncation" / f"{arm}-seed0" / "config.yaml").write_text("name: x\n")
    assert list(arms_beside(tmp_path / "lone" / "truncation" / "static-seed0")) == ["static", "reference"]

    rd = RunDir(out / "truncation" / "evotrainer-seed0")
    assert bench_arms(rd)["summary"] is None  # the bench has not finished: no faults.json yet
    summary = {**fb.collect(out, ["truncation", "divergence"], ALL, [0, 1], 1), "seeds": [0, 1], "phases": 1}
    (out / "faults.json").write_text(json.dumps(summary))
    b = bench_arms(rd)
    assert b["this"] == "evotrainer" and list(b["curves"]) == ["static", "evotrainer", "keep_discard", "oracle"]
    assert list(b["summary"]["arms"]) == ["static", "evotrainer", "keep_discard", "oracle"]
    page = html.bench({"bench": b})
    assert "this run is the <code>evotrainer</code> arm" in page and 'data-chart="bench"' in page
    assert "oracle" in page and "+10.0% [" in page  # evotrainer minus static, in the defect's table
    assert list(bench_arms(RunDir(out / "clean" / "oracle-seed0"))["summary"]["arms"]) == ["oracle",
                                                                                         "clean_evotrainer"]


# --- the honest table: every defect-seed counted, the clean seed beside each defect ----------------------------------
def _outcome(correct: set[int]) -> dict:
    return {"final": _final(correct), "accuracy": [len(correct) / 200], "baseline": None, "wall_s": 10.0,
            "training_s": 8.0, "completions": {"phases": 100, "judging": 0}}


def _found(confirmed: dict[int, list], mechanism: list[str] | None = None) -> dict:
    return {"mechanism": mechanism or [], "family": "x", "diagnosis": {
        str(s): {"named": False, "phase": None, "failure_mode": None, "statement": None, "confirmed": c}
        for s, c in confirmed.items()}}


def test_a_failed_defect_seed_stays_in_the_mean_and_the_clean_seed_s_modes_are_no_evidence():
    """Defect a costs 40 items on each of three seeds: evotrainer wins back all of it on seed 0, nothing on seed 1
    and loses 10 more on seed 2, so the mean recovery is (1 + 0 - 0.25) / 3, repaired on 1 of 3. Defect b costs
    nothing: its three defect-seeds are left out, and said. The clean seed confirms dead_groups on seeds 0 and 1."""
    base, gap = set(range(60)), set(range(100, 140))
    outcomes = {"clean": {"oracle": {s: _outcome(base | gap) for s in (0, 1, 2)}},
                "a": {"static": {s: _outcome(base) for s in (0, 1, 2)},
                      "evotrainer": {0: _outcome(base | gap), 1: _outcome(base), 2: _outcome(set(range(10, 60)))}},
                "b": {"static": {s: _outcome(base | gap) for s in (0, 1, 2)},
                      "evotrainer": {s: _outcome(base | gap) for s in (0, 1, 2)}}}
    found = {"a": _found({0: [[1, "dead_groups"], [1, "truncation"]], 1: [[1, "truncation"]],
                          2: [[1, "length_growth"], [2, "dead_groups"]]}, ["dead_groups", "truncation"]),
             "b": _found({0: [], 1: [], 2: []}, ["policy_stalled"]),
             "clean": _found({0: [[1, "dead_groups"]], 1: [[2, "dead_groups"]], 2: []})}
    summary = fb.summarize(outcomes, [0, 1, 2], 1, found)
    counts = summary["counts"]["evotrainer"]
    assert (counts["repaired"], counts["of"]) == (1, 3)
    assert counts["mean_recovery"] == pytest.approx((1 + 0 - 10 / 40) / 3)  # the failures are in it
    assert summary["counts"]["defect_seeds"] == 6 and len(summary["counts"]["left_out"]) == 3
    assert all(x.startswith("b seed") and "costs nothing" in x for x in summary["counts"]["left_out"])
    a = summary["defects"]["a"]["per_seed"]
    assert a["2"]["recovery"]["evotrainer"]["value"] == pytest.approx(-0.25) and not a["2"]["repaired"]
    assert summary["defects"]["b"]["per_seed"]["0"]["recovery"]["evotrainer"] is None
    named = summary["named"]
    assert named["modes"] == {"dead_groups": {"a": 2, "clean": 2}, "truncation": {"a": 2}, "length_growth": {"a": 1}}
    assert named["columns"] == ["a", "b", "clean"]
    assert named["first"]["a"] == {"seeds": 2, "of": 3}  # seed 2 confirmed length_growth first
    assert named["specific"]["a"] == {"seeds": 1, "of": 3}  # on seeds 0 and 1 the clean seed confirms dead_groups
    assert named["specific"]["b"] == {"seeds": 3, "of": 3}
    table = fb.markdown({**summary, "seeds": [0, 1, 2], "phases": 1})
    assert "| dead_groups | **2** | 0 | 2 |" in table and "repaired on **1 of 3**" in table
    assert "mean recovery **25%** over those 3, failures counted" in table


def test_a_generated_suite_parses_and_plans_its_runs_without_training(tmp_path: Path, monkeypatch):
    from evotrainer.harness import generated

    # the register as it is, less any first run of gen-0-1's family: a family never run is listed as unregistered
    family, reg = generated.draw("gen-0-1").family, fb.register()
    reg = {**reg, "later": [e for e in reg.get("later") or [] if e.get("family") != family]}
    monkeypatch.setattr(fb, "register", lambda: reg)

    names = fb.parse_faults("generated:3")
    assert names == ["gen-0-0", "gen-0-1", "gen-0-2"] and fb.parse_faults("generated:2@5") == ["gen-5-0", "gen-5-1"]
    assert fb.parse_faults("truncation,generated:2@5,gen-5-1") == ["truncation", "gen-5-0", "gen-5-1"]
    runs = fb.plan(names, ALL, [0])
    assert {rel for rel, (f, _, _) in runs.items() if f == "gen-0-1"} == {
        f"gen-0-1/{a}-seed0" for a in ("static", "evotrainer", "keep_discard")}
    cfgs = fb.configs(runs, 3, None, SMALL)
    assert cfgs["gen-0-2/static-seed0"].fault == "gen-0-2" and cfgs["clean/oracle-seed0"].fault is None
    out = tmp_path / "b"  # a generated defect's summary: its family, what was drawn, and the register's say
    for rel in ("clean/oracle-seed0", "gen-0-1/static-seed0", "gen-0-1/evotrainer-seed0"):
        _write_results(out / rel, [_final(set(range(50 + 20 * ("oracle" in rel))))])
    got = fb.collect(out, ["gen-0-1"], ["static", "evotrainer", "oracle"], [0], 1)
    drawn = generated.draw("gen-0-1")
    entry = got["defects"]["gen-0-1"]
    assert entry["family"] == drawn.family and entry["drawn"] == {"layer": drawn.layer, "constants": drawn.constants}
    assert got["unregistered"] == [drawn.family] and entry["per_seed"]["0"]["cost"]
    for bad, says in (("generated:0", "draw at least one defect"), ("gen-0", "unknown fault"),
                      ("generated:x", "unknown fault")):
        with pytest.raises(C.ConfigError, match=says):
            fb.parse_faults(bad)


def test_the_reference_seed_arms_train_math_reference_and_matched_arms_need_their_pair():
    runs = fb.plan(["truncation"], expand_fault_arms(["static", "evotrainer", "static_matched", "oracle",
                                                      "reference_oracle", "reference_evotrainer"]), [0])
    cfgs = fb.configs(runs, 3, None, SMALL)
    assert (cfgs["clean/reference_evotrainer-seed0"].harness, cfgs["clean/reference_evotrainer-seed0"].evolution.mode
            ) == ("math_reference", "evolve")
    assert cfgs["clean/reference_oracle-seed0"].harness == "math_reference"
    assert cfgs["clean/oracle-seed0"].harness is None
    assert cfgs["truncation/static_matched-seed0"].evolution.mode == "static"
    with pytest.raises(C.ConfigError, match=r"static_matched is matched to evotrainer's completions .* add evotrainer"):
        expand_fault_arms(["static", "static_matched"])


def test_a_matched_arm_trains_after_its_pair_for_as_many_completions_as_the_loop_spent(tmp_path: Path, monkeypatch):
    """The evotrainer run spends its phases' 100 completions and 50 more judging: static_matched trains the faulty
    seed at static's 100 completions per 60 steps for 150, 90 steps, after both have finished."""
    import evotrainer.run
    from evotrainer.console import Reporter

    trained = []

    def train(root, phases, reporter):
        rel = Path(root).relative_to(tmp_path / "b").as_posix()
        trained.append(rel)
        _write_results(Path(root), [_final(set(range(40 + 20 * ("evotrainer" in rel))))] * phases)
        if "evotrainer" in rel:
            _events(Path(root), [{"kind": "trial", "phase": 1, "completions": 30},
                                 {"kind": "race", "phase": 1, "completions": 20}])
        RunDir(root).set_status("done", phase=phases)

    monkeypatch.setattr(evotrainer.run, "run", train)
    summary = fb.run_fault_bench(tmp_path / "b", ["truncation"], ["static", "evotrainer", "static_matched", "oracle"],
                                 [0], 1, overrides=SMALL, reporter=Reporter(quiet=True))
    assert trained[-1] == "truncation/static_matched-seed0" and len(trained) == 4
    cfg = RunDir(tmp_path / "b" / "truncation" / "static_matched-seed0").load_config()
    assert cfg.training.steps_per_phase == 90 and cfg.fault == "truncation" and cfg.evolution.mode == "static"
    assert summary["compute"]["truncation"]["evotrainer"] == {"phases": 100, "judging": 50}
    assert summary["defects"]["truncation"]["vs_matched"]["diff"] == pytest.approx(0.1)
    assert "At equal compute (evotrainer - static_matched, paired per item and seed): truncation +10.0%" in (
        tmp_path / "b" / "faults.md").read_text()


def test_a_promoted_move_predates_a_family_by_the_register_s_order():
    reg = {"before_baseline": ["reward"], "baseline": {"moves": ["old_move"]},
           "later": [{"move": "new_move"}, {"family": "lr_low"}, {"move": "newer_move"}]}
    assert fb.predates(reg, "old_move", "lr_low") and fb.predates(reg, "new_move", "lr_low")
    assert fb.predates(reg, "newer_move", "lr_low") is False and fb.predates(reg, "old_move", "reward") is False
    assert fb.predates(reg, "unlisted", "lr_low") is False  # newer than every entry
    assert fb.predates(reg, "old_move", "never_run") is True and fb.predates(reg, "unlisted", "never_run") is None
    assert fb.predates(None, "old_move", "lr_low") is None
    # a move of one domain written after that domain's family was seen, with the name of an older move of another
    reg["later"] += [{"family": "code_partial"}, {"move": "old_move", "domain": "code"}]
    assert fb.predates(reg, "old_move", "code_partial") is False and fb.predates(reg, "old_move", "lr_low") is True
    shipped = fb.register()  # the register in docs/ parses, and lists the baseline's moves
    assert shipped and "dynamic_sampling" in shipped["baseline"]["moves"]
    assert fb.predates(shipped, "dynamic_sampling", "lr_high") is True
