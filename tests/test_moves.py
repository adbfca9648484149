"""The Engineer's moves (``agents/playbook.py``): every failure mode has one, every knob moves both ways and back,
no move carries a catalogued defect's constant, neutral forms are the evaluator's and no-ops where already neutral,
and an undo restores the files exactly.

Each move is tried on the clean math seed and on a "busy" harness that moves every layer off neutral (filters that
drop, curriculum code that weighs, a prompt written another way, a second reward component, every knob off its
default), with a diagnosis of each mode it answers: a move applies on one of them or the test says which did not.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import yaml

from agents import modes
from agents.diagnostician import UNCUT_LENGTH
from agents.knob_moves import KNOBS, stepped
from agents.move_kit import EVALUATOR_BUDGET, ZERO_ADVANTAGE, set_yaml_entry, set_yaml_scalar
from agents.playbook import UNDO, concrete, find, for_domain, repairs_by_mode
from evotrainer.contracts import Diagnosis, MetricEvidence
from evotrainer.domains import DOMAINS, get_domain
from evotrainer.domains.neutral import forms
from evotrainer.harness import faults
from evotrainer.harness.knobs import Knobs, parse_knobs
from evotrainer.harness.repo import HARNESS_FILES, HarnessRepo, seed_dir
from tests.conftest import ROOT, SEED

BUSY_KNOBS = {"learning_rate": "3.0e-4", "temperature": "1.5", "max_completion_length": "16", "loss_type": "dapo",
              "beta": "0.04", "scale_rewards": "batch", "mask_truncated_completions": "true", "lr_schedule": "cosine",
              "warmup_steps": "10", "weight_decay": "0.01", "updates_per_batch": "4", "oversample": "2"}
BUSY_CODE = {
    "filters.py": ('def keep_rollout(rollout: dict) -> bool:\n    return not rollout["truncated"]\n\n\n'
                   'def keep_group(group: list[dict]) -> bool:\n    rewards = [r["reward"] for r in group]\n'
                   '    return max(rewards) - min(rewards) > 1e-6\n'),
    "curriculum.py": ("def weights(levels, base, history):\n    return {lv: float(base.get(lv, 1.0)) * "
                      "(2.0 if lv == levels[-1] else 1.0) for lv in levels}\n"),
    "prompt.py": 'def make_prompt(task: dict) -> str:\n    return task["expression"].replace(" ", "").strip() + "="\n',
}


def seed_files() -> dict[str, str]:
    return {name: (SEED / name).read_text() for name in HARNESS_FILES}


def tools_files() -> dict[str, str]:
    """The tools seed: a multi-turn harness (its harness.yaml sets max_turns)."""
    return {name: (seed_dir("tools") / name).read_text() for name in HARNESS_FILES}


def busy_files() -> dict[str, str]:
    """Every layer off neutral: two reward components (one that reads no answer), filters that drop, curriculum
    code and weights that are not equal, a prompt that is the evaluator's text written another way, every knob moved."""
    files = seed_files()
    files.update(find("math", "format_reward").edit(files, parse_knobs(files["harness.yaml"]), {}))
    files.update(BUSY_CODE)
    text = files["harness.yaml"]
    for key, value in BUSY_KNOBS.items():
        text = set_yaml_scalar(text, key, value)
    for level, weight in {"1": "2.0", "4": "0.5"}.items():
        text = set_yaml_entry(text, "curriculum_weights", level, weight)
    files["harness.yaml"] = text
    return files


def diagnosis(mode: str | None, rich: bool) -> Diagnosis | None:
    """A confirmed diagnosis of ``mode``, citing (``rich``) a collapse-sized accuracy drop, a lenient reward
    component, the length completions end within and the evaluator's budget."""
    if mode is None:
        return None
    cited = {"dev_accuracy_drop": 0.3, "dev_accuracy_before": 0.4, "rewarded_but_wrong": 0.3,
             "correct_but_unrewarded": 0.0, "credits_wrong:correct": 0.9, UNCUT_LENGTH: 6.0,
             EVALUATOR_BUDGET: 12.0} if rich else {}
    return Diagnosis(id="d1-1", layer=modes.get(mode).layer, failure_mode=mode, statement="s", severity=1,
                     confidence=0.9, status="confirmed",
                     evidence=[MetricEvidence(name=k, value=v, low=v, high=v, n=300) for k, v in cited.items()])


