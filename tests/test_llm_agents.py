"""Each LLM role on evidence whose answer is known, with scripted answers through litellm's real call path:
the Diagnostician's tool loop and its figures checked against the data, the Critic's verdicts, the Engineer's
search/replace blocks (one that does not apply is sent back), the Backtester that cannot promote what the checks
fail, the Librarian's skill text, and the escalation of the built-in Engineer (change layer, else subtract)."""

from __future__ import annotations

import json
from pathlib import Path

import ormsgpack
import pytest

from agents.roles import EngineerContext, PhaseEvidence
from agents.backtester import HeuristicBacktester, LLMBacktester
from agents.critic import HeuristicCritic, LLMCritic
from agents.diagnostician import HeuristicDiagnostician
from agents.engineer import HeuristicEngineer
from agents.librarian import HeuristicLibrarian, LLMLibrarian
from agents.llm import LLMContext
from agents.llm_diagnostician import LLMDiagnostician
from agents.llm_engineer import LLMEngineer
from evotrainer import config as C
from evotrainer.contracts import (
    BacktestReport,
    Candidate,
    Check,
    EvalResult,
    MetricEvidence,
    PhaseResult,
    Promotion,
    Rollout,
)
from evotrainer.domains import get_domain
from evotrainer.events import EventLog
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import HarnessRepo
from evotrainer.loop.state import serializer
from evotrainer.rollouts import write_rollouts
from tests.conftest import rollouts
from tests.scripted_llm import last_user, role_of, scripted

DEAD = ("SELECT avg(dead::INT) AS dead_group_ratio, count(*) AS n FROM "
        "(SELECT group_id, max(reward) = min(reward) AS dead FROM rollouts GROUP BY group_id)")


@pytest.fixture
def repo(tmp_path: Path) -> HarnessRepo:
    return HarnessRepo.create(tmp_path / "harness", "math")


def llm_ctx(tmp_path: Path, **roles) -> LLMContext:
    cfg = C.parse({"agents": {"default": {"model": "scripted/m", "tool_rounds": 3}, **roles}})
    return LLMContext(cfg, tmp_path, EventLog(tmp_path / "events.jsonl"))


def evidence(tmp_path: Path, repo: HarnessRepo) -> PhaseEvidence:
    """60 groups, 45 all wrong: a dead-group ratio of 0.75, on disk as a phase's parquet file."""
    rows = rollouts([[("9", True), ("1", False)] * 4 if g % 4 == 0 else [("1", False)] * 8 for g in range(60)])
    path = tmp_path / "rollouts" / "phase-0001.parquet"
    write_rollouts([Rollout(**r) for r in rows], path)
    result = PhaseResult(phase=1, harness_sha=repo.sha("main"), steps=10, eval=EvalResult(accuracy=0.3, n=300), dev=EvalResult(accuracy=0.3, n=300),
                         rollout_path=str(path), checkpoint_path="", wall_time_s=1.0, tokens=100,
                         train={"reward_mean": 0.125})
    return PhaseEvidence(phase=1, results=[result], rollouts=rows, phases_in_view=[1], registry={},
                         knobs=read_knobs(repo.path), domain=get_domain("math"))


def diagnosis_answer(value: float, ids: list[str]) -> str:
    return json.dumps({"action": "answer", "diagnoses": [{
        "layer": "signal", "failure_mode": "dead_groups", "statement": "Most groups have no reward spread.",
        "evidence": [{"name": "dead_group_ratio", "value": value, "query": DEAD, "n": 60}],
        "rollout_ids": ids, "severity": 0.8, "confidence": 0.9}]})


