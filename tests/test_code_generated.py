"""The code domain's generated defect families (``evotrainer.harness.generated``, ``domain="code"``), checked from
outside the harness on real executions of the policy-code executor (``evotrainer.domains.execute``).

    draw          ``gen-code-S-k`` draws only code families, spans every layer, lists from the module, and a fault
                  bench (``--domain code --faults generated:N@S``) and ``init`` take the names
    forms         every form of each code reward (and selftest) family passes its harness's self-tests
    mechanism     each family does what its card says: a budget the longest body does not fit, a reward that pays a
                  body the hidden tests reject (a bonus outweighing a pass), filters that drop signal, a prompt that
                  is not the evaluator's, a curriculum that starves levels
    neutral       the code domain's neutral prompts are the evaluator's, the seed is neutral, and the move back to
                  neutral undoes every prompt and filter draw without letting a grader error train

Materialization over the code seed, validation and the self-tests of two draws of every family, and that no harness
file names its family or a defect: the generated tests of tests/test_faults.py (every domain's families). Run alone:
``python -m pytest -q tests/test_code_generated.py`` (seconds: one executor batch; nothing is trained).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from evotrainer import config as C
from evotrainer.bench import faults as fb
from evotrainer.domains.code import CodeDomain
from evotrainer.domains.execute import ExecLimits
from evotrainer.harness import faults, generated
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import seed_dir
from evotrainer.judge.scoring import batch_advantages
from sandbox import run_selftest

CODE = sorted(f.name for f in generated.families("code"))


def _build(name: str, family: str, dest: Path) -> tuple[generated.Defect, Path]:
    """The code seed with a draw of ``family`` over it (its card removed)."""
    return generated.build(name, dest, family)


def _module(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(f"_code_gen_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wrong(view: dict) -> list[str]:
    """Bodies of every execution class but a pass: a wrong body, an example's value, one that raises, never
    returns, does not compile, and none."""
    return [" x + 1000", f" {view['tests'][0]['expected']}", " 1 // 0", " 9**9**9", " x +", " "]


@pytest.fixture(scope="module")
def samples() -> dict:
    """Real executions (one executor batch for the visible tests, one for the hidden): per task, its reference body's
    sample and each wrong body's, with the verifier's verdict."""
    domain = CodeDomain(limits=ExecLimits(time_s=0.5))  # a short limit keeps the timeout cheap
    dev = domain.splits(5, {"dev": 40})["dev"]
    tasks = [next(t for t in dev if t["difficulty"] == lv) for lv in ("1", "3", "4")]
    views = [domain.harness_task(t) for t in tasks]
    pairs = [(t, v, c) for t, v in zip(tasks, views) for c in [domain.reference_completion(t), *_wrong(v)]]
    runs = domain.reward_executions([v for _, v, _ in pairs], [c for _, _, c in pairs])
    verdicts = domain.verify_batch([t for t, _, _ in pairs], [c for _, _, c in pairs])
    rows = [({"prompt": domain.canonical_prompt(v), "completion": c, "task": v, "truncated": False,
              "completion_tokens": len(c), "execution": e}, bool(ok))
            for (_, v, c), e, ok in zip(pairs, runs, verdicts)]
    assert {r["execution"]["status"] for r, _ in rows} >= {"ok", "fail", "timeout", "syntax_error", "no_code"}
    return {"right": [r for r, ok in rows if ok], "wrong": [r for r, ok in rows if not ok], "tasks": tasks}


def test_a_code_draw_takes_only_code_families_spans_every_layer_and_lists(capsys):
    names = generated.parse_spec("generated:6@3", "code")
    assert names == [f"gen-code-3-{k}" for k in range(6)]
    drawn = [generated.draw(n) for n in names]
    assert all(d.domain == "code" and d.family in CODE for d in drawn)
    assert {d.layer for d in drawn} == {generated.FAMILIES[f].layer for f in CODE} == set(generated.LAYERS)
    assert faults.domain_of(names[0]) == "code" and "Overlay of the code seed" in drawn[0].card()
    generated.main(["6", "3", "code"])
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == names and all(d.family in line for d, line in zip(drawn, out))
    assert generated.LEVELS == tuple(CodeDomain.levels)  # the curriculum families' levels are the domain's


def test_a_code_fault_bench_and_init_take_generated_code_defects_and_refuse_math_s(tmp_path: Path):
    from evotrainer.rundir import _check_fault

    assert fb.parse_faults("generated:3@2", "code") == ["gen-code-2-0", "gen-code-2-1", "gen-code-2-2"]
    assert fb.parse_faults("exit_status,generated:1@2", "code") == ["exit_status", "gen-code-2-0"]
    with pytest.raises(C.ConfigError, match="math"):
        fb.parse_faults("gen-2-0", "code")
    name = "gen-code-2-1"
    assert set(fb.planted(name, "code")) <= set(generated.draw(name).files) and any(fb.planted(name, "code").values())
    _check_fault(C.apply_overrides(C.parse({}), ["domain=code", f"fault={name}"]))
    built = faults.materialize("code", name, tmp_path / "h")
    assert not (built / faults.CARD).exists() and run_selftest(built)["failed"] == []


@pytest.mark.parametrize("family", [f for f in CODE if generated.FAMILIES[f].layer in ("rewards", "selftest")])
def test_every_form_of_a_code_reward_family_passes_its_self_tests(family: str, tmp_path: Path):
    forms: dict[str, str] = {}
    for k in range(60):
        d = generated.draw(f"gen-code-11-{k}", family=family)
        forms.setdefault(str(d.constants.get("form", d.constants.get("component"))), d.name)
    assert len(forms) >= 2, forms
    for form, name in forms.items():
        _, dest = _build(name, family, tmp_path / form)
        assert run_selftest(dest)["failed"] == [], (family, form)


@pytest.mark.parametrize("family", CODE)
def test_every_code_family_does_what_its_card_says(family: str, samples: dict, tmp_path: Path):
    fam, domain, seed = generated.FAMILIES[family], CodeDomain(), read_knobs(seed_dir("code"))
    longest = max(len(domain.reference_completion(t)) for t in samples["tasks"])
    for k in range(3):
        d, dest = _build(f"gen-code-12-{k}", family, tmp_path / f"h{k}")
        knobs = read_knobs(dest)
        if family == "code_budget_short":  # the longest body and its end token do not fit
            assert knobs.max_completion_length < longest + 1 <= seed.max_completion_length, d.constants
        elif fam.layer == "knobs":  # code_lr_high, code_temperature_low, ...: that knob, that way
            key = "learning_rate" if "_lr_" in family else "temperature"
            way = 1 if family.endswith("_high") else -1
            assert (getattr(knobs, key) - getattr(seed, key)) * way > 0, d.constants
        elif fam.layer in ("rewards", "selftest"):
            comps, weights = _module(dest / "rewards.py", f"{family}{k}").COMPONENTS, knobs.reward_weights

            def total(sample: dict) -> float:
                return sum(weights.get(name, 0.0) * fn(sample) for name, fn in comps.items())

            assert min(map(total, samples["right"])) >= 1.0, d.constants  # a right body still earns a pass
            paid = [s["completion"] for s in samples["wrong"] if total(s) > 0]
            assert paid, (family, d.constants)
            if family == "code_bonus":  # the bonus alone earns more than a pass
                assert weights[d.constants["component"]] > weights["passes_visible"], d.constants
        elif fam.layer == "filters":
            f = _module(dest / "filters.py", f"filters{k}")
            failed = ["fail", "fail", "timeout", "fail", "syntax_error", "fail", "no_code", "fail"]  # mostly wrong
            groups = [[{"group_id": f"phase-1-step-{g}-0", "completion": " x", "reward": float(i < g % 9),
                        "truncated": False, "execution": {"status": "ok" if i < g % 9 else failed[i], "passed": 0,
                                                          "total": 2, "detail": ""}}
                       for i in range(8)] for g in range(40)]
            kept = [[f.keep_group(grp) and f.keep_rollout(r) for r in grp] for grp in groups]
            seed_kept = sum(any(a != 0 for a in batch_advantages([r["reward"] for r in grp], 8, "group", [True] * 8))
                            for grp in groups)
            trained = sum(any(a != 0 for a in batch_advantages([r["reward"] for r in grp], 8, "group", keep))
                          for grp, keep in zip(groups, kept) if any(keep))
            assert sum(map(sum, kept)) < 0.8 * 8 * len(groups) or trained < seed_kept, (family, d.constants)
        elif fam.layer == "prompt":
            make = _module(dest / "prompt.py", f"prompt{k}").make_prompt
            task = samples["tasks"][0]
            assert make(domain.harness_task(task)) != domain.canonical_prompt(task), d.constants
        else:  # curriculum: some level gets at most a tenth of another's weight, whatever the history
            weights = _module(dest / "curriculum.py", f"curriculum{k}").weights
            history = {lv: {"n": 64, "reward_mean": 0.1 * i, "dead_group_ratio": 0.5}
                       for i, lv in enumerate(CodeDomain.levels)}
            for h in ({}, history):
                w = weights(list(CodeDomain.levels), knobs.curriculum_weights, h)
                assert min(w.values()) <= 0.1 * max(w.values()), (family, d.constants, w)


def test_the_pinned_self_test_fails_the_seed_s_reward(tmp_path: Path):
    """A code_selftest_pinned draw's test pins its reward's payment: the seed's exact reward under it fails."""
    d, dest = _build("gen-code-12-0", "code_selftest_pinned", tmp_path / "h")
    shutil.copy(seed_dir("code") / "rewards.py", dest / "rewards.py")
    failed = run_selftest(dest)["failed"]
    assert [f["name"].rsplit("::", 1)[-1] for f in failed] == ["test_a_body_short_of_every_test_earns_a_share"], (
        d.constants, failed)