def level_stats() -> dict[str, dict]:
    return {"1": {"n": 320, "reward_mean": 0.9, "dead_group_ratio": 0.5},
            "2": {"n": 320, "reward_mean": 0.1, "dead_group_ratio": 0.8},
            "3": {"n": 320, "reward_mean": 0.05, "dead_group_ratio": 0.9},
            "4": {"n": 320, "reward_mean": 0.0, "dead_group_ratio": 1.0}}


def applied(move, files: dict[str, str] | None = None):
    """(files, edits, ctx) of the first harness (the seed, the busy one, then the tools seed) and diagnosis (each mode
    the move answers, citing evidence or not) on which ``move`` (a template: its first concrete move) applies; None
    when none does."""
    for base in ([files] if files else [seed_files(), busy_files(), tools_files()]):
        knobs = parse_knobs(base["harness.yaml"])
        for mode in (move.answers or (None,)):
            for rich in (True, False):
                ctx = {"diagnosis": diagnosis(mode, rich), "level_stats": level_stats(), "levels": ["1", "2", "3", "4"]}
                for m in concrete(move, base, knobs, ctx):
                    edits = m.edit(base, knobs, ctx)
                    if edits:
                        return base, edits, ctx, m
    return None


MOVES = [m for m in for_domain("math") if m is not UNDO]
TOOLS_MOVES = [m for m in for_domain("tools") if m.name not in {n.name for n in MOVES} | {UNDO.name}]


@pytest.mark.parametrize("domain", ["math", "tools"])
def test_every_registered_failure_mode_has_a_move_in_a_domain_where_it_can_occur(domain):
    """Every mode in the tools domain (multi-turn: all of them occur there); every mode but the multi-turn ones in
    math, whose single-turn rollouts never show them."""
    from evotrainer.trainer.shapes import shape_of

    multi_turn = shape_of(get_domain(domain)) != "single_turn"
    can_occur = {m.name for m in modes.MODES.values() if multi_turn or not m.multi_turn}
    assert domain == "math" or can_occur == set(modes.MODES)
    missing = sorted(can_occur - set(repairs_by_mode(domain)))
    assert not missing, f"failure modes no move answers: {missing}"
    unknown = sorted(set(repairs_by_mode(domain)) - set(modes.MODES))
    assert not unknown, f"moves answer modes the registry does not know: {unknown}"


def test_the_harness_readme_tables_every_knob_the_moves_move():
    from tests.test_harness_api import table

    assert {row["knob"] for row in table("Moves", "knob")} == set(KNOBS)


def test_the_evidence_moves_size_from_is_what_the_diagnostician_cites():
    """The names the moves read (the evaluator's budget, a stall's share of groups without spread, the length
    completions end within) are names the built-in Diagnostician's rules write."""
    source = (ROOT / "agents" / "diagnostician.py").read_text()
    for name in (EVALUATOR_BUDGET, ZERO_ADVANTAGE):
        assert f'"{name}"' in source, name


def test_every_knob_has_moves_both_ways_and_every_knob_move_a_mirror_or_a_reason():
    numeric = {k for k, row in KNOBS.items() if not row.values}
    assert set(KNOBS) == set(Knobs.model_fields) - {"reward_weights", "curriculum_weights"}
    by_name = {m.name: m for m in for_domain("math")}
    for key in numeric:
        assert {f"raise_{key}", f"lower_{key}"} <= set(by_name), key
    for m in for_domain("math"):
        if not m.variable.startswith("harness.yaml:") or m.variable.endswith("_weights"):
            continue
        if m.mirror:
            assert m.mirror in by_name, f"{m.name}: mirror {m.mirror} is no move"
            assert by_name[m.mirror].mirror == m.name, f"{m.name} <-> {m.mirror} are not each other's mirror"
        else:
            assert m.no_mirror, f"{m.name} has neither a mirror nor a reason why not"


