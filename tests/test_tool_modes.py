"""The tool-use failure modes (``turn_cap_hit``, ``tool_errors``, ``tool_spam``: agents/modes.py), the built-in
Diagnostician's rules for them and the moves that answer them, on transcripts of the tools domain replayed against
each task's real environment.

    rules     each fires on rollouts showing its pattern, reports its figure with an interval, and stays silent on
              clean tool-use rollouts and on single-turn ones (turn figures absent or zero)
    moves     max_turns moves both ways and back, only where harness.yaml sets it, the way down sized by the calls
              right answers make; the cost components apply to the tools seed, its catalogued faults and a draw
              of every generated tools family, keep harness.yaml valid and the harness's self-tests passing, charge
              what they say and never lift a wrong answer above a right one, and their mirror (remove_reward) takes
              them out

Run alone: ``.venv/bin/python -m pytest -q tests/test_tool_modes.py``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from agents.diagnostician import CALLS_NEEDED, THRESHOLDS, HeuristicDiagnostician
from agents.playbook import concrete, find
from agents.roles import PhaseEvidence
from evotrainer.contracts import Diagnosis, EvalResult, MetricEvidence, PhaseResult
from evotrainer.domains import get_domain
from evotrainer.domains.tools import ERROR, ToolsDomain
from evotrainer.harness import faults, generated
from evotrainer.harness.knobs import parse_knobs, read_knobs
from evotrainer.harness.repo import HARNESS_FILES, seed_dir
from sandbox import run_selftest
from tests.conftest import rollouts

DOMAIN = ToolsDomain()
TASKS = DOMAIN.splits(0, {"rl": 64})["rl"]  # 16 a level
CAP = 4  # the tools seed's max_turns
CLEAN = ["right"] * 4 + ["wrong"] * 2 + ["guess"] * 2


def transcript(task: dict, kind: str) -> tuple[str, bool]:
    """(completion, stopped by the turn cap) of one kind of rollout of ``task``."""
    calls = "".join(f"get({k})={task['table'][k]};" for k in task["keys"])
    wrong = str(int(task["answer"]) + 1)
    decoy = next(k for k in task["table"] if k not in task["keys"])
    return {"right": (calls + task["answer"], False), "wrong": (calls + wrong, False), "guess": (wrong, False),
            "capped": (calls, True),  # stopped after its calls, before its answer (a cap as short as its calls)
            "error": (f"get(zz)={ERROR};{wrong}", False),  # a key the table lacks
            "repeat": (calls + calls + task["answer"], False),  # every call twice, then the right answer
            "decoy": (calls + f"get({decoy})={task['table'][decoy]};" + wrong, False),  # a call not needed
            "lucky": (task["answer"], False)}[kind]  # right without a call


def tool_rows(kinds: list[str], tasks: list[dict] = TASKS) -> list[dict]:
    """A group of ``kinds`` per task, with the turn figures the environment records for each transcript."""
    rows = []
    for g, task in enumerate(tasks):
        for k, kind in enumerate(kinds):
            completion, capped = transcript(task, kind)
            ok = DOMAIN.verify(task, completion)
            rows.append({"phase": 1, "step": 1 + g // 4, "harness_sha": "0" * 40, "group_id": f"p1-g{g}",
                         "sample_idx": k, "task_id": task["id"], "difficulty": task["difficulty"],
                         "prompt": DOMAIN.canonical_prompt(task), "completion": completion,
                         "completion_tokens": len(completion) + (not capped), "truncated": False,
                         "reward": float(ok), "reward_components": {"correct": float(ok)}, "verified": ok,
                         "advantage": 0.0, "kept": True, "extra": {},
                         **DOMAIN.transcript_fields(task, completion), "hit_turn_cap": capped})
    return rows


def tools_evidence(rows: list[dict], domain=DOMAIN) -> PhaseEvidence:
    dev = EvalResult(accuracy=0.5, n=100, items={f"dev-{i}": float(i % 2) for i in range(100)},
                     ended_length={"n": 0, "budget": 40})
    result = PhaseResult(phase=1, harness_sha="0" * 40, steps=16, eval=dev, dev=dev, rollout_path="",
                         checkpoint_path="", wall_time_s=1.0, tokens=100)
    return PhaseEvidence(phase=1, results=[result], rollouts=rows, phases_in_view=[1], registry={},
                         knobs=read_knobs(seed_dir("tools")), domain=domain)


def found(ev: PhaseEvidence) -> dict[str, Diagnosis]:
    return {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(ev)}


TOOL_MODES = ("turn_cap_hit", "tool_errors", "tool_spam")


# --- the rules ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, kinds, figure", [
    ("turn_cap_hit", ["right"] * 3 + ["capped"] * 3 + ["wrong"] * 2, "turn_cap_rate"),
    ("tool_errors", ["right"] * 4 + ["error"] * 3 + ["wrong"], "tool_error_rate"),
    ("tool_spam", ["right"] * 4 + ["repeat"] * 3 + ["wrong"], "needless_call_share"),
])
def test_each_rule_fires_on_its_pattern_alone_with_an_interval_above_its_threshold(mode, kinds, figure):
    got = found(tools_evidence(tool_rows(kinds)))
    d = got[mode]
    e = d.evidence[0]
    assert e.name == figure and e.threshold == THRESHOLDS[figure] and e.low <= e.value <= e.high
    assert e.low > e.threshold and d.confidence == 0.9 and d.rollout_ids
    assert not set(TOOL_MODES) - {mode} & set(got), sorted(got)  # the other tool rules stay silent


def test_the_cap_rule_says_which_levels_the_cap_stops():
    """Capped two-key transcripts only (levels 3 and 4), as a cap one turn short of them leaves it."""
    rows = tool_rows(CLEAN)
    for r in rows:
        if r["difficulty"] in ("3", "4") and r["sample_idx"] < 3:
            task = next(t for t in TASKS if t["id"] == r["task_id"])
            r["completion"], r["hit_turn_cap"] = transcript(task, "capped")
            r.update(verified=False, reward=0.0)
    d = found(tools_evidence(rows))["turn_cap_hit"]
    assert "level 1: 0%" in d.statement and "level 3: 38%" in d.statement and "max_turns 4" in d.statement


def test_calls_beyond_what_right_answers_make_are_spam_without_a_repeat():
    """A call of a key the question does not name, after the needed ones: no call repeats, but right answers of the
    level make fewer. The rule cites the most calls a level's right answers make (two: levels 3 and 4)."""
    d = found(tools_evidence(tool_rows(["right"] * 4 + ["decoy"] * 4)))["tool_spam"]
    assert {e.name: e.value for e in d.evidence}["repeated_call_share"] == 0.0
    assert {e.name: e.value for e in d.evidence}[CALLS_NEEDED] == 2