# --- the neutral moves that undo the prompt and filter families (evotrainer/domains/code/neutral.py) -----------------
def test_the_code_seed_is_neutral():
    """No neutral move applies to the clean code seed (its prompts being the evaluator's: tests/test_moves.py)."""
    from agents.playbook import neutral_moves
    from evotrainer.harness.repo import HARNESS_FILES

    seed = {f: (seed_dir("code") / f).read_text() for f in HARNESS_FILES}
    knobs = read_knobs(seed_dir("code"))
    assert [m.name for m in neutral_moves("code") if m.edit(seed, knobs, {}) is not None] == []


@pytest.mark.parametrize("family", ["code_prompt", "code_filter_class", "code_filter_share"])
def test_a_neutral_move_undoes_every_draw_of_the_prompt_and_filter_families(family: str, tmp_path: Path):
    """The move back to neutral gives the evaluator's prompt, or filters that drop nothing but a grader error."""
    from agents.playbook import neutral_moves
    from evotrainer.harness.repo import HARNESS_FILES

    rows = [{"completion": " x", "reward": 0.0, "truncated": False, "group_id": f"phase-1-step-{g}-0",
             "execution": {"status": s, "passed": 0, "total": 2, "detail": ""}}
            for g in range(20) for s in ("ok", "fail", "timeout", "syntax_error", "no_code", "grader_error")]
    for k in range(8):
        d, dest = _build(f"gen-code-13-{k}", family, tmp_path / f"h{k}")
        files = {f: (dest / f).read_text() for f in HARNESS_FILES}
        knobs = read_knobs(dest)
        edits = [m.edit(files, knobs, {}) for m in neutral_moves("code")]
        repaired = {**files, **next(e for e in edits if e)}
        (dest / "prompt.py").write_text(repaired["prompt.py"])
        (dest / "filters.py").write_text(repaired["filters.py"])
        task = CodeDomain().splits(0, {"dev": 4})["dev"][0]
        make = _module(dest / "prompt.py", f"neutral_prompt_{family}{k}").make_prompt
        assert make(CodeDomain().harness_task(task)) == CodeDomain().canonical_prompt(task), d.constants
        f = _module(dest / "filters.py", f"neutral_filters_{family}{k}")
        if family != "code_filter_share":  # one move: keep_rollout, or both functions
            kept = [r["execution"]["status"] for r in rows if f.keep_rollout(r) and f.keep_group([r])]
            assert sorted(set(kept)) == ["fail", "no_code", "ok", "syntax_error", "timeout"], d.constants
        else:
            assert all(f.keep_group([r]) for r in rows), d.constants