@pytest.mark.parametrize("key", [k for k, row in KNOBS.items() if not row.values])
def test_a_step_up_then_down_returns_the_start(key):
    """On the seed's value, the busy harness's and a value one step off each (within the rounding harness.yaml
    writes), for steps and jumps alike."""
    row = KNOBS[key]
    starts = {getattr(parse_knobs(f["harness.yaml"]), key) for f in (seed_files(), busy_files(), tools_files())}
    starts.discard(None)  # a knob a harness leaves unset (a single-turn harness's max_turns)
    assert starts, key
    for start in list(starts):
        starts.add(stepped(row, start, +1, row.step))
    for start in sorted(s for s in starts if s is not None):
        for factor in (row.step, row.jump):
            up = stepped(row, start, +1, factor) if factor else None
            if up is None:
                continue
            back = stepped(row, float(f"{up:.6g}"), -1, factor)
            assert back == pytest.approx(start, rel=1e-5), (key, start, factor, up, back)


@pytest.mark.parametrize("move", MOVES + TOOLS_MOVES, ids=lambda m: m.name)
def test_every_move_applies_somewhere_and_keeps_harness_yaml_valid(move):
    found = applied(move)
    assert found, f"{move.name} applies to neither the seed nor the busy harness with any diagnosis it answers"
    base, edits, _, _ = found
    assert set(edits) <= set(HARNESS_FILES)
    parse_knobs(edits.get("harness.yaml", base["harness.yaml"]))
    for name, text in edits.items():
        if name.endswith(".py"):
            compile(text, name, "exec")


def _planted() -> list[tuple[str, object]]:
    """(knob, value) of every harness.yaml value a catalogued defect sets that differs from the clean seed's."""
    seed = yaml.safe_load((SEED / "harness.yaml").read_text())
    out = []
    for name in faults.names("math"):
        path = faults.fault_dir(name) / "harness.yaml"
        if path.exists():
            bad = yaml.safe_load(path.read_text())
            out += [(k, v) for k, v in bad.items() if v != seed.get(k)]
    return out


def test_the_catalogue_plants_knob_values_the_check_below_can_see():
    keys = {k for k, _ in _planted()}
    assert {"learning_rate", "max_completion_length", "curriculum_weights"} <= keys


@pytest.mark.parametrize("move", [m for m in MOVES if m.variable.startswith("harness.yaml:")], ids=lambda m: m.name)
def test_no_move_applied_to_the_clean_seed_lands_on_a_catalogued_defect_value(move):
    """A move sized by mechanism does not reproduce (or exactly undo into) a planted constant: applied once to the
    clean seed, no knob it writes equals a value a catalogued defect plants there (a tenfold learning rate, a budget
    of 2, curriculum weights of 0 and 1 with levels zeroed)."""
    files = seed_files()
    knobs = parse_knobs(files["harness.yaml"])
    seed = yaml.safe_load(files["harness.yaml"])
    for mode in move.answers or (None,):
        for rich in (True, False):
            ctx = {"diagnosis": diagnosis(mode, rich), "level_stats": level_stats(), "levels": ["1", "2", "3", "4"]}
            for m in concrete(move, files, knobs, ctx):
                edits = m.edit(files, knobs, ctx)
                if not edits or "harness.yaml" not in edits:
                    continue
                new = yaml.safe_load(edits["harness.yaml"])
                for key, bad in _planted():
                    if new.get(key) == seed.get(key):
                        continue
                    if isinstance(bad, dict):
                        hits = {lv: w for lv, w in new[key].items() if w != seed[key].get(lv) and bad.get(lv) == w}
                        assert not hits, f"{m.name} writes {key} {hits}, a catalogued defect's"
                    else:
                        assert not math.isclose(float(new[key]), float(bad)), f"{m.name}: {key} {new[key]}"


@pytest.mark.parametrize("domain, fault", [(d, f) for d in ("math", "tools") for f in faults.names(d)
                                           if (faults.fault_dir(f) / "harness.yaml").exists()])