def test_right_answers_reached_without_a_call_do_not_make_every_call_needless():
    """Lucky guesses, most of the right answers but not three in four: a median of their calls would say the levels
    need none, and call every call needless."""
    ev = tools_evidence(tool_rows(["lucky"] * 4 + ["right"] * 3 + ["wrong"]))
    assert "tool_spam" not in found(ev)
    ev = tools_evidence(tool_rows(["lucky"] * 4 + ["right"] * 3 + ["decoy"]))
    assert "tool_spam" in found(ev)  # a call beyond what the calling right answers make still is


def test_spam_is_read_from_repeats_where_right_answers_are_too_few_to_say_what_a_level_needs():
    rows = tool_rows(["repeat"] + ["wrong"] * 7)  # 16 right answers a level: under the 20 a need is read from
    d = found(tools_evidence(rows))["tool_spam"]
    assert CALLS_NEEDED not in {e.name for e in d.evidence} and "no level has enough" in d.statement


def test_what_calls_a_cap_needs_is_not_cited_while_a_level_has_too_few_right_answers_to_say():
    """Levels 1-2 answered right with one call, levels 3-4 (two calls needed) never: the most any level needs is
    unknown, so no figure is cited that would size a cap of two turns, too short for levels 3-4."""
    rows = tool_rows(["right"] * 4 + ["decoy"] * 4)
    for r in rows:
        if r["difficulty"] in ("3", "4") and r["verified"]:
            task = next(t for t in TASKS if t["id"] == r["task_id"])
            r.update(completion=transcript(task, "wrong")[0], verified=False, reward=0.0)
    d = found(tools_evidence(rows))["tool_spam"]
    assert CALLS_NEEDED not in {e.name for e in d.evidence}
    assert "level 1: 1, level 2: 1; level 3, 4: too few verified-correct rollouts to say" in d.statement


