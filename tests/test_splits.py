"""The run's four splits: made at init, disjoint, recorded; every decision reads the dev split and none the held-out.

Fast tests give each decision rule phases whose dev and held-out scores say opposite things and require the
decision to follow dev; the slow test trains one run twice, the second time with its held-out answers scrambled,
and requires every decision of the loop to come out the same (only the reported scores differ).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from agents.diagnostician import HeuristicDiagnostician
from agents.roles import PhaseEvidence
from evotrainer import config as C
from evotrainer.contracts import EvalResult, PhaseResult, Promotion
from evotrainer.domains import get_domain
from evotrainer.domains.base import SPLITS
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import HarnessRepo
from evotrainer.loop.escalation import fell_below_known_good
from evotrainer.loop.state import RunState
from evotrainer.rundir import RunDir, RunDirError
from tests.conftest import FAST, cli, rollouts


def _phase(phase: int, dev: float, held_out: float) -> PhaseResult:
    return PhaseResult(phase=phase, harness_sha="0" * 40, steps=10, eval=EvalResult(accuracy=held_out, n=300),
                       dev=EvalResult(accuracy=dev, n=300), rollout_path="", checkpoint_path="", wall_time_s=1.0,
                       tokens=100)


def test_init_writes_four_disjoint_splits_and_records_their_sizes(tmp_path: Path, cli_env):
    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], cli_env)
    rd = RunDir(run)
    splits = {name: rd.tasks(name) for name in SPLITS}
    recorded = json.loads(rd.splits_path.read_text())
    assert {name: r["total"] for name, r in recorded.items()} == {"held_out": 40, "dev": 40, "rl": 400, "warmup": 4000}
    assert all(len(splits[name]) == recorded[name]["total"] for name in SPLITS)
    domain = get_domain("math")
    prompts = [domain.canonical_prompt(t) for name in ("held_out", "dev", "warmup") for t in splits[name]]
    prompts += sorted({domain.canonical_prompt(t) for t in splits["rl"]})
    assert len(prompts) == len(set(prompts))  # no prompt in two splits
    assert rd.probe_tasks(10) == rd.probe_tasks(10) and {t["id"] for t in rd.probe_tasks(10)} <= \
        {t["id"] for t in splits["dev"]}
    init = [json.loads(line) for line in rd.events_path.read_text().splitlines()][0]
    assert init["splits"] == {name: len(splits[name]) for name in SPLITS}


def test_each_split_s_size_is_its_config_field_and_a_real_model_has_no_warm_up_split(tmp_path: Path):
    from evotrainer.rundir import split_sizes

    cfg = C.apply_overrides(C.parse({}), [*FAST, "training.dev_size=80", "policy.tiny.warmup_pool_size=400",
                                          "backtest.probe_size=1000"])
    assert split_sizes(cfg) == {"held_out": 40, "dev": 80, "rl": 400, "warmup": 400}
    assert split_sizes(cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"model": "Qwen/x"})}))[
        "warmup"] == 0
    RunDir(tmp_path / "run").init(cfg, log=lambda _: None)
    rd = RunDir(tmp_path / "run")
    assert [len(rd.tasks(name)) for name in SPLITS] == [40, 80, 400, 400]
    assert len(rd.probe_tasks(cfg.backtest.probe_size)) == 80  # the probe is at most the whole dev split


@pytest.mark.parametrize("harness, eval_budget, noted", [("math_chat", 16, True), ("math_chat", 24, False),
                                                          ("math", 16, False)])
def test_init_notes_an_evaluator_budget_shorter_than_the_harness_s(tmp_path: Path, harness, eval_budget, noted):
    """The chat seed trains at 24 tokens; an evaluator at 16 would cut and score wrong the answers in between, on
    every split a score or a decision reads: init says so in one line, and makes the run all the same."""
    cfg = C.apply_overrides(C.parse({}), [*FAST, f"harness={harness}",
                                          f"training.eval_max_new_tokens={eval_budget}"])
    lines: list[str] = []
    RunDir(tmp_path / "run").init(cfg, log=lines.append)
    said = [line for line in lines if "training.eval_max_new_tokens" in line]
    assert len(said) == int(noted) and RunDir(tmp_path / "run").exists()
    if noted:
        assert "max_completion_length 24" in said[0] and "eval_max_new_tokens 16" in said[0]


def test_a_run_without_a_dev_split_says_so_in_one_line(tmp_path: Path, cli_env):
    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], cli_env)
    rd = RunDir(run)
    rd.split_path("dev").unlink()  # as an older EvoTrainer left it
    with pytest.raises(RunDirError, match="no dev split .* older EvoTrainer"):
        rd.dev_tasks()


def test_the_diagnostician_s_score_rule_reads_dev(tmp_path: Path):
    repo = HarnessRepo.create(tmp_path / "h", "math")
    rows = rollouts([[("9", True), ("1", False)] * 4 for _ in range(60)])

    def modes(results) -> set[str]:
        ev = PhaseEvidence(phase=len(results), results=results, rollouts=rows, phases_in_view=[len(results)],
                           registry={}, knobs=read_knobs(repo.path), domain=get_domain("math"))
        return {d.failure_mode for d in HeuristicDiagnostician().diagnose(ev)}

    assert "accuracy_regression" in modes([_phase(1, dev=0.40, held_out=0.25), _phase(2, dev=0.25, held_out=0.40)])
    assert "accuracy_regression" not in modes([_phase(1, dev=0.25, held_out=0.40), _phase(2, dev=0.40, held_out=0.25)])


def test_escalation_s_rollback_reads_dev():
    assert fell_below_known_good([_phase(1, dev=0.40, held_out=0.25), _phase(2, dev=0.25, held_out=0.40)])
    assert fell_below_known_good([_phase(1, dev=0.25, held_out=0.40), _phase(2, dev=0.40, held_out=0.25)]) is None


def test_keep_discard_keeps_on_dev(tmp_path: Path):
    from evotrainer.contracts import Candidate
    from evotrainer.loop import keep_discard

    cand = Candidate(branch="c1", base_sha="a" * 40, diagnosis_id="d", intervention="i", hypothesis="If X, Y, because Z",
                     variable="harness.yaml:temperature", target_metric="dev accuracy", direction="up", expected="up",
                     rollback="revert", files=["harness.yaml"])
    promos = [Promotion(phase=p, branch=f"c{p}", sha="b" * 40, main_sha="c" * 40, candidate=cand) for p in (1, 2)]
    events = []
    rt = SimpleNamespace(repo=None, cfg=C.apply_overrides(C.parse({}), ["evolution.mode=keep_discard"]),
                         emit=lambda kind, **f: events.append((kind, f)))
    state = RunState(phase=2, results=[_phase(1, dev=0.25, held_out=0.40), _phase(2, dev=0.40, held_out=0.25)],
                     promotions=promos)
    out = keep_discard.step(rt, state)  # held-out fell, dev rose: kept (reading held-out would revert it)
    assert out["promotions"][0].effect.startswith("kept: dev accuracy 25.0% -> 40.0%")
    assert events == [("keep_discard", {"phase": 2, "branch": "c1", "kept": True, "accuracy": [0.25, 0.40]})]


DECISIONS = ("candidate", "verdict", "race", "trial", "promoted", "not_promoted", "realized_effect",
             "rollback", "rolled_back", "keep_discard")


def _decisions(run: Path) -> list[dict]:
    """What the loop decided, in order: diagnoses, critiques' verdicts, candidates, backtest verdicts, trials,
    promotions, effects, rollbacks (shas, times and timing checks' figures left out: commits carry their time)."""
    out = []
    for line in (run / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["kind"] in DECISIONS or (e["kind"] == "node_end" and e.get("node") in ("diagnose", "critique")):
            e = {k: v for k, v in e.items() if k not in ("t", "ts", "pid", "seconds") and not k.endswith("_s")
                 and "sha" not in k and not (isinstance(v, str) and len(v) == 40 and v.isalnum())}
            if "checks" in e:  # a timing check's figure is the machine's, not a decision
                e["checks"] = [{**c, "candidate": None} if c["name"].endswith("_time") else c for c in e["checks"]]
            out.append(e)
    return out


@pytest.mark.slow  # two 2-phase runs through the CLI (about 5 minutes)
def test_no_decision_changes_when_the_held_out_answers_are_scrambled(tmp_path: Path, cli_env):
    runs = {name: tmp_path / name for name in ("plain", "scrambled")}
    # a policy warmed up long enough to answer some tasks right, so that accuracy can decide anything
    sets = [a for o in [*FAST, "phases=2", "policy.tiny.warmup_steps=600", "training.eval_size=200",
                        "training.dev_size=200"] for a in ("--set", o)]
    cli(["init", str(runs["plain"]), *sets], cli_env)
    shutil.copytree(runs["plain"], runs["scrambled"])
    rd = RunDir(runs["scrambled"])
    held_out = rd.eval_tasks()
    rd.split_path("held_out").write_text("".join(json.dumps({**t, "answer": str(int(t["answer"]) + 1000)}) + "\n"
                                                 for t in held_out))
    for run in runs.values():
        cli(["run", str(run)], cli_env)
    scores = {name: [json.loads((run / "checkpoints" / f"phase-{p:04d}" / "result.json").read_text())
                     for p in (1, 2)] for name, run in runs.items()}
    assert all(r["eval"]["accuracy"] == 0 for r in scores["scrambled"])  # what it reports did change
    assert any(r["eval"]["accuracy"] > 0 for r in scores["plain"])
    assert [r["dev"] for r in scores["plain"]] == [r["dev"] for r in scores["scrambled"]]
    plain, scrambled = _decisions(runs["plain"]), _decisions(runs["scrambled"])
    assert any(e["kind"] == "node_end" and e["node"] == "critique" for e in plain)
    assert plain == scrambled