def test_no_move_undoes_a_catalogued_defect_by_the_clean_seed_s_constant(domain, fault, tmp_path):
    """On a faulty seed, with no evidence beyond the levels the phase sampled (those weighing more than 0), no move
    writes exactly the clean seed's value back into a knob the defect planted: a move that does was fitted to the
    catalogue (dividing a tenfold learning rate by exactly ten, weighing a zeroed level 1.0, doubling a halved turn
    cap)."""
    dest = faults.materialize(domain, fault, tmp_path / fault)
    files = {name: (dest / name).read_text() for name in HARNESS_FILES}
    knobs = parse_knobs(files["harness.yaml"])
    seed = yaml.safe_load((seed_dir(domain) / "harness.yaml").read_text())
    planted = {k: v for k, v in yaml.safe_load(files["harness.yaml"]).items() if v != seed.get(k)}
    stats = {lv: st for lv, st in level_stats().items() if knobs.curriculum_weights.get(lv, 1.0) > 0}
    for move in (m for m in for_domain(domain) if m is not UNDO):
        for mode in move.answers or (None,):
            ctx = {"diagnosis": diagnosis(mode, False), "level_stats": stats, "levels": ["1", "2", "3", "4"]}
            for m in concrete(move, files, knobs, ctx):
                edits = m.edit(files, knobs, ctx)
                new = yaml.safe_load(edits["harness.yaml"]) if edits and "harness.yaml" in edits else {}
                for key, bad in planted.items():
                    if key not in new or new[key] == bad:
                        continue
                    if isinstance(bad, dict):
                        back = {lv: w for lv, w in new[key].items() if w != bad.get(lv) and w == seed[key].get(lv)}
                        assert not back, f"{m.name} on {fault}: {key} {back}, the clean seed's"
                    else:
                        assert not math.isclose(float(new[key]), float(seed[key])), f"{m.name} on {fault}: {key}"


@pytest.mark.parametrize("name", DOMAINS)
def test_the_neutral_prompt_is_the_evaluator_s_in_both_forms(name: str):
    """Given the harness's view of a task (what make_prompt gets), the domain's neutral prompt is its canonical one."""
    import runpy
    import tempfile

    domain, neutral = get_domain(name), forms(name)
    tasks = domain.splits(0, {"dev": 40})["dev"]
    with tempfile.TemporaryDirectory() as tmp:
        for form, want in ((neutral.prompt, domain.canonical_prompt),
                           (neutral.chat_prompt, lambda t: [{"role": "user", "content": domain.instruction(t)}])):
            path = Path(tmp) / "prompt.py"
            path.write_text(form)
            make_prompt = runpy.run_path(str(path))["make_prompt"]
            assert all(make_prompt(domain.harness_task(t)) == want(t) for t in tasks)


NEUTRAL = ["canonical_prompt", "keep_all_rollouts", "keep_all_groups", "keep_all_filters", "neutral_curriculum_code",
           "equal_curriculum_weights"]


@pytest.mark.parametrize("name", NEUTRAL)
def test_a_move_to_neutral_is_a_no_op_where_already_neutral_and_its_result_passes_the_harness_api(name, tmp_path):
    """The clean seed is neutral in every code layer (so is the chat seed's prompt): no neutral move applies to it.
    On the busy harness it does, its result is neutral (the move does not apply again), defines the harness API's
    names with its parameters and passes the harness's own self-tests in the sandbox."""
    from sandbox import run_selftest
    from tests.test_harness_api import CODE_MODULES, _args, _params, table

    move = find("math", name)
    ctx = {"level_stats": level_stats(), "levels": ["1", "2", "3", "4"], "diagnosis": diagnosis(move.answers[0], True)}
    seed = seed_files()
    assert move.edit(seed, parse_knobs(seed["harness.yaml"]), ctx) is None
    chat = {**seed, "prompt.py": (ROOT / "harness_repo" / "math_chat" / "prompt.py").read_text()}
    assert move.edit(chat, parse_knobs(chat["harness.yaml"]), ctx) is None
    busy = busy_files()
    edits = move.edit(busy, parse_knobs(busy["harness.yaml"]), ctx)
    assert edits
    after = {**busy, **edits}
    assert move.edit(after, parse_knobs(after["harness.yaml"]), ctx) is None  # neutral now
    dest = tmp_path / "h"
    (dest / "tests").mkdir(parents=True)
    for f, text in after.items():
        (dest / f).write_text(text)
    (dest / "tests" / "test_harness.py").write_text((SEED / "tests" / "test_harness.py").read_text())
    import ast

    for module in CODE_MODULES:
        defs = {n.name: n for n in ast.parse(after[module]).body if isinstance(n, ast.FunctionDef)}
        for row in table(module, "name"):
            if row["kind"] == "function":
                assert _args(defs[row["name"]]) == _params(row["call"]), (module, row["name"])
    result = run_selftest(dest)
    assert result["n"] > 0 and not result["failed"], result["failed"]