@pytest.mark.parametrize("case", ["clean", "guesses", "single_turn"])
def test_no_tool_rule_fires_on_clean_tool_use_nor_on_single_turn_rollouts(case):
    """Right transcripts, wrong ones with the right calls and guesses; rollouts that never call; math rollouts
    whose rows carry no turn figures at all."""
    ev = {"clean": lambda: tools_evidence(tool_rows(CLEAN)),
          "guesses": lambda: tools_evidence(tool_rows(["guess"] * 8)),
          "single_turn": lambda: tools_evidence(rollouts([[("9", True), ("1", False)] * 4] * 60),
                                                get_domain("math"))}[case]()
    if case == "single_turn":
        for r in ev.rollouts:
            r.pop("turns", None), r.pop("tool_calls", None)
    assert not set(TOOL_MODES) & set(found(ev))


# --- the moves ---------------------------------------------------------------------------------------------------
def files_of(folder: Path) -> dict[str, str]:
    return {name: (folder / name).read_text() for name in HARNESS_FILES}


def cites(mode: str, **figures: float) -> dict:
    return {"diagnosis": Diagnosis(id="d1-1", layer="behavior", failure_mode=mode, statement="s", severity=1,
                                   confidence=0.9, evidence=[MetricEvidence(name=k, value=v, low=v, high=v, n=300)
                                                             for k, v in figures.items()])}


def turns_after(move: str, files: dict[str, str], ctx: dict) -> int | None:
    edits = find("tools", move).edit(files, parse_knobs(files["harness.yaml"]), ctx)
    return edits and parse_knobs(edits["harness.yaml"]).max_turns


def test_the_turn_cap_moves_both_ways_and_back_only_where_harness_yaml_sets_it():
    seed = files_of(seed_dir("tools"))
    up = turns_after("raise_max_turns", seed, cites("turn_cap_hit"))
    assert up == CAP + 1
    raised = {**seed, "harness.yaml": find("tools", "raise_max_turns").edit(
        seed, parse_knobs(seed["harness.yaml"]), {})["harness.yaml"]}
    assert turns_after("lower_max_turns", raised, cites("tool_spam")) == CAP  # the mirror returns the start
    assert find("tools", "raise_max_turns").mirror == "lower_max_turns"
    assert find("tools", "lower_max_turns").mirror == "raise_max_turns"
    math_seed = files_of(seed_dir("math"))
    assert turns_after("raise_max_turns", math_seed, {}) is None and turns_after("lower_max_turns", math_seed, {}) \
        is None  # a single-turn harness has no cap to move


def test_the_way_down_leaves_room_for_the_calls_right_answers_make_and_the_answer():
    seed = files_of(seed_dir("tools"))
    assert turns_after("lower_max_turns", seed, cites("tool_spam", **{CALLS_NEEDED: 1.0})) == 2
    assert turns_after("lower_max_turns", seed, cites("tool_spam", **{CALLS_NEEDED: 3.0})) is None  # needs all 4