def test_diagnostician_queries_then_cites_figures_the_data_holds(tmp_path, repo):
    ev = evidence(tmp_path, repo)
    answers = iter([json.dumps({"action": "sql", "query": DEAD}),
                    diagnosis_answer(0.5, ["p1-g1/0", "nope/9"]),  # a figure the query does not give, a bad id
                    diagnosis_answer(0.75, ["p1-g1/0", "p1-g1/1"])])
    with scripted(lambda model, messages: next(answers)) as calls:
        out = LLMDiagnostician(llm_ctx(tmp_path), HeuristicDiagnostician()).diagnose(ev)
    assert "0.75 | 60" in last_user(calls[1]["messages"])  # the query's result went back to the model
    problem = last_user(calls[2]["messages"])
    assert "unknown rollout ids ['nope/9']" in problem and "does not hold 0.5" in problem
    (d,) = out
    assert (d.id, d.failure_mode, d.evidence[0].value, d.rollout_ids) == ("d1-1", "dead_groups", 0.75,
                                                                         ["p1-g1/0", "p1-g1/1"])
    assert d.evidence[0].query == DEAD  # the stored diagnosis cites the query its figure came from
    assert [e["outcome"] for e in EventLog(tmp_path / "events.jsonl").read("llm_call")] == ["ok", "invalid", "ok"]
    # the checkpoint keeps the citation, and a checkpoint written before MetricEvidence had one still loads
    serde = serializer()
    assert serde.loads_typed(serde.dumps_typed(d)).evidence[0].query == DEAD
    old = {k: v for k, v in d.evidence[0].model_dump().items() if k != "query"}
    packed = ormsgpack.packb(ormsgpack.Ext(5, ormsgpack.packb(  # langgraph's pydantic-v2 record, as stored before
        ("evotrainer.contracts", "MetricEvidence", old, "model_validate_json"))))
    revived = serde.loads_typed(("msgpack", packed))
    assert isinstance(revived, MetricEvidence) and revived.query == "" and revived.value == 0.75


def test_diagnostician_is_told_the_registered_modes_and_its_spelling_is_normalised(tmp_path, repo):
    """A model that calls a mechanism by another spelling ('Dead groups') still reaches the registry's mode: its
    system prompt lists the registry, and its name is brought to the snake_case form."""
    from agents import modes

    ev = evidence(tmp_path, repo)
    answer = json.loads(diagnosis_answer(0.75, ["p1-g1/0"]))
    answer["diagnoses"][0]["failure_mode"] = "Dead groups"
    with scripted(lambda model, messages: json.dumps(answer)) as calls:
        (d,) = LLMDiagnostician(llm_ctx(tmp_path), HeuristicDiagnostician()).diagnose(ev)
    system = calls[0]["messages"][0]["content"]
    assert modes.prompt_lines() in system
    assert (d.failure_mode, d.layer) == ("dead_groups", "signal")


def test_a_diagnosis_naming_an_unregistered_mode_is_sent_back_then_the_rules_answer(tmp_path, repo):
    """A failure mode the registry does not hold is not passed on silently: the model is told it is unknown, with the
    registered names, and answers again; a model that keeps to it leaves the role to the built-in rules."""
    ev = evidence(tmp_path, repo)
    invented = json.loads(diagnosis_answer(0.75, ["p1-g1/0"]))
    invented["diagnoses"][0]["failure_mode"] = "gradient_starvation"
    answers = iter([json.dumps(invented), diagnosis_answer(0.75, ["p1-g1/0"])])
    with scripted(lambda model, messages: next(answers)) as calls:
        (d,) = LLMDiagnostician(llm_ctx(tmp_path), HeuristicDiagnostician()).diagnose(ev)
    problem = last_user(calls[1]["messages"])
    assert "unknown failure mode 'gradient_starvation'" in problem and "policy_stalled" in problem
    assert d.failure_mode == "dead_groups"
    (tmp_path / "again").mkdir()
    ctx = llm_ctx(tmp_path / "again", diagnostician={"fallbacks": ["heuristic"], "retries": 1})
    with scripted(lambda model, messages: json.dumps(invented)) as calls:
        out = LLMDiagnostician(ctx, HeuristicDiagnostician()).diagnose(ev)
    assert len(calls) == 2 and {x.failure_mode for x in out} == {x.failure_mode
                                                                   for x in HeuristicDiagnostician().diagnose(ev)}


def test_the_per_step_log_is_a_table_the_llm_roles_can_query_and_cite(tmp_path, repo):
    """What the entropy-collapse rule reads (the trainer's per-step log) is evidence an LLM role can read too: the
    ``steps`` table, named in the schema its prompt shows, and a figure from it holds when cited."""
    from agents.evidence_tools import EvidenceTools

    ev = evidence(tmp_path, repo)
    ev.results[0].trajectory = {"entropy": [0.7, 0.6, 0.5, 0.4], "reward": [0.1, 0.1, 0.1, 0.1]}
    tools = EvidenceTools.from_evidence(ev)
    assert "steps(phase BIGINT, step BIGINT, name VARCHAR, value DOUBLE)" in tools.schema()
    assert "steps names: entropy, reward" in tools.schema()
    query = "SELECT avg(value) FROM steps WHERE name = 'entropy' AND step > 2"
    assert tools.query(query)[1] == [(pytest.approx(0.45),)]
    assert tools.holds(query, 0.45) is None and tools.holds(query, 0.7) is not None
    tools.close()