def test_the_canonical_prompt_keeps_the_form_the_harness_has():
    move = find("math", "canonical_prompt")
    files = seed_files()
    messages = {**files, "prompt.py": 'def make_prompt(task: dict) -> list[dict]:\n    return [{"role": "user", '
                                      '"content": task["expression"]}]\n'}
    text = {**files, "prompt.py": 'def make_prompt(task: dict) -> str:\n    return task["question"]\n'}
    knobs = parse_knobs(files["harness.yaml"])
    assert "Reply with only the number" in move.edit(messages, knobs, {})["prompt.py"]
    assert 'task["expression"].replace(" ", "") + "="' in move.edit(text, knobs, {})["prompt.py"]


def test_a_reward_component_is_removed_in_turn_but_never_the_last_nor_the_last_answer_check():
    files = busy_files()
    knobs = parse_knobs(files["harness.yaml"])
    names = [m.name for m in concrete(find("math", "remove_reward"), files, knobs, {})]
    assert names == ["remove_reward:well_formed"]  # correct checks the answer and nothing names it
    named = {"diagnosis": diagnosis("reward_disagreement", True)}  # the evidence names correct as lenient
    assert [m.name for m in concrete(find("math", "remove_reward"), files, knobs, named)] == [
        "remove_reward:well_formed"]  # but it is the only component that checks the answer
    files.update(find("math", "partial_credit_reward").edit(files, knobs, {}))  # closeness checks it too
    knobs = parse_knobs(files["harness.yaml"])
    assert [m.name for m in concrete(find("math", "remove_reward"), files, knobs, named)] == [
        "remove_reward:correct", "remove_reward:well_formed"]
    seed = seed_files()
    assert concrete(find("math", "remove_reward"), seed, parse_knobs(seed["harness.yaml"]), named) == []
    edits = concrete(find("math", "remove_reward"), files, knobs, {})[0].edit(files, knobs, {})
    assert "well_formed" not in parse_knobs(edits["harness.yaml"]).reward_weights
    assert '"well_formed"' not in edits["rewards.py"].split("COMPONENTS =")[1]


def test_curriculum_moves_find_starved_levels_by_mechanism_not_by_zero_weights():
    """Dead groups on the levels the phase sampled, while a level is sampled rarely (curriculum code, not zeros in
    harness.yaml, makes it so): the curriculum moves' cause holds. With every level sampled alike, it does not."""
    move = find("math", "neutral_curriculum_code")
    files = busy_files()
    knobs = parse_knobs(files["harness.yaml"])
    rare = {lv: {"n": 600 if lv != "1" else 40, "reward_mean": 0.0, "dead_group_ratio": 0.8} for lv in "1234"}
    assert move.cause(files, knobs, {"level_stats": rare, "levels": list("1234")})
    even = {lv: dict(st, n=600) for lv, st in rare.items()}
    assert not move.cause(files, knobs, {"level_stats": even, "levels": list("1234")})
    weights = find("math", "equal_curriculum_weights").edit(files, knobs, {"levels": list("1234")})["harness.yaml"]
    assert set(yaml.safe_load(weights)["curriculum_weights"].values()) == {0.25}


def test_jumps_need_a_stall_with_signal_or_a_collapse():
    files = seed_files()
    knobs = parse_knobs(files["harness.yaml"])
    up, down = find("math", "jump_learning_rate_up"), find("math", "jump_learning_rate_down")
    stalled = diagnosis("policy_stalled", False)
    assert up.edit(files, knobs, {"diagnosis": stalled})
    dead = stalled.model_copy(update={"evidence": [MetricEvidence(name=ZERO_ADVANTAGE, value=0.9, low=0.85,
                                                                  high=0.95, n=60)]})
    assert up.edit(files, knobs, {"diagnosis": dead}) is None  # no signal to follow: a larger step is no answer
    assert down.edit(files, knobs, {"diagnosis": diagnosis("accuracy_regression", True)})  # fell by 75%
    small = diagnosis("accuracy_regression", False).model_copy(update={"evidence": [
        MetricEvidence(name="dev_accuracy_drop", value=0.05, low=0.02, high=0.08, n=300),
        MetricEvidence(name="dev_accuracy_before", value=0.4, low=0.35, high=0.45, n=300)]})
    assert down.edit(files, knobs, {"diagnosis": small}) is None and find("math", "lower_learning_rate").edit(
        files, knobs, {"diagnosis": small})


