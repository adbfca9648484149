"""The loop with LLM roles and with the human gate, through the real trainer service and the real litellm path.

* a full phase with every role on a (scripted) LLM: the Diagnostician queries the phase's parquet file and cites
  what it found, the Critic confirms, the Engineer edits filters.py with a search/replace block, the Backtester
  writes the reasons, the Librarian the skill; every call is in events.jsonl with tokens and latency
* the gate: `evotrainer run` pauses before promotion, `status` says what it waits for, and `approve --revise`,
  `--abort` and `approve` resume it with the effect each promises
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import git
import pytest
import yaml

from evotrainer import config as C
from evotrainer.console import Reporter
from evotrainer.events import EventLog
from evotrainer.rundir import RunDir
from tests.conftest import FAST, cli
from tests.scripted_llm import last_user, role_of, scripted

NO_TRIALS = "backtest.trial_steps=0"  # replay checks decide: the heuristic's first candidate passes


def every_role(model: str, messages: list[dict]) -> str:
    """A competent scripted model for each role (reads what the loop sent it, answers in the role's schema)."""
    role, prompt = role_of(messages), last_user(messages)
    if role == "diagnostician":
        if not prompt.startswith("Result of sql"):
            return json.dumps({"action": "sql", "query": "SELECT avg(reward) AS reward_mean, count(*) AS n, "
                               "min(rollout_id) AS example FROM rollouts WHERE phase = 1"})
        value, n, example = prompt.splitlines()[2].split(" | ")
        return json.dumps({"action": "answer", "diagnoses": [{
            "layer": "signal", "failure_mode": "dead_groups", "statement": "Groups without reward spread train.",
            "evidence": [{"name": "reward_mean", "value": float(value), "n": int(n), "query":
                          "SELECT avg(reward) AS reward_mean FROM rollouts WHERE phase = 1"}],
            "rollout_ids": [example], "severity": 0.7, "confidence": 0.9}]})
    if role == "critic":
        ids = sorted(set(re.findall(r'"id":"(d\d+-\d+)"', prompt)))
        return json.dumps({"action": "answer", "verdicts": [
            {"id": i, "verdict": "confirm", "reason": "the query holds"} for i in ids]})
    if role == "engineer":
        did = re.search(r'"id":"(d\d+-\d+)"', prompt).group(1)
        return json.dumps({"candidates": [{
            "diagnosis_id": did, "intervention": "skip_flat_groups", "summary": "groups with equal rewards stop "
            "training", "hypothesis": "If flat groups stop training, kept_dead_ratio goes down, because they carry "
            "no advantage", "variable": "filters.keep_group", "target_metric": "kept_dead_ratio",
            "direction": "down", "expected": "kept_dead_ratio to 0", "rollback": "restore keep_group",
            "blocks": [{"file": "filters.py", "search": "def keep_group(group: list[dict]) -> bool:\n    return True",
                        "replace": "def keep_group(group: list[dict]) -> bool:\n"
                                   "    return len({r['reward'] for r in group}) > 1"}]}]})
    if role == "backtester":
        return json.dumps({"verdict": "promote", "reasons": ["the checks pass and kept_dead_ratio fell"]})
    return json.dumps({"trigger": "flat groups train", "intervention": "filter them in keep_group",
                       "expected": "kept_dead_ratio to 0", "validation": "replay", "applicability": ["math"]})


@pytest.mark.slow  # a whole phase and its loop with every role scripted through litellm: ~29 s (test_llm_agents holds each role fast)
def test_a_full_phase_with_every_role_on_an_llm(tmp_path: Path, policy_cache: Path, monkeypatch):
    from evotrainer.run import run

    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    run_dir = tmp_path / "llm"
    cfg = C.apply_overrides(C.parse({"agents": {"default": {"model": "scripted/any", "tool_rounds": 2}}}),
                            [*FAST, "phases=1", NO_TRIALS, "evolution.max_engineer_rounds=1"])
    with scripted(every_role) as calls:
        RunDir(run_dir).init(cfg, log=lambda m: None)
        run(run_dir, reporter=Reporter())
    assert RunDir(run_dir).status()["state"] == "done"
    events = EventLog(run_dir / "events.jsonl")
    llm = list(events.read("llm_call"))
    assert {e["role"] for e in llm} == {"diagnostician", "critic", "engineer", "backtester", "librarian"}
    assert all(e["outcome"] == "ok" and e["prompt_tokens"] > 0 and e["latency_s"] >= 0 for e in llm), llm
    assert len(calls) == len(llm)
    (diag,) = [e for e in events.read("node_end") if e["node"] == "diagnose"]
    assert diag["model"] == "scripted/any" and diag["diagnoses"][0]["failure_mode"] == "dead_groups"
    (cand,) = list(events.read("candidate"))
    repo = git.Repo(run_dir / "harness")
    assert "len({r['reward'] for r in group}) > 1" in repo.git.show(f"{cand['branch']}:filters.py")
    assert "Hypothesis: If flat groups stop training" in repo.commit(cand["branch"]).message
    (verdict,) = list(events.read("verdict"))
    if verdict["verdict"] == "promote":  # the checks passed: the model's reasons are the verdict's
        assert verdict["reasons"] == ["the checks pass and kept_dead_ratio fell"]
    assert json.loads((run_dir / "prices.json").read_text()) == {}  # a scripted model has no price
    assert json.loads((run_dir / "llm_spend.json").read_text())["calls"] == len(llm)


def evotrainer(*args: str) -> str:
    """An `evotrainer` command run in this process (the scripted provider is registered here); its output."""
    from typer.testing import CliRunner

    from evotrainer.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


PRICE = {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002, "litellm_provider": "scripted", "mode": "chat"}


@pytest.mark.slow  # trains a phase, then resumes it
def test_a_spent_usd_budget_pauses_the_run_until_it_is_raised_in_config_yaml(tmp_path: Path, policy_cache: Path,
                                                                           monkeypatch):
    """A priced scripted model (its price written into RUN_DIR/prices.json, as for a local model) spends
    agents.budget.max_usd on the Diagnostician's first call; the next call pauses the run (on_exhausted: pause),
    `evotrainer status` says it waits for the budget, and once config.yaml raises it `evotrainer run` resumes the
    phase where it stopped and finishes it on the LLM roles."""
    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    run_dir = tmp_path / "budget"
    cfg = C.apply_overrides(C.parse({"agents": {
        "default": {"model": "scripted/priced", "tool_rounds": 2},
        "budget": {"max_usd": 0.05, "on_exhausted": "pause"}}}),
        [*FAST, "phases=1", NO_TRIALS, "evolution.max_engineer_rounds=1"])
    with scripted(every_role) as calls:
        RunDir(run_dir).init(cfg, log=lambda m: None)
        (run_dir / "prices.json").write_text(json.dumps({"scripted/priced": PRICE}))
        evotrainer("run", run_dir)
        status = json.loads(evotrainer("status", run_dir, "--json"))
        assert (status["state"], status["waiting_for"]) == ("paused", "budget"), status
        assert "agents.budget.max_usd=0.05 spent" in status["detail"] and "raise it in config.yaml" in status["detail"]
        first = list(EventLog(run_dir / "events.jsonl").read("llm_call"))
        assert [(e["role"], e["outcome"]) for e in first] == [("diagnostician", "ok"), ("diagnostician", "budget")]
        assert first[0]["cost_usd"] == pytest.approx(10 * 0.001 + first[0]["completion_tokens"] * 0.002)
        assert len(calls) == 1  # the spent budget stopped the second call before it reached the model
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        config["agents"]["budget"]["max_usd"] = 100.0
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
        evotrainer("run", run_dir)
    assert RunDir(run_dir).status()["state"] == "done"
    events = EventLog(run_dir / "events.jsonl")
    (resume,) = list(events.read("resume"))
    assert resume["node"] == "diagnose" and resume["phase"] == 1  # the phase was not trained again
    assert len([e for e in events.read("node_end") if e["node"] == "train"]) == 1
    later = list(events.read("llm_call"))[2:]
    assert {e["role"] for e in later} == {"diagnostician", "critic", "engineer", "backtester", "librarian"}
    assert all(e["outcome"] == "ok" for e in later)
    spend = json.loads((run_dir / "llm_spend.json").read_text())
    assert spend["usd"] == pytest.approx(sum(e["cost_usd"] for e in events.read("llm_call"))) and spend["usd"] > 0.05


@pytest.mark.slow  # trains a phase
def test_a_spent_token_budget_falls_back_to_the_builtin_agents(tmp_path: Path, policy_cache: Path, monkeypatch):
    """on_exhausted: fallback: once agents.budget.max_tokens is spent every LLM role's call is refused before it
    reaches the model and the built-in agent answers; the run finishes with the built-in Engineer's candidate."""
    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    run_dir = tmp_path / "fallback"
    cfg = C.apply_overrides(C.parse({"agents": {"default": {"model": "scripted/any", "tool_rounds": 2},
                                                "budget": {"max_tokens": 20, "on_exhausted": "fallback"}}}),
                            [*FAST, "phases=1", NO_TRIALS, "evolution.max_engineer_rounds=1"])
    with scripted(every_role) as calls:
        RunDir(run_dir).init(cfg, log=lambda m: None)
        evotrainer("run", run_dir)
    assert RunDir(run_dir).status()["state"] == "done"
    events = EventLog(run_dir / "events.jsonl")
    llm = list(events.read("llm_call"))
    assert [(e["role"], e["outcome"]) for e in llm[:2]] == [("diagnostician", "ok"), ("diagnostician", "budget")]
    assert all(e["outcome"] == "budget" and "max_tokens=20 spent" in e["error"] for e in llm[1:])
    assert {"critic", "engineer"} <= {e["role"] for e in llm[1:]} and len(calls) == 1
    cands = list(events.read("candidate"))
    assert cands, "the built-in agents went on to propose"
    repo = git.Repo(run_dir / "harness")
    assert all("from the built-in playbook" in repo.commit(c["branch"]).message for c in cands)


@pytest.mark.slow  # four `evotrainer` processes, each starting the trainer service
def test_the_gate_pauses_before_promotion_and_approve_revise_abort_resume_it(tmp_path: Path, cli_env):
    run_dir = tmp_path / "gated"
    sets = [a for o in [*FAST, "phases=2", NO_TRIALS, "gates=[before_promote]"] for a in ("--set", o)]
    cli(["init", str(run_dir), *sets], cli_env)
    cli(["run", str(run_dir)], cli_env)
    answers = [["--revise", "make it smaller"], ["--abort"], []]
    said = []
    while True:
        status = json.loads(cli(["status", str(run_dir), "--json"], cli_env).stdout)
        if status["state"] != "paused":
            break
        assert status["waiting_for"] == "before_promote" and "waiting for approval" in status["detail"]
        assert "paused" in cli(["status", str(run_dir)], cli_env).stdout
        answer = answers[min(len(said), len(answers) - 1)]
        said.append(answer[0] if answer else "approve")
        cli(["approve", str(run_dir), *answer], cli_env)
    assert status["state"] == "done" and said[:1] == ["--revise"], (status, said)
    gates = list(EventLog(run_dir / "events.jsonl").read("gate"))
    assert [g["action"] for g in gates] == [{"--revise": "revise", "--abort": "abort"}.get(s, s) for s in said]
    assert gates[0]["feedback"] == "make it smaller"
    repo = git.Repo(run_dir / "harness")
    for g in gates:  # what a person sent back or aborted never reached main; what they approved did
        for branch in g["branches"]:
            merged = repo.is_ancestor(repo.commit(branch), repo.commit("main"))
            assert merged == (g["action"] == "approve"), (g, merged)
    # a run that is not waiting refuses an answer, in one line
    proc = cli(["approve", str(run_dir)], cli_env, check=False)
    assert proc.returncode == 2 and "is not waiting at a gate" in proc.stdout


def format_reward(did: str, weight: float, name: str) -> dict:
    """A scripted Engineer's candidate that the replay checks pass here: a small reward for a well-formed answer."""
    code = ("def well_formed(sample: dict) -> float:\n"
            "    text = sample['completion'].split('\\n', 1)[0].strip()\n"
            "    return 1.0 if text.lstrip('+-').isdigit() and not sample['truncated'] else 0.0\n\n\n")
    return {"diagnosis_id": did, "intervention": name, "summary": f"well-formed answers earn {weight}",
            "hypothesis": "If well-formed answers earn a little, dead_group_ratio goes down, because groups of wrong "
            "answers then have reward spread", "variable": "rewards.well_formed", "target_metric": "dead_group_ratio",
            "direction": "down", "expected": "dead_group_ratio well below 0.9", "rollback": "remove well_formed",
            "blocks": [{"file": "rewards.py", "search": 'COMPONENTS = {"correct": correct}',
                        "replace": code + 'COMPONENTS = {"correct": correct, "well_formed": well_formed}'},
                       {"file": "harness.yaml", "search": "  correct: 1.0\n",
                        "replace": f"  correct: 1.0\n  well_formed: {weight}\n"}]}


@pytest.mark.slow  # trains a phase and goes through the gate twice
def test_revise_at_the_gate_reaches_the_llm_engineer_and_brings_a_new_candidate(tmp_path: Path, policy_cache: Path,
                                                                                 monkeypatch):
    """`evotrainer approve --revise "..."`: the person's words are in the scripted Engineer's next request, which
    answers with a revised candidate on a new branch; what was sent back never reaches main, the approved
    revision does."""
    feedback = "halve the format reward's weight"

    def engineer(model: str, messages: list[dict]) -> str:
        did = re.search(r'"id":"(d\d+-\d+)"', last_user(messages)).group(1)
        revise = f"asks you to revise: {feedback}" in last_user(messages)
        return json.dumps({"candidates": [format_reward(did, 0.1, "format_reward_halved") if revise else
                                          format_reward(did, 0.2, "format_reward")]})

    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    run_dir = tmp_path / "gated"
    cfg = C.apply_overrides(C.parse({"agents": {"engineer": {"model": "scripted/any"}}}),
                            [*FAST, "phases=1", NO_TRIALS, "evolution.max_engineer_rounds=1", "gates=[before_promote]"])
    with scripted(engineer) as calls:
        RunDir(run_dir).init(cfg, log=lambda m: None)
        waits = []
        for answer in (["--revise", feedback], []):
            if not waits:
                evotrainer("run", run_dir)
            status = json.loads(evotrainer("status", run_dir, "--json"))
            waits.append((status["state"], status["waiting_for"], status["detail"].split(" (")[0]))
            evotrainer("approve", run_dir, *answer)
    assert RunDir(run_dir).status()["state"] == "done"
    assert waits == [("paused", "before_promote", "phase 1: waiting for approval to promote candidates/phase-1-1"),
                     ("paused", "before_promote", "phase 1: waiting for approval to promote candidates/phase-1-2")]
    assert [role_of(c["messages"]) for c in calls] == ["engineer", "engineer"]
    assert feedback not in last_user(calls[0]["messages"]) and \
        f"A person reviewed the last candidates and asks you to revise: {feedback}" in last_user(calls[1]["messages"])
    events = EventLog(run_dir / "events.jsonl")
    first, revised = list(events.read("candidate"))
    assert (first["intervention"], revised["intervention"]) == ("format_reward", "format_reward_halved")
    gates = list(events.read("gate"))
    assert [(g["action"], g["feedback"], g["branches"]) for g in gates] == [
        ("revise", feedback, [first["branch"]]), ("approve", "", [revised["branch"]])]
    repo = git.Repo(run_dir / "harness")
    assert not repo.is_ancestor(repo.commit(first["branch"]), repo.commit("main"))  # sent back: never merged
    assert repo.is_ancestor(repo.commit(revised["branch"]), repo.commit("main"))
    assert "well_formed: 0.1" in repo.git.show("main:harness.yaml")


@pytest.mark.slow  # two phases with trials and the metric validated on each: about 30 s
def test_the_critics_metric_is_validated_then_gates_later_candidates(tmp_path: Path, policy_cache: Path,
                                                                      monkeypatch):
    """Phase 1: the Critic proposes `kept_share` (min 0.99; main keeps every rollout, so it never fired): validated
    on phase 1, merged into main, and the Engineer's candidate that filters flat groups then trips it. Phase 2: a
    metric that is not deterministic is refused, stays on its branch with the reason, and main is untouched."""
    from evotrainer.run import run

    gate = ("def kept_share(rollouts):\n    return sum(r['kept'] for r in rollouts) / max(len(rollouts), 1)\n")
    noisy = "def coin(rollouts):\n    import random\n    return random.random()\n"

    critiques: list[int] = []

    def answer(model: str, messages: list[dict]) -> str:
        out = every_role(model, messages)
        if role_of(messages) == "critic":
            critiques.append(1)
            phase = len(critiques)  # one critique per phase (the scripted Critic answers at once)
            metric = ({"name": "kept_share", "help": "share of rollouts that train", "code": gate, "min": 0.99,
                       "reason": "a filter that drops most groups starves the update"} if phase == 1 else
                      {"name": "coin", "help": "a coin", "code": noisy, "max": 2.0, "reason": "testing"})
            out = json.dumps({**json.loads(out), "metric": metric})
        return out

    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    run_dir = tmp_path / "gate"
    cfg = C.apply_overrides(C.parse({"agents": {"critic": {"model": "scripted/any"},
                                                "engineer": {"model": "scripted/any"}}}),
                            [*FAST, "phases=2", NO_TRIALS, "evolution.max_engineer_rounds=1"])
    with scripted(answer):
        RunDir(run_dir).init(cfg, log=lambda m: None)
        run(run_dir, reporter=Reporter(quiet=True))
    assert RunDir(run_dir).status()["state"] == "done"
    events = EventLog(run_dir / "events.jsonl")
    added, refused = list(events.read("metric_proposal"))
    assert added["outcome"] == "added" and added["would_fire"] == [] and added["phase"] == 1
    assert added["validation"]["phases"][0]["value"] == 1.0
    assert refused["outcome"] == "refused" and "not deterministic" in refused["reason"]
    repo = git.Repo(run_dir / "harness")
    main_diag = repo.git.show("main:diagnostics.py")
    assert "@metric('kept_share', min=0.99" in main_diag and "coin" not in main_diag
    merge = repo.commit(added["main"])
    assert "Proposed-By: critic" in merge.message and "would have fired on none" in merge.message
    assert json.loads(repo.git.notes("--ref=metric", "show", added["main"]))["refused"] == ""
    assert "Refused: phase 1: not deterministic" in repo.commit("metrics/phase-2-coin").message
    # the phase-1 candidate was judged after the gate landed, and tripped it
    (first,) = [e for e in events.read("verdict") if e["phase"] == 1]
    assert first["verdict"] == "reject"
    note = json.loads(repo.git.notes("--ref=backtest", "show", repo.commit(first["branch"]).hexsha))
    checks = {c["name"]: c for c in note["checks"]}
    assert checks["diagnostic:kept_share"]["passed"] is False and checks["diagnostic:kept_share"]["base"] == 1.0


def test_a_metric_that_is_not_one_function_or_has_no_threshold_is_refused_before_it_runs():
    from agents.roles import MetricProposal
    from evotrainer.loop.new_metric import source

    def proposal(code: str, **bounds) -> MetricProposal:
        return MetricProposal(name="m_x", help="h", code=code, reason="r", **bounds)

    ok = source(proposal("def m_x(rollouts):\n    return 0.0\n", max=1.0))
    assert ok.startswith("\n\n@metric('m_x', max=1.0, help='h')") and ok.endswith("return 0.0\n")
    for code, bounds, why in [
        ("def m_x(rollouts:\n    return 0", {"max": 1.0}, "does not parse"),
        ("import os\ndef m_x(rollouts):\n    return 0.0", {"max": 1.0}, "exactly one"),
        ("def m_x(a, b):\n    return 0.0", {"max": 1.0}, "exactly one"),
        ("@metric('other')\ndef m_x(rollouts):\n    return 0.0", {"max": 1.0}, "exactly one"),
        ("def m_x(rollouts):\n    return 0.0", {}, "alert threshold"),
    ]:
        with pytest.raises(ValueError, match=why):
            source(proposal(code, **bounds))


@pytest.mark.slow  # three short phases through the trainer service: about 40 s
def test_keep_discard_asks_an_llm_engineer_with_the_scalar_history_and_falls_back_to_the_playbook(
        tmp_path: Path, policy_cache: Path, monkeypatch):
    """The keep/discard baseline uses the Engineer ``agents.engineer`` names: an LLM gets the accuracy after each
    phase and every earlier edit with its verdict (no diagnosis), its candidate trains the next phase and is judged
    like any; an LLM that answers nothing usable leaves that step to the playbook."""
    asked = []

    def engineer(model: str, messages: list[dict]) -> str:
        asked.append(last_user(messages))
        return json.dumps({"candidates": [format_reward("scalar", 0.2, "format_reward")]}) if len(asked) == 1 \
            else "not json"

    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    run_dir = tmp_path / "kd"
    cfg = C.apply_overrides(C.parse({"agents": {"engineer": {"model": "scripted/any", "retries": 0}}}),
                            [*FAST, "phases=3", "evolution.mode=keep_discard", "evolution.final_round=false"])
    with scripted(engineer):
        RunDir(run_dir).init(cfg, log=lambda m: None)
        evotrainer("run", run_dir)
    assert RunDir(run_dir).status()["state"] == "done"
    assert "Dev accuracy after each phase: phase 1 " in asked[0] and "Edits so far" in asked[0]
    assert "format_reward (rewards.well_formed), kept" in asked[1] or \
        "format_reward (rewards.well_formed), discarded" in asked[1], asked[1]  # its verdict, in the next request
    events = EventLog(run_dir / "events.jsonl")
    promoted = [(e["phase"], e["source"], e["variable"]) for e in events.read("promoted")]
    assert promoted[0] == (1, "llm", "rewards.well_formed") and promoted[1][:2] == (2, "playbook"), promoted
    verdicts = [e["branch"] for e in events.read("keep_discard")]
    assert verdicts == [e["branch"] for e in events.read("promoted")], verdicts  # each edit judged once
    repo = git.Repo(run_dir / "harness")
    kept = next(e for e in events.read("keep_discard") if e["phase"] == 2)["kept"]
    assert ("well_formed: 0.2" in repo.git.show("main:harness.yaml")) == kept  # kept, or reverted by a new commit