def test_dev_verdicts_per_task_are_a_table_the_llm_roles_can_query_and_cite(tmp_path, repo):
    """What the policy-stalled rule reads (which dev verdicts a phase changed, paired per task; phase 0 the starting
    policy) is evidence an LLM role can read too, and a figure from it holds when cited."""
    from agents.evidence_tools import EvidenceTools

    ev = evidence(tmp_path, repo)
    ev.baseline = EvalResult(accuracy=0.5, n=4, items={"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0})
    ev.results[0].dev = EvalResult(accuracy=0.5, n=4, items={"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0})
    tools = EvidenceTools.from_evidence(ev)
    assert "dev_items(phase BIGINT, task_id VARCHAR, score DOUBLE)" in tools.schema()
    query = ("SELECT avg((s.score <> b.score)::INT) AS changed FROM dev_items s JOIN dev_items b USING (task_id) "
             "WHERE s.phase = 1 AND b.phase = 0")
    assert tools.holds(query, 0.5) is None and tools.holds(query, 0.0) is not None
    tools.close()


def test_diagnostician_samples_by_id_and_by_where_reads_registry_and_history(tmp_path, repo):
    """Each tool's result is what the next request hands the model: the rows asked for, main's registry, the run's
    history (dev accuracy per phase, from the starting policy on)."""
    ev = evidence(tmp_path, repo)
    ev.registry = {"dead_group_ratio": {"value": 0.75, "max": 0.5, "help": "groups with no reward spread"}}
    ev.baseline = EvalResult(accuracy=0.2, n=300)
    steps = iter([{"action": "sample", "ids": ["p1-g1/3"]},
                  {"action": "sample", "query": "reward > 0 AND group_id = 'p1-g4'"},
                  {"action": "registry"}, {"action": "history"}])

    def answer(model, messages):
        step = next(steps, None)
        return json.dumps(step) if step else diagnosis_answer(0.75, [])

    with scripted(answer) as calls:
        out = LLMDiagnostician(llm_ctx(tmp_path, diagnostician={"tool_rounds": 4}),
                               HeuristicDiagnostician()).diagnose(ev)
    results = [last_user(c["messages"]).split("\n\n")[0].splitlines() for c in calls[1:]]  # what the tool returned
    by_id, by_where, registry, history = results
    assert by_id[:2] == ["Result of sample:", "rollout_id | phase | task_id | difficulty | prompt | completion | "
                         "completion_tokens | truncated | reward | reward_components | verified | kept | advantage"]
    assert by_id[2:] == ['p1-g1/3 | 1 | train-1-1 | 2 | 4+5= | 1 | 2 | False | 0 | {"correct": 0.0} | False | True | 0']
    assert [r.split(" | ")[0] for r in by_where[2:]] == ["p1-g4/0", "p1-g4/2", "p1-g4/4", "p1-g4/6"]  # rewarded
    assert registry == ["Result of registry:", json.dumps(ev.registry)]
    assert history == ["Result of history:", "starting policy: dev accuracy 0.200",
                       f"phase 1: dev accuracy 0.300 (n=300), harness {repo.sha('main')[:8]}"]
    assert [d.failure_mode for d in out] == ["dead_groups"] and len(calls) == 5


def test_critic_confirms_revises_rejects_and_asks_for_evidence(tmp_path, repo):
    ev = evidence(tmp_path, repo)
    diagnoses = HeuristicDiagnostician().diagnose(ev)[:1]
    d2 = diagnoses[0].model_copy(update={"id": "d1-9", "statement": "x"})
    verdict = {"action": "answer", "verdicts": [
        {"id": diagnoses[0].id, "verdict": "revise", "reason": "holds at 75%", "statement": "75% of groups are dead."},
        {"id": "d1-9", "verdict": "more_evidence", "reason": "one phase is too little"}]}
    answers = iter([json.dumps({"action": "answer", "verdicts": verdict["verdicts"][:1]}),  # one id missing
                    json.dumps(verdict), json.dumps(verdict)])
    with scripted(lambda model, messages: next(answers)) as calls:
        critic = LLMCritic(llm_ctx(tmp_path), HeuristicCritic())
        out = critic.critique([diagnoses[0], d2], ev, rounds_left=1)
        assert "missing ['d1-9']" in last_user(calls[1]["messages"])
        assert out.needs_more_evidence and [d.status for d in out.diagnoses] == ["confirmed", "proposed"]
        assert out.diagnoses[0].statement == "75% of groups are dead." and "revised" in out.diagnoses[0].critique
        last = critic.critique([diagnoses[0], d2], ev, rounds_left=0)  # no rounds left: unproven is rejected
    assert not last.needs_more_evidence and [d.status for d in last.diagnoses] == ["confirmed", "rejected"]


def test_critic_runs_its_own_query_before_it_answers(tmp_path, repo):
    """The Critic checks the Diagnostician's figure with a query of its own: the query's result is in its next
    request, and its verdict (citing that result) decides the diagnosis."""
    ev = evidence(tmp_path, repo)
    (d,) = [x for x in HeuristicDiagnostician().diagnose(ev) if x.failure_mode == "dead_groups"]
    groups = "SELECT count(DISTINCT group_id) AS groups FROM rollouts WHERE phase = 1"

    def critic(model, messages):
        prompt = last_user(messages)
        if not prompt.startswith("Result of sql"):
            return json.dumps({"action": "sql", "query": groups})
        n = prompt.splitlines()[2]
        return json.dumps({"action": "answer", "verdicts": [
            {"id": d.id, "verdict": "reject" if n != "60" else "confirm", "reason": f"{n} groups, enough to judge"}]})

    with scripted(critic) as calls:
        out = LLMCritic(llm_ctx(tmp_path), HeuristicCritic()).critique([d], ev, rounds_left=0)
    assert [role_of(c["messages"]) for c in calls] == ["critic", "critic"]
    assert last_user(calls[1]["messages"]).startswith("Result of sql:\ngroups\n60\n")
    (judged,) = out.diagnoses
    assert (judged.status, judged.critique) == ("confirmed", "60 groups, enough to judge")


def engineer_answer(diagnosis_id: str, search: str) -> str:
    return json.dumps({"candidates": [{
        "diagnosis_id": diagnosis_id, "intervention": "skip_dead_groups", "summary": "dead groups stop training",
        "hypothesis": "If groups without reward spread stop training, kept_dead_ratio goes down, because they "
                      "carry no advantage", "variable": "filters.keep_group", "target_metric": "kept_dead_ratio",
        "direction": "down", "expected": "kept_dead_ratio 0.75 -> 0", "rollback": "restore keep_group",
        "blocks": [{"file": "filters.py", "search": search,
                    "replace": "def keep_group(group: list[dict]) -> bool:\n"
                               "    return len({r['reward'] for r in group}) > 1\n"}]}]})


def test_engineer_edits_with_blocks_and_gets_a_block_that_does_not_apply_back(tmp_path, repo):
    ev = evidence(tmp_path, repo)
    (d,) = [x.model_copy(update={"status": "confirmed"}) for x in HeuristicDiagnostician().diagnose(ev)
            if x.failure_mode == "dead_groups"]
    main = repo.sha("main")
    answers = iter([engineer_answer(d.id, "def keep_group(group):\n    return True\n"),  # wrong signature
                    engineer_answer(d.id, "def keep_group(group: list[dict]) -> bool:\n    return True\n")])
    ctx = EngineerContext(phase=1, round=1, repo=repo, base_sha=main, knobs=ev.knobs, domain="math",
                          feedback="keep it simple")
    with scripted(lambda model, messages: next(answers)) as calls:
        (cand,) = LLMEngineer(llm_ctx(tmp_path), HeuristicEngineer()).propose([d], ctx, {})
    request, problem = calls[0]["messages"][1]["content"], last_user(calls[1]["messages"])
    assert "--- filters.py ---" in request and "keep it simple" in request and "kept_dead_ratio" in request
    assert "block 1 (filters.py): the search text occurs 0 times" in problem
    assert repo.sha("main") == main and cand.files == ["filters.py"] and cand.branch == "candidates/phase-1-1"
    assert "len({r['reward'] for r in group}) > 1" in repo.show_file(cand.sha, "filters.py")
    message = repo.message(cand.sha)
    assert all(f"{t}: " in message for t in ("Diagnosis", "Hypothesis", "Variable", "Expected", "Backtest"))


def proposal(did: str, intervention: str, variable: str, blocks: list[tuple[str, str, str]]) -> dict:
    return {"diagnosis_id": did, "intervention": intervention, "summary": "s", "hypothesis": "If X, Y, because Z",
            "variable": variable, "target_metric": "kept_dead_ratio", "direction": "down", "expected": "e",
            "rollback": "r", "blocks": [{"file": f, "search": a, "replace": b} for f, a, b in blocks]}


KEEP_GROUP = "def keep_group(group: list[dict]) -> bool:\n    return True\n"
SPREAD = "def keep_group(group: list[dict]) -> bool:\n    return len({r['reward'] for r in group}) > 1\n"


def test_engineer_gets_back_a_candidate_that_changes_more_than_its_one_variable(tmp_path, repo):
    ev = evidence(tmp_path, repo)
    (d,) = [x.model_copy(update={"status": "confirmed"}) for x in HeuristicDiagnostician().diagnose(ev)
            if x.failure_mode == "dead_groups"]
    two_files = proposal(d.id, "skip_flat", "filters.keep_group", [
        ("filters.py", KEEP_GROUP, SPREAD), ("harness.yaml", "temperature: 1.0 ", "temperature: 0.7 ")])
    two_functions = proposal(d.id, "skip_flat", "filters.keep_group", [
        ("filters.py", KEEP_GROUP, SPREAD),
        ("filters.py", "def keep_rollout(rollout: dict) -> bool:\n    return True",
         "def keep_rollout(rollout: dict) -> bool:\n    return not rollout['truncated']")])
    answers = iter([{"candidates": [two_files]}, {"candidates": [two_functions]},
                    {"candidates": [proposal(d.id, "skip_flat", "filters.keep_group", [("filters.py", KEEP_GROUP,
                                                                                         SPREAD)])]}])
    ctx = EngineerContext(phase=1, round=1, repo=repo, base_sha=repo.sha("main"), knobs=ev.knobs, domain="math")
    with scripted(lambda model, messages: json.dumps(next(answers))) as calls:
        (cand,) = LLMEngineer(llm_ctx(tmp_path), HeuristicEngineer()).propose([d], ctx, {})
    first, second = (last_user(c["messages"]) for c in calls[1:])
    assert "candidate 1: declares filters.keep_group but its blocks also change harness.yaml:temperature: one " \
           "variable per candidate" in first
    assert "declares filters.keep_group but its blocks also change filters.keep_rollout" in second
    assert cand.files == ["filters.py"] and repo.show_file(cand.sha, "filters.py").endswith(SPREAD)
    assert [e["outcome"] for e in EventLog(tmp_path / "events.jsonl").read("llm_call")] == ["invalid", "invalid", "ok"]


def test_a_subtraction_under_escalation_must_revert_or_delete(tmp_path, repo):
    """Stalled, with filters edited during the stall: a 'subtract:' candidate that adds code is sent back; one that
    puts filters.py back as it was before the promotion is committed. Deleting code is a subtraction too."""
    from evotrainer.harness.edits import subtraction_problem

    ev = evidence(tmp_path, repo)
    (d,) = [x.model_copy(update={"status": "confirmed"}) for x in HeuristicDiagnostician().diagnose(ev)
            if x.failure_mode == "dead_groups"]
    seed = repo.sha("main")
    branch = repo.commit_candidate("candidates/phase-1-1", seed, {"filters.py": repo.show_file(seed, "filters.py")
                                   .replace(KEEP_GROUP, SPREAD)}, subject="filters.keep_group: skip flat groups",
                                   body="b", trailers={"Variable": "filters.keep_group"})
    merged = repo.promote("candidates/phase-1-1", "Promote", "h", {})
    promo = Promotion(phase=1, branch="candidates/phase-1-1", sha=branch, main_sha=merged, candidate=Candidate(
        branch="candidates/phase-1-1", base_sha=seed, diagnosis_id=d.id, intervention="skip_flat", hypothesis="h",
        variable="filters.keep_group", target_metric="kept_dead_ratio", direction="down", expected="e",
        rollback="r", files=["filters.py"]))
    adds = proposal(d.id, "subtract:flat_filter", "filters.keep_group", [
        ("filters.py", SPREAD, SPREAD.replace("> 1", "> 1 and len(group) > 2"))])
    revert = proposal(d.id, "subtract:flat_filter", "filters.keep_group", [("filters.py", SPREAD, KEEP_GROUP)])
    answers = iter([{"candidates": [adds]}, {"candidates": [revert]}])
    ctx = EngineerContext(phase=4, round=1, repo=repo, base_sha=merged, knobs=ev.knobs, domain="math",
                          escalation="The run is stalled.", avoid_layers=["filters"], promotions=[promo])
    with scripted(lambda model, messages: json.dumps(next(answers))) as calls:
        (cand,) = LLMEngineer(llm_ctx(tmp_path), HeuristicEngineer()).propose([d], ctx, {})
    assert "subtract:flat_filter is named as a subtraction but it neither reverts an earlier promotion nor only " \
           "deletes lines: it adds or changes lines in (or removes none from) filters.py" in \
        last_user(calls[1]["messages"])
    assert repo.show_file(cand.sha, "filters.py") == repo.show_file(seed, "filters.py")  # the revert, committed
    # the rule alone: deleting lines subtracts; changing a value does not, even by deleting characters
    read = lambda f: repo.show_file(merged, f)  # noqa: E731
    gone = read("filters.py").replace("def keep_rollout(rollout: dict) -> bool:\n    return True\n\n\n", "")
    assert subtraction_problem(repo, {"filters.py": gone}, read, []) is None
    knobs = read("harness.yaml")
    assert subtraction_problem(repo, {"harness.yaml": knobs.replace("1.0e-4", "1.0e-5")}, read, [promo])
    assert subtraction_problem(repo, {"harness.yaml": knobs.replace("weight_decay: 0.0 ", "weight_decay: 0 ")},
                               read, [])
    assert subtraction_problem(repo, {"filters.py": gone.replace("return len(", "return not len(")}, read, [])


class ReportBench:
    """A bench that hands back a fixed report: the Backtester's verdict logic on given checks."""

    def __init__(self, passed: bool):
        self.passed = passed

    def judge(self, candidate):
        return BacktestReport(branch=candidate.branch, candidate_sha="c", base_sha="b", target_metric="x",
                              checks=[Check(name="self_tests", passed=self.passed)], noise_floor=0.01,
                              verdict="promote", reasons=["checks"], runtime_s=1.0, rollouts=10, sandbox="process")


def test_backtester_may_reject_what_checks_pass_but_never_promote_what_they_fail(tmp_path):
    cand = Candidate(branch="candidates/phase-1-1", base_sha="b", diagnosis_id="d", intervention="i", hypothesis="h",
                     variable="filters.keep_group", target_metric="x", direction="down", expected="e", rollback="r",
                     files=["filters.py"])
    with scripted(lambda model, messages: json.dumps({"verdict": "promote", "reasons": ["looks fine to me"]})):
        failed = LLMBacktester(llm_ctx(tmp_path), HeuristicBacktester()).judge(cand, ReportBench(False))
    assert failed.verdict == "reject" and failed.reasons[-1] == "looks fine to me"
    with scripted(lambda model, messages: json.dumps({"verdict": "reject", "reasons": ["gain is within noise"]})):
        passed = LLMBacktester(llm_ctx(tmp_path), HeuristicBacktester()).judge(cand, ReportBench(True))
    assert passed.verdict == "reject" and passed.reasons == ["gain is within noise"]


def test_librarian_writes_the_skill_text(tmp_path):
    cand = Candidate(branch="candidates/phase-1-1", base_sha="b", sha="c1", diagnosis_id="d", intervention="skip_dead",
                     hypothesis="h", variable="filters.keep_group", target_metric="kept_dead_ratio",
                     direction="down", expected="e", rollback="r", files=["filters.py"])
    report = ReportBench(True).judge(cand).model_copy(update={"verdict": "reject"})
    skill = {"trigger": "dead groups above 50%", "intervention": "drop groups with equal rewards in keep_group",
             "expected": "kept_dead_ratio to 0", "validation": "replay: kept_dead_ratio", "applicability": ["any"]}
    with scripted(lambda model, messages: json.dumps(skill)) as calls:
        lib = LLMLibrarian(llm_ctx(tmp_path), HeuristicLibrarian(str(tmp_path / "skills")))
        lib.record_outcome(cand, report, None, "math")
    assert role_of(calls[0]["messages"]) == "librarian"
    (stored,) = [lib.builtin.store.get("unknown:skip_dead")]
    assert stored.trigger == "dead groups above 50%" and stored.domains == ["any", "math"] and stored.uses == 1


def test_a_skill_the_librarian_wrote_is_in_the_llm_engineers_request(tmp_path, repo):
    """Phase 1's rejected candidate becomes a skill in the LLM Librarian's words; in the next round the Librarian
    retrieves it for the same failure and the Engineer's request shows it, its how-text included."""
    ev = evidence(tmp_path, repo)
    (d,) = [x.model_copy(update={"status": "confirmed"}) for x in HeuristicDiagnostician().diagnose(ev)
            if x.failure_mode == "dead_groups"]
    cand = Candidate(branch="candidates/phase-1-1", base_sha="b", sha="c1", diagnosis_id=d.id,
                     intervention="skip_flat", hypothesis="h", variable="filters.keep_group",
                     target_metric="kept_dead_ratio", direction="down", expected="e", rollback="r", files=["filters.py"])
    how = "in keep_group, return False when every reward in the group is equal"
    skill = {"trigger": "most groups have one reward", "intervention": how, "expected": "kept_dead_ratio to 0",
             "validation": "replay", "applicability": ["math"]}
    answers = iter([json.dumps(skill), engineer_answer(d.id, KEEP_GROUP)])
    with scripted(lambda model, messages: next(answers)) as calls:
        ctx = llm_ctx(tmp_path)
        lib = LLMLibrarian(ctx, HeuristicLibrarian(str(tmp_path / "skills")))
        lib.record_outcome(cand, ReportBench(True).judge(cand).model_copy(update={"verdict": "reject"}), d, "math")
        retrieved = {d.id: lib.retrieve(d, "math")}
        eng = EngineerContext(phase=2, round=1, repo=repo, base_sha=repo.sha("main"), knobs=ev.knobs, domain="math")
        LLMEngineer(ctx, HeuristicEngineer()).propose([d], eng, retrieved)
    assert [s.id for s in retrieved[d.id]] == ["dead_groups:skip_flat"]
    assert role_of(calls[1]["messages"]) == "engineer"
    (line,) = [x for x in last_user(calls[1]["messages"]).splitlines() if "dead_groups:skip_flat" in x]
    assert line.startswith(f"{d.id}: skip_flat (skill dead_groups:skip_flat; uses 1, wins 0): trigger most groups "
                           "have one reward") and line.endswith(f"; how: {how}")


def test_stalled_engineer_changes_layer_else_subtracts(tmp_path, repo):
    ev = evidence(tmp_path, repo)
    diagnoses = HeuristicCritic().critique(HeuristicDiagnostician().diagnose(ev), ev, 0).diagnoses
    ctx = dict(phase=4, round=1, repo=repo, knobs=ev.knobs, domain="math")
    (first,) = HeuristicEngineer(max_candidates=1).propose(diagnoses, EngineerContext(base_sha=repo.sha("main"), **ctx),
                                                           {})
    merged = repo.promote(first.branch, "Promote", "h", {})
    promo = Promotion(phase=1, branch=first.branch, sha=first.sha, main_sha=merged, candidate=first)
    stalled = "The run is stalled."
    other = HeuristicEngineer(max_candidates=1).propose(diagnoses, EngineerContext(
        base_sha=merged, escalation=stalled, avoid_layers=["filters"], promotions=[promo], **ctx), {})
    assert other and all(not c.variable.startswith("filters") for c in other)
    every = ["filters", "rewards", "curriculum", "knobs", "prompt", "diagnostics"]
    (sub,) = HeuristicEngineer(max_candidates=1).propose(diagnoses, EngineerContext(
        base_sha=merged, escalation=stalled, avoid_layers=every, promotions=[promo], **ctx), {})
    assert sub.intervention == f"undo:{first.branch}" and sub.files == first.files
    for f in sub.files:  # the files as they were before the promotion
        assert repo.show_file(sub.sha, f) == repo.show_file(first.base_sha, f)
    from evotrainer.harness.edits import subtraction_problem  # the rule an LLM Engineer's subtraction is held to

    assert subtraction_problem(repo, {f: repo.show_file(sub.sha, f) for f in sub.files},
                               lambda f: repo.show_file(merged, f), [promo]) is None


def test_engineer_is_told_what_lost_its_trial_on_this_main_and_a_retry_is_sent_back(tmp_path, repo):
    ev = evidence(tmp_path, repo)
    (d,) = [x.model_copy(update={"status": "confirmed"}) for x in HeuristicDiagnostician().diagnose(ev)
            if x.failure_mode == "dead_groups"]
    answers = iter([{"candidates": [proposal(d.id, "skip_flat", "filters.keep_group", [("filters.py", KEEP_GROUP,
                                                                                         SPREAD)])]},
                    {"candidates": [proposal(d.id, "skip_flat_v2", "filters.keep_group", [("filters.py", KEEP_GROUP,
                                                                                            SPREAD)])]}])
    ctx = EngineerContext(phase=2, round=1, repo=repo, base_sha=repo.sha("main"), knobs=ev.knobs, domain="math",
                          trial_lost=["skip_flat"])
    with scripted(lambda model, messages: json.dumps(next(answers))) as calls:
        (cand,) = LLMEngineer(llm_ctx(tmp_path), HeuristicEngineer()).propose([d], ctx, {})
    assert "Lost its A/B trial on this main in an earlier phase (do not retry until main changes): skip_flat" in \
        calls[0]["messages"][1]["content"]
    assert "candidate 1: skip_flat lost its A/B trial on this main before" in last_user(calls[1]["messages"])
    assert cand.intervention == "skip_flat_v2"


def test_engineer_may_target_any_metric_the_effect_step_measures_and_nothing_else(tmp_path, repo):
    """A behaviour figure (``turn_cap_rate``), which replay cannot measure but the effect step does, is a target the
    Engineer may name; a name nothing measures goes back to the model."""
    from agents.llm_engineer import target_metrics
    from evotrainer import behaviour
    from evotrainer.judge.replay import METRICS

    assert set(METRICS) | set(behaviour.FIGURES) <= set(target_metrics())
    ev = evidence(tmp_path, repo)
    (d,) = [x.model_copy(update={"status": "confirmed"}) for x in HeuristicDiagnostician().diagnose(ev)
            if x.failure_mode == "dead_groups"]
    unknown = {**proposal(d.id, "skip_flat", "filters.keep_group", [("filters.py", KEEP_GROUP, SPREAD)]),
               "target_metric": "happiness"}
    behaviour_target = {**unknown, "target_metric": "format_failure_rate"}
    answers = iter([{"candidates": [unknown]}, {"candidates": [behaviour_target]}])
    ctx = EngineerContext(phase=1, round=1, repo=repo, base_sha=repo.sha("main"), knobs=ev.knobs, domain="math")
    with scripted(lambda model, messages: json.dumps(next(answers))) as calls:
        (cand,) = LLMEngineer(llm_ctx(tmp_path), HeuristicEngineer()).propose([d], ctx, {})
    assert "target_metric 'happiness' is not one of the listed metrics" in last_user(calls[1]["messages"])
    assert "format_failure_rate" in calls[0]["messages"][1]["content"]
    assert cand.target_metric == "format_failure_rate"


def test_engineer_is_told_the_run_s_ceilings_and_a_budget_over_one_is_sent_back(tmp_path, repo):
    """The room the policy's window leaves (ctx.ceilings, from the last phase) is in the request; a proposal over it
    is sent back with the figure, before it costs a trial that would fail in the trainer."""
    ev = evidence(tmp_path, repo)
    (d,) = [x.model_copy(update={"status": "confirmed"}) for x in HeuristicDiagnostician().diagnose(ev)
            if x.failure_mode == "dead_groups"]
    line = "max_completion_length: 8 "

    def budget(n: int) -> dict:
        return {"candidates": [{**proposal(d.id, "raise_budget", "harness.yaml:max_completion_length",
                                           [("harness.yaml", line, f"max_completion_length: {n} ")]),
                                "target_metric": "truncation_rate", "direction": "down"}]}

    answers = iter([budget(64), budget(40)])
    ctx = EngineerContext(phase=1, round=1, repo=repo, base_sha=repo.sha("main"), knobs=ev.knobs, domain="math",
                          ceilings={"max_completion_length": 50})
    with scripted(lambda model, messages: json.dumps(next(answers))) as calls:
        (cand,) = LLMEngineer(llm_ctx(tmp_path), HeuristicEngineer()).propose([d], ctx, {})
    assert "(a larger value fails in the trainer): max_completion_length 50" in calls[0]["messages"][1]["content"]
    assert "harness.yaml sets max_completion_length 64, over the 50 this run allows" in last_user(calls[1]["messages"])
    assert "max_completion_length: 40" in repo.show_file(cand.sha, "harness.yaml")