def test_the_budget_moves_size_from_evidence_both_ways():
    files = seed_files()
    knobs = parse_knobs(files["harness.yaml"])

    def budget(name, room=None, **cite):
        d = diagnosis("truncation", False).model_copy(update={"evidence": [
            MetricEvidence(name=k, value=v, low=v, high=v, n=300) for k, v in cite.items()]})
        ceilings = {"max_completion_length": room} if room else {}
        edits = find("math", name).edit(files, knobs, {"diagnosis": d, "ceilings": ceilings})
        return edits and yaml.safe_load(edits["harness.yaml"])["max_completion_length"]

    assert budget("raise_max_completion_length", **{UNCUT_LENGTH: 30.0}) == 32
    # the policy's window leaves room for 20 tokens after the longest prompt: a raise asks for no more, and none is
    # proposed where the budget already fills that room
    assert budget("raise_max_completion_length", room=20, **{UNCUT_LENGTH: 30.0}) == 20
    assert budget("raise_max_completion_length", room=8) is None
    assert budget("lower_max_completion_length", room=8) == 4
    assert budget("raise_max_completion_length") == 16
    assert budget("lower_max_completion_length") == 4
    assert budget("lower_max_completion_length", **{UNCUT_LENGTH: 3.0}) is None  # twice what they need is 8
    big = {**files, "harness.yaml": set_yaml_scalar(files["harness.yaml"], "max_completion_length", "1024")}
    d = diagnosis("length_growth", False).model_copy(update={"evidence": [
        MetricEvidence(name=UNCUT_LENGTH, value=6.0, low=6.0, high=6.0, n=300)]})
    edits = find("math", "lower_max_completion_length").edit(big, parse_knobs(big["harness.yaml"]), {"diagnosis": d})
    assert yaml.safe_load(edits["harness.yaml"])["max_completion_length"] == 16


def test_undo_restores_the_files_exactly_in_any_phase(tmp_path):
    """A promotion is undone without a stall: its files as they were before it, even after a later promotion of
    another file; an undone promotion is not offered again, nor an undo itself."""
    from agents.engineer import HeuristicEngineer
    from agents.roles import EngineerContext
    from evotrainer.contracts import Candidate, Promotion

    repo = HarnessRepo.create(tmp_path / "harness", "math")
    seed = repo.sha("main")
    promos = []
    for k, name in enumerate(["raise_temperature", "drop_zero_variance_groups"], 1):
        files = {f: repo.show_file("main", f) for f in HARNESS_FILES}
        edits = find("math", name).edit(files, parse_knobs(files["harness.yaml"]), {})
        cand = Candidate(branch=f"candidates/phase-{k}-1", base_sha=repo.sha("main"), diagnosis_id="d",
                         intervention=name, hypothesis="h", variable=find("math", name).variable,
                         target_metric="dead_group_ratio", direction="down", expected="e", rollback="r",
                         files=sorted(edits))
        cand.sha = repo.commit_candidate(cand.branch, repo.sha("main"), edits, "s", "b", {})
        merged = repo.promote(cand.branch, "P", "h", {})
        promos.append(Promotion(phase=k, branch=cand.branch, sha=cand.sha, main_sha=merged, candidate=cand))
    d = diagnosis("edit_regression", False)
    ctx = EngineerContext(phase=3, round=1, repo=repo, base_sha=repo.sha("main"), knobs=repo.knobs("main"),
                          domain="math", promotions=promos)
    cands = HeuristicEngineer().propose([d], ctx, {})
    assert [c.intervention for c in cands] == ["undo:candidates/phase-2-1", "undo:candidates/phase-1-1"]
    assert repo.show_file(cands[0].sha, "filters.py") == repo.show_file(seed, "filters.py")
    assert repo.show_file(cands[1].sha, "harness.yaml") == repo.show_file(seed, "harness.yaml")
    assert repo.show_file(cands[1].sha, "filters.py") == repo.show_file("main", "filters.py")  # the later one stays
    undone = promos + [Promotion(phase=3, branch="candidates/phase-3-1", sha=cands[0].sha, main_sha=repo.promote(
        cands[0].branch, "P", "h", {}), candidate=cands[0])]
    ctx.base_sha, ctx.promotions, ctx.phase = repo.sha("main"), undone, 4
    assert [c.intervention for c in HeuristicEngineer().propose([d], ctx, {})] == ["undo:candidates/phase-1-1"]


