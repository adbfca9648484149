"""The tools domain's generated defect families (``evotrainer.harness.generated``, ``domain="tools"``), checked from
outside the harness on transcripts replayed against the task's real environment.

    draw          ``gen-tools-S-k`` draws only tools families, spans every layer they have, and lists from the module
    forms         every form of each tools reward (and selftest) family passes its harness's self-tests
    mechanism     each family does what its card says: a turn cap or budget a two-key transcript does not fit, a
                  reward that pays a transcript the verifier rejects (or rejects one it accepts), filters that drop
                  signal, a prompt that is not the evaluator's, a curriculum that starves levels
    neutral       the seed is neutral, and the move back to neutral undoes every prompt and filter draw

Materialization over the tools seed, validation and the self-tests of two draws of every family: the generated tests
of tests/test_faults.py (every domain's families). Run alone: ``python -m pytest -q tests/test_tools_generated.py``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evotrainer.domains.tools import ToolsDomain
from evotrainer.harness import faults, generated
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import seed_dir
from evotrainer.judge.scoring import batch_advantages
from sandbox import run_selftest

TOOLS = sorted(f.name for f in generated.families("tools"))


def _build(name: str, family: str, dest: Path) -> tuple[generated.Defect, Path]:
    """The tools seed with a draw of ``family`` over it (its card removed)."""
    return generated.build(name, dest, family)


def _module(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(f"_tools_gen_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tasks() -> list[dict]:
    """Two-key tasks (levels 3 and 4, level 4's answers 10 or more) and one-key ones, of the dev split."""
    tasks = ToolsDomain().splits(5, {"dev": 40})["dev"]
    return [t for t in tasks if t["difficulty"] == "4" and int(t["answer"]) >= 30][:2] + \
        [t for t in tasks if t["difficulty"] == "3"][:2] + [t for t in tasks if len(t["keys"]) == 1][:2]


def _wrong_transcripts(task: dict) -> list[tuple[str, bool]]:
    """Transcripts the verifier rejects, each with whether the turn cap stopped it: a wrong answer after the right
    calls, one value of a sum echoed, the answer followed by more digits, a failed call, calls repeated to the cap,
    the answer inside a forged result."""
    calls = "".join(f"get({k})={task['table'][k]};" for k in task["keys"])
    first = f"get({task['keys'][0]})={task['table'][task['keys'][0]]};"
    answer = int(task["answer"])
    return [(calls + str(answer + 1), False), (first + str(task["table"][task["keys"][0]]), False),
            (calls + f"{answer}{answer % 10}", False), (f"get(zzz)=error;{answer + 1}", False),
            (first * 4, True), (f"{first}get({task['keys'][0]})={answer};", False)]


def _sample(task: dict, completion: str, capped: bool = False) -> dict:
    domain = ToolsDomain()
    view = domain.harness_task(task)
    return {"prompt": domain.canonical_prompt(view), "completion": completion, "task": view, "truncated": False,
            "completion_tokens": len(completion), **domain.transcript_fields(task, completion), "hit_turn_cap": capped}


def test_a_tools_draw_takes_only_tools_families_spans_their_layers_and_lists(capsys):
    names = generated.parse_spec("generated:6@3", "tools")
    assert names == [f"gen-tools-3-{k}" for k in range(6)]
    drawn = [generated.draw(n) for n in names]
    assert all(d.domain == "tools" and d.family in TOOLS for d in drawn)
    assert {d.layer for d in drawn} == {generated.FAMILIES[f].layer for f in TOOLS} == set(generated.LAYERS)
    assert faults.domain_of(names[0]) == "tools" and "Overlay of the tools seed" in drawn[0].card()
    generated.main(["6", "3", "tools"])
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == names and all(d.family in line for d, line in zip(drawn, out))
    assert generated.LEVELS == tuple(ToolsDomain.levels)  # the curriculum families' levels are the domain's


@pytest.mark.parametrize("family", [f for f in TOOLS if generated.FAMILIES[f].layer in ("rewards", "selftest")])
def test_every_form_of_a_tools_reward_family_passes_its_self_tests(family: str, tmp_path: Path):
    forms: dict[str, str] = {}
    for k in range(40):
        d = generated.draw(f"gen-tools-11-{k}", family=family)
        forms.setdefault(str(d.constants.get("form", d.constants.get("component"))), d.name)
    for form, name in forms.items():
        _, dest = _build(name, family, tmp_path / form)
        assert run_selftest(dest)["failed"] == [], (family, form)


@pytest.mark.parametrize("family", TOOLS)
def test_every_tools_family_does_what_its_card_says(family: str, tmp_path: Path):
    fam, domain, seed = generated.FAMILIES[family], ToolsDomain(), read_knobs(seed_dir("tools"))
    tasks = _tasks()
    longest = max(len(domain.reference_completion(t)) for t in tasks)  # a two-key transcript's characters
    for k in range(3):
        d, dest = _build(f"gen-tools-12-{k}", family, tmp_path / f"h{k}")
        knobs = read_knobs(dest)
        if family == "tools_turns_low":  # one turn per key and one for the answer do not fit
            assert knobs.max_turns < max(len(t["keys"]) + 1 for t in tasks) <= seed.max_turns, d.constants
        elif family == "tools_budget_short":
            assert knobs.max_completion_length < longest <= seed.max_completion_length, d.constants
        elif family == "tools_lr_high":
            assert knobs.learning_rate > seed.learning_rate
        elif family == "tools_temperature_low":
            assert knobs.temperature < seed.temperature
        elif fam.layer in ("rewards", "selftest"):
            comps = _module(dest / "rewards.py", f"{family}{k}").COMPONENTS
            weights = knobs.reward_weights

            def total(sample: dict) -> float:
                return sum(weights.get(name, 0.0) * fn(sample) for name, fn in comps.items())

            rights = [total(_sample(t, domain.reference_completion(t))) for t in tasks]
            if family == "tools_strict":  # a right transcript the verifier accepts earns nothing
                assert min(rights) == 0.0 and max(rights) == 1.0, d.constants
                continue
            paid = [(text, total(_sample(t, text, capped))) for t in tasks for text, capped in _wrong_transcripts(t)
                    if not domain.verify(t, text) and total(_sample(t, text, capped)) > 0]
            assert paid and min(rights) >= 1.0, (family, d.constants)
        elif fam.layer == "filters":
            f = _module(dest / "filters.py", f"filters{k}")
            groups = [[{"group_id": f"phase-1-step-{g}-0", "completion": "get(abc)=4;4", "tool_calls": 1 + i % 2,
                        "reward": float(i % 8 < g % 9), "truncated": False} for i in range(8)] for g in range(40)]
            kept = [[f.keep_group(grp) and f.keep_rollout(r) for r in grp] for grp in groups]
            trained = sum(any(a != 0 for a in batch_advantages([r["reward"] for r in grp], 8, "group", keep))
                          for grp, keep in zip(groups, kept) if any(keep))
            assert sum(map(sum, kept)) < 0.8 * 8 * len(groups) or trained == 0, (family, d.constants)
        elif fam.layer == "prompt":
            make = _module(dest / "prompt.py", f"prompt{k}").make_prompt
            task = next(t for t in tasks if len(t["keys"]) == 2)
            assert make(domain.harness_task(task)) != domain.canonical_prompt(task), d.constants
        else:  # curriculum: some level gets at most a tenth of another's weight, whatever the history
            weights = _module(dest / "curriculum.py", f"curriculum{k}").weights
            history = {lv: {"n": 64, "reward_mean": 0.1 * i, "dead_group_ratio": 0.5}
                       for i, lv in enumerate(ToolsDomain.levels)}
            for h in ({}, history):
                w = weights(list(ToolsDomain.levels), knobs.curriculum_weights, h)
                assert min(w.values()) <= 0.1 * max(w.values()), (family, d.constants, w)


def test_the_filter_that_keeps_only_rewarded_rollouts_leaves_no_advantage(tmp_path: Path):
    """Its kept rollouts all earned the same: recomputed among the kept, every advantage is 0."""
    name = next(f"gen-tools-12-{k}" for k in range(40)
                if generated.draw(f"gen-tools-12-{k}", family="tools_filter_class").constants["form"] == "rewarded")
    _, dest = _build(name, "tools_filter_class", tmp_path / "h")
    keep = _module(dest / "filters.py", "rewarded").keep_rollout
    rewards = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    kept = [keep({"completion": "", "reward": r, "tool_calls": 1, "truncated": False}) for r in rewards]
    assert sum(kept) == 2 and all(a == 0 for a in batch_advantages(rewards, 8, "group", kept))


# --- the neutral moves that undo the prompt and filter families (evotrainer/domains/tools/neutral.py) ----------------
def test_the_tools_seed_is_neutral():
    """No neutral move applies to the clean tools seed (its prompts being the evaluator's: tests/test_moves.py)."""
    from agents.playbook import neutral_moves
    from evotrainer.harness.repo import HARNESS_FILES

    seed = {f: (seed_dir("tools") / f).read_text() for f in HARNESS_FILES}
    assert [m.name for m in neutral_moves("tools") if m.edit(seed, read_knobs(seed_dir("tools")), {}) is not None] == []


@pytest.mark.parametrize("family", ["tools_prompt", "tools_filter_class", "tools_filter_share"])
def test_a_neutral_move_undoes_every_draw_of_the_prompt_and_filter_families(family: str, tmp_path: Path):
    """The first neutral move that applies gives the evaluator's prompt, or filters that keep every rollout (tool
    errors and turn-cap stops included: the policy's failures, which the reward scores)."""
    from agents.playbook import neutral_moves
    from evotrainer.harness.repo import HARNESS_FILES

    domain = ToolsDomain()
    task = domain.splits(0, {"dev": 4})["dev"][0]
    rows = [{"completion": text, "reward": reward, "truncated": False, "group_id": f"phase-1-step-{g}-0",
             "turns": 2, "tool_calls": 1, "tool_errors": errors, "hit_turn_cap": cap}
            for g in range(10) for text, reward, errors, cap in
            ((domain.reference_completion(task), 1.0, 0, False), ("get(zz)=error;3", 0.0, 1, False),
             ("get(a)=1;" * 4, 0.0, 0, True), ("7", 0.0, 0, False))]
    for k in range(8):
        d, dest = _build(f"gen-tools-13-{k}", family, tmp_path / f"h{k}")
        files = {f: (dest / f).read_text() for f in HARNESS_FILES}
        edit = next(e for e in (m.edit(files, read_knobs(dest), {}) for m in neutral_moves("tools")) if e)
        for name in ("prompt.py", "filters.py"):
            (dest / name).write_text({**files, **edit}[name])
        make = _module(dest / "prompt.py", f"neutral_prompt_{family}{k}").make_prompt
        assert make(domain.harness_task(task)) == domain.canonical_prompt(task), d.constants
        f = _module(dest / "filters.py", f"neutral_filters_{family}{k}")
        if family != "tools_filter_share":  # one move: keep_rollout, or both functions
            assert all(f.keep_rollout(r) and f.keep_group([r]) for r in rows), d.constants
        else:
            assert all(f.keep_group([r]) for r in rows), d.constants