def test_the_cap_rises_on_the_catalogued_cap_too_short_for_its_transcripts(tmp_path):
    short = files_of(faults.materialize("tools", "short_cap", tmp_path / "short_cap"))
    assert turns_after("raise_max_turns", short, cites("turn_cap_hit")) == parse_knobs(
        short["harness.yaml"]).max_turns + 1
    assert turns_after("lower_max_turns", short, cites("tool_spam", **{CALLS_NEEDED: 2.0})) is None


def _rewards(path: Path):
    spec = importlib.util.spec_from_file_location(f"_tool_costs_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("move", ["tool_error_cost", "repeat_call_cost"])
@pytest.mark.parametrize("harness", ["seed"] + faults.names("tools"))
def test_a_cost_applies_to_the_seed_and_each_catalogued_fault_and_passes_the_harness_s_self_tests(move, harness,
                                                                                                 tmp_path):
    dest = tmp_path / "h"
    if harness == "seed":
        import shutil

        shutil.copytree(seed_dir("tools"), dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        faults.materialize("tools", harness, dest)
        (dest / faults.CARD).unlink(missing_ok=True)
    files = files_of(dest)
    edits = find("tools", move).edit(files, parse_knobs(files["harness.yaml"]), cites(move))
    assert edits and set(edits) == {"rewards.py", "harness.yaml"}
    for name, text in edits.items():
        (dest / name).write_text(text)
    knobs = read_knobs(dest)
    assert knobs.reward_weights[move] > 0
    after = {**files, **edits}
    assert find("tools", move).edit(after, knobs, {}) is None  # not twice
    result = run_selftest(dest)
    assert result["n"] > 0 and not result["failed"], result["failed"]


def test_the_costs_charge_what_they_say_and_never_lift_a_wrong_answer_above_a_right_one(tmp_path):
    import shutil

    dest = tmp_path / "h"
    shutil.copytree(seed_dir("tools"), dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    files = files_of(dest)
    for move in ("tool_error_cost", "repeat_call_cost"):
        edits = find("tools", move).edit(files, parse_knobs(files["harness.yaml"]), {})
        files = {**files, **edits}
    for name, text in files.items():
        (dest / name).write_text(text)
    module, weights = _rewards(dest / "rewards.py"), read_knobs(dest).reward_weights
    task = DOMAIN.harness_task(TASKS[-1])  # a level-4 task: two calls

    def total(kind: str) -> tuple[float, dict]:
        completion, capped = transcript(TASKS[-1], kind)
        sample = {"completion": completion, "task": task, "truncated": False, "hit_turn_cap": capped,
                  **DOMAIN.transcript_fields(TASKS[-1], completion)}
        parts = {c: fn(sample) for c, fn in module.COMPONENTS.items()}
        return sum(weights.get(c, 1.0) * v for c, v in parts.items()), parts

    assert total("error")[1]["tool_error_cost"] == -1.0 and total("right")[1]["tool_error_cost"] == 0.0
    assert total("repeat")[1]["repeat_call_cost"] == -0.5 and total("decoy")[1]["repeat_call_cost"] == 0.0
    assert min(total(k)[0] for k in ("right", "repeat")) > max(total(k)[0] for k in ("wrong", "error", "decoy"))
    single = {"completion": "9", "task": task, "truncated": False}  # a single-turn sample: no turn figures
    assert module.tool_error_cost(single) == 0.0 and module.repeat_call_cost(single) == 0.0


@pytest.mark.parametrize("move", ["tool_error_cost", "repeat_call_cost"])
def test_a_cost_s_mirror_is_its_removal(move):
    seed = files_of(seed_dir("tools"))
    after = {**seed, **find("tools", move).edit(seed, parse_knobs(seed["harness.yaml"]), {})}
    knobs = parse_knobs(after["harness.yaml"])
    removals = {m.name: m for m in concrete(find("tools", "remove_reward"), after, knobs, {})}
    assert find("tools", move).no_mirror.startswith(f"remove_reward:{move}") and f"remove_reward:{move}" in removals
    back = removals[f"remove_reward:{move}"].edit(after, knobs, {})
    assert move not in parse_knobs(back["harness.yaml"]).reward_weights and f'"{move}"' not in back["rewards.py"]


# --- what the LLM roles read -------------------------------------------------------------------------------------
@pytest.mark.parametrize("domain", ["tools", "math"])
def test_the_llm_roles_samples_show_the_turn_figures_only_where_a_rollout_called_a_tool(domain, tmp_path):
    """The figures the tool-use rules read reach an LLM role's ``sample`` on a tools run; a single-turn run's samples
    (whose rows carry the defaults: no call) keep their columns."""
    from agents.evidence_tools import SAMPLE_COLUMNS, TURN_COLUMNS, EvidenceTools
    from evotrainer.contracts import Rollout
    from evotrainer.rollouts import write_rollouts

    rows = tool_rows(["right", "error"]) if domain == "tools" else rollouts([[("9", True), ("1", False)]] * 4)
    write_rollouts([Rollout(**r) for r in rows], tmp_path / "p1.parquet")
    tools = EvidenceTools({1: str(tmp_path / "p1.parquet")}, [])
    header, first = tools.sample(["p1-g0/1"]).splitlines()[:2]
    tools.close()
    shown = [c.strip() for c in header.split("|")]
    assert shown == [c.strip() for c in (SAMPLE_COLUMNS + (", " + TURN_COLUMNS if domain == "tools" else ""))
                     .split(",")]
    if domain == "tools":  # the erring call: two turns, one call, one error, not capped
        assert first.split(" | ")[-4:] == ["2", "1", "1", "False"]


@pytest.mark.parametrize("family", sorted(f.name for f in generated.families("tools")))
def test_the_costs_apply_to_a_draw_of_every_generated_tools_family_and_its_self_tests_pass(family, tmp_path):
    """Whatever layer the drawn defect rewrites (a reward module of its own, a pinned self-test, filters, knobs),
    both costs add to it, harness.yaml validates and the harness's own self-tests pass; the turn cap rises on
    each."""
    import shutil

    dest = tmp_path / "h"
    shutil.copytree(seed_dir("tools"), dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    generated.write(generated.draw(generated.parse_spec("generated:1@7", "tools")[0], family=family), dest)
    (dest / faults.CARD).unlink()
    files = files_of(dest)
    assert turns_after("raise_max_turns", files, cites("turn_cap_hit"))
    for move in ("tool_error_cost", "repeat_call_cost"):
        edits = find("tools", move).edit(files, parse_knobs(files["harness.yaml"]), cites(move))
        assert edits, move
        files = {**files, **edits}
    for name, text in files.items():
        (dest / name).write_text(text)
    assert {"tool_error_cost", "repeat_call_cost"} <= set(read_knobs(dest).reward_weights)
    result = run_selftest(dest)
    assert result["n"] > 0 and not result["failed"], result["failed"]


def test_a_rollout_the_cap_stopped_while_it_repeated_a_call_is_spam_not_a_cap_too_short():
    """Rollouts calling one key over and over until the cap stops them: a higher cap gives them more turns to loop
    in, so the cap rule leaves them to the spam rule, which reads their repeats."""
    rows = tool_rows(["right"] * 4 + ["capped"] * 3 + ["wrong"])
    for r in rows:
        if r["hit_turn_cap"]:
            task = next(t for t in TASKS if t["id"] == r["task_id"])
            key = task["keys"][0]
            r["completion"] = f"get({key})={task['table'][key]};" * CAP
            r.update(DOMAIN.transcript_fields(task, r["completion"], CAP))
            assert r["hit_turn_cap"] and r["tool_calls"] == CAP
    got = found(tools_evidence(rows))
    assert "turn_cap_hit" not in got and "tool_spam" in got