def test_random_knob_values_step_and_stay_valid():
    """Property: from random valid values, every applicable knob step gives a harness.yaml the validator accepts."""
    rng = random.Random(0)
    files = seed_files()
    for _ in range(30):
        text = files["harness.yaml"]
        for key, value in {"learning_rate": f"{10 ** rng.uniform(-6, -2):.3g}",
                           "temperature": f"{rng.uniform(0.1, 3):.2f}",
                           "max_grad_norm": f"{10 ** rng.uniform(-2, 1):.3g}", "group_size": str(rng.randint(2, 64)),
                           "max_completion_length": str(rng.randint(1, 8192))}.items():
            text = set_yaml_scalar(text, key, value)
        here = {**files, "harness.yaml": text}
        knobs = parse_knobs(text)
        for move in MOVES:
            if move.variable.startswith("harness.yaml:") and move.expand is None:
                edits = move.edit(here, knobs, {"diagnosis": diagnosis((move.answers or (None,))[0], False)})
                if edits:
                    parse_knobs(edits["harness.yaml"])


def test_the_engineer_takes_turns_over_diagnoses_in_urgency_order(tmp_path):
    """Round robin: the most urgent diagnosis's first move, the next diagnosis's first, then each one's second; a
    move two diagnoses share is entered once."""
    from agents.engineer import HeuristicEngineer
    from agents.roles import EngineerContext

    repo = HarnessRepo.create(tmp_path / "harness", "math")
    collapse = diagnosis("entropy_collapse", False).model_copy(update={"id": "d1-2", "severity": 0.1})
    dead = diagnosis("dead_groups", False).model_copy(update={"id": "d1-1"})
    ctx = EngineerContext(phase=1, round=1, repo=repo, base_sha=repo.sha("main"), knobs=repo.knobs("main"),
                          domain="math", pilot=True, level_stats=level_stats())
    cands = HeuristicEngineer(max_candidates=5).propose([dead, collapse], ctx, {})
    assert [(c.diagnosis_id, c.intervention) for c in cands] == [
        ("d1-2", "jump_learning_rate_down"), ("d1-1", "drop_zero_variance_groups"),
        ("d1-2", "lower_learning_rate"), ("d1-1", "dynamic_sampling"), ("d1-2", "raise_temperature")]
    every = [c.intervention for c in HeuristicEngineer(max_candidates=40).propose([dead, collapse], ctx, {})]
    assert len(every) == len(set(every)) and "raise_temperature" in every  # answers both: entered once


def test_oversampling_rises_only_where_a_filter_drops_groups():
    """Without a keep_group that drops groups, a larger refill budget generates more and trains the same."""
    seed, busy = seed_files(), busy_files()
    move = find("math", "raise_oversample")
    assert move.edit(seed, parse_knobs(seed["harness.yaml"]), {}) is None
    edits = move.edit(busy, parse_knobs(busy["harness.yaml"]), {})
    assert parse_knobs(edits["harness.yaml"]).oversample == 4


def test_removing_a_component_without_a_listed_weight_leaves_harness_yaml_alone():
    files = busy_files()
    files["harness.yaml"] = files["harness.yaml"].replace("  well_formed: 0.2\n", "")
    knobs = parse_knobs(files["harness.yaml"])
    (move,) = concrete(find("math", "remove_reward"), files, knobs, {})
    assert set(move.edit(files, knobs, {})) == {"rewards.py"}
