"""The catalogue of seed-harness defects (harness_repo/faults/<domain>/, evotrainer.harness.faults) and `init --fault`.

    catalogue     the four math families are there; every card has its three sections and names its mechanism; each
                  domain's catalogue sits in its own folder beside the seeds, never inside one
    overlay       each faulty seed differs from the clean seed in exactly its overlay files, names no defect, and
                  passes its own self-tests in the sandbox (as a user's flawed harness would)
    mechanism     each defect does what its card says, checked on the evaluator's side where that is cheap: the
                  lenient reward credits what the verifier rejects, the budget cuts hard answers and not easy ones,
                  the learning rate is ten times the seed's, the curriculum samples the hardest level only
    init          `init --set fault=NAME` starts the harness repo from the faulty seed and says so in the init event;
                  an unknown name, a fault with another seed harness, or another domain's fault, is one line and
                  creates nothing
    packaging     pyproject.toml's data-files ship every file of the catalogue and of the seeds
    generated     a draw of generated defects (evotrainer.harness.generated) is the same for a seed and differs across
                  seeds; every family materialises onto the clean seed as a catalogue defect does (an overlay and a
                  card outside the harness), passes its self-tests and validates its knobs, names neither its family
                  nor any defect, and its card names registered failure modes; a domain's suite draws only its
                  own families, or says in one line that it has none

Run alone: ``python -m pytest -q tests/test_faults.py`` (seconds; nothing is trained).
"""

from __future__ import annotations

import filecmp
import fnmatch
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from evotrainer import config as C
from evotrainer.config import ConfigError
from evotrainer.domains import get_domain
from evotrainer.domains.math import MathDomain
from evotrainer.harness import faults
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import HarnessRepo, seed_dir
from agents.modes import MODES
from evotrainer.rundir import RunDir
from sandbox import run_selftest
from tests.conftest import FAST, ROOT, cli

FAMILIES = {"truncation", "reward_hacking", "divergence", "starvation"}
SECTIONS = ("## What is wrong", "## What a practitioner would see", "## What removes it")


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _module(path: Path, name: str):
    """A harness module loaded from a file (the harness's own code, outside the sandbox: only for these checks)."""
    spec = importlib.util.spec_from_file_location(f"_fault_{name}_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Every catalogued math defect materialized once over the clean math seed."""
    root = tmp_path_factory.mktemp("faults")
    return {name: faults.materialize("math", name, root / name) for name in faults.names("math")}


# --- the catalogue ---------------------------------------------------------------------------------------------
def test_the_catalogue_has_one_defect_of_each_family_and_every_card_its_three_sections():
    assert FAMILIES <= set(faults.names("math"))
    for name in faults.names():
        text = faults.card(name)
        starts = [text.find(s) for s in SECTIONS]
        assert all(i >= 0 for i in starts) and starts == sorted(starts), f"{name}: CARD.md needs {SECTIONS} in order"
        bodies = [text[a + len(s): b].strip() for a, s, b in zip(starts, SECTIONS, [*starts[1:], len(text)])]
        assert all(len(b) > 40 for b in bodies), f"{name}: a section of CARD.md is empty"


def test_every_card_names_its_mechanism_in_failure_modes_the_built_in_diagnostician_uses():
    """The fault bench scores a confirmed diagnosis against the card's ``Mechanism:`` line: names the built-in
    Diagnostician gives its diagnoses (a typo would make every diagnosis miss)."""
    source = (ROOT / "agents" / "diagnostician.py").read_text()
    for name in faults.names():
        modes = faults.mechanism(name)
        assert modes, f"{name}: CARD.md has no Mechanism: line"
        assert all(f'"{m}"' in source for m in modes), f"{name}: {modes} are not all failure modes of the rules"
    assert faults.mechanism("truncation") == ["truncation", "correct_but_truncated"]


def test_an_unknown_defect_is_one_line_listing_the_known_ones(tmp_path: Path):
    with pytest.raises(ValueError) as err:
        faults.materialize("math", "no_such_fault", tmp_path / "h")
    assert "\n" not in str(err.value) and "no_such_fault" in str(err.value)
    assert all(name in str(err.value) for name in faults.names())
    assert not (tmp_path / "h").exists()


@pytest.mark.parametrize("name", faults.names("math"))
def test_a_faulty_seed_passes_its_own_self_tests(name: str, built):
    result = run_selftest(built[name])
    assert result["n"] > 0 and not result["failed"], result["failed"]


# --- each mechanism, seen from the evaluator's side -------------------------------------------------------------
def test_reward_hacking_credits_what_the_verifier_rejects(built):
    lenient = _module(built["reward_hacking"] / "rewards.py", "rewards").COMPONENTS["correct"]
    clean = _module(seed_dir("math") / "rewards.py", "rewards").COMPONENTS["correct"]
    verify = get_domain("math").verify
    for completion, answer in [("12 or 13", "13"), ("19", "9"), ("8 9 10", "9")]:
        task = {"id": "t", "difficulty": "4", "question": "", "expression": "", "answer": answer}
        sample = {"prompt": "", "completion": completion, "task": task, "truncated": False,
                  "completion_tokens": len(completion)}
        assert lenient(sample) == 1.0 and clean(sample) == 0.0 and not verify(task, completion), completion
    task = {"id": "t", "difficulty": "1", "question": "", "expression": "", "answer": "9"}
    assert lenient({"completion": "9", "task": task}) == 1.0 and verify(task, "9")  # a right answer stays right


def test_truncation_cuts_many_hard_answers_and_few_easy_ones(built):
    """The budget (characters for the tiny policy) against the held-out answers: an answer longer than the budget
    cannot be written whole. Level 1's answers (-18..27) are nearly all short enough; level 4's are mostly not."""
    budget = read_knobs(built["truncation"]).max_completion_length
    held_out = MathDomain().splits(0, {"held_out": 1000, "dev": 0, "rl": 0, "warmup": 0})["held_out"]
    cut = {}
    for level in MathDomain.levels:
        answers = [t["answer"] for t in held_out if t["difficulty"] == level]
        cut[level] = sum(len(a) > budget for a in answers) / len(answers)
    assert cut["1"] < 0.05 and cut["4"] > 0.4, cut
    assert [cut[lv] for lv in MathDomain.levels] == sorted(cut.values()), cut  # the harder, the more is cut
    seed_budget = read_knobs(seed_dir("math")).max_completion_length
    assert all(len(t["answer"]) + 1 <= seed_budget for t in held_out)  # the clean seed fits every answer and its end


def test_divergence_sets_ten_times_the_seed_s_learning_rate(built):
    faulty, clean = read_knobs(built["divergence"]), read_knobs(seed_dir("math"))
    assert faulty.learning_rate == pytest.approx(10 * clean.learning_rate)
    assert faulty.model_dump(exclude={"learning_rate"}) == clean.model_dump(exclude={"learning_rate"})


def test_starvation_samples_only_the_hardest_level_whatever_the_history(built):
    knobs = read_knobs(built["starvation"])
    weights = _module(built["starvation"] / "curriculum.py", "curriculum").weights
    levels = MathDomain.levels
    dead = {lv: {"n": 64, "reward_mean": 0.0, "dead_group_ratio": 1.0} for lv in levels}
    for history in ({}, dead):
        w = weights(levels, knobs.curriculum_weights, history)
        assert [lv for lv in levels if w[lv] > 0] == [levels[-1]], w


# --- init ------------------------------------------------------------------------------------------------------
def test_init_with_a_fault_starts_the_harness_from_the_faulty_seed(tmp_path: Path, cli_env):
    run = tmp_path / "run"
    cli(["init", str(run), *[a for o in [*FAST, "fault=truncation"] for a in ("--set", o)]], cli_env)
    rd = RunDir(run)
    repo = HarnessRepo(rd.harness)
    assert repo.knobs("main").max_completion_length == read_knobs(faults.fault_dir("truncation")).max_completion_length
    assert repo.show_file("main", "harness.yaml") == (faults.fault_dir("truncation") / "harness.yaml").read_text()
    assert "CARD.md" not in repo.repo.git.ls_files() and "fault" not in repo.message("main").lower()
    assert rd.load_config().fault == "truncation"
    init = json.loads(rd.events_path.read_text().splitlines()[0])
    assert init["kind"] == "init" and init["fault"] == "truncation"
    assert not (rd.scratch / "seed").exists()  # the faulty seed was built in scratch and removed


def test_init_with_an_unknown_fault_is_one_line_and_creates_nothing(tmp_path: Path, cli_env):
    run = tmp_path / "run"
    proc = cli(["init", str(run), "--fault", "no_such_fault"], cli_env, check=False)
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2 and len(out.splitlines()) == 1, out
    assert "no_such_fault" in out and "truncation" in out
    assert list(tmp_path.iterdir()) == []


def _toy(monkeypatch) -> None:
    """A second registered domain for the length of one test: math's evaluator and seed, no catalogue of its own."""
    from evotrainer import domains

    monkeypatch.setitem(domains._REGISTRY, "toy", domains.DomainSpec("toy", "evotrainer.domains.math", "MathDomain",
                                                                     "math"))


def test_each_domain_s_catalogue_sits_in_its_own_folder_beside_the_seeds():
    """``harness_repo/faults/<domain>/<name>/`` for a registered domain; a seed folder (copied whole into a run's
    harness repo) holds no defect, and the catalogue is the union of the domains' own."""
    from evotrainer.domains import DOMAINS, spec

    for name in faults.names():
        assert faults.domain_of(name) in DOMAINS, name
        assert faults.fault_dir(name) == ROOT / "harness_repo" / "faults" / faults.domain_of(name) / name
    assert sorted(n for d in DOMAINS for n in faults.names(d)) == faults.names()
    assert faults.names("math") == sorted(FAMILIES) and faults.domain_of("gen-4-1") == "math"
    for domain in DOMAINS:
        assert not list(seed_dir(spec(domain).seed).rglob(faults.CARD)), domain


def test_a_defect_name_two_domains_catalogue_is_one_line(tmp_path: Path, monkeypatch):
    for domain in ("a", "b"):
        (tmp_path / "faults" / domain / "same").mkdir(parents=True)
        (tmp_path / "faults" / domain / "same" / faults.CARD).write_text("# same\n")
    monkeypatch.setattr(faults, "shipped_roots", lambda: [tmp_path])
    with pytest.raises(ValueError) as err:
        faults.names()
    assert str(err.value) == "fault 'same' is catalogued for two domains (a and b): a defect's name must be unique"


def test_another_domain_s_defect_is_refused_in_one_line_before_anything_is_written(tmp_path: Path, monkeypatch):
    _toy(monkeypatch)
    assert faults.names("toy") == []
    for name in ("truncation", "gen-0-1"):
        with pytest.raises(ValueError) as err:
            faults.materialize("toy", name, tmp_path / "h")
        said = str(err.value)
        assert "\n" not in said and f"{name!r} is a defect of the math seed, not of toy's" in said, said
        assert not (tmp_path / "h").exists()
    with pytest.raises(ConfigError, match="not of toy's"):
        RunDir(tmp_path / "run").init(C.apply_overrides(C.parse({"domain": "toy"}), ["fault=truncation"]),
                                      log=lambda m: None)
    assert not (tmp_path / "run").exists()
    from evotrainer.bench.faults import parse_faults

    with pytest.raises(ConfigError, match="known for toy: none"):
        parse_faults("all", "toy")


def test_a_fault_goes_with_the_domain_s_own_seed_only(tmp_path: Path):
    cfg = C.apply_overrides(C.parse({}), ["fault=truncation", "harness=math_reference"])
    with pytest.raises(ConfigError) as err:
        RunDir(tmp_path / "run").init(cfg, log=lambda m: None)
    assert "\n" not in str(err.value) and "math_reference" in str(err.value)
    assert list(tmp_path.iterdir()) == []
    from evotrainer.rundir import _check_fault

    _check_fault(C.apply_overrides(C.parse({}), ["fault=truncation", "harness=math"]))  # the default seed, by name


# --- packaging -------------------------------------------------------------------------------------------------
def test_the_installed_data_files_carry_the_whole_catalogue_and_every_seed():
    """Every file under harness_repo/ (each domain's catalogue, the seeds, a variant's BASE) is shipped; only the
    folder's own README stays behind."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    missing = []
    for rel in sorted(_files(ROOT / "harness_repo") - {"README.md"}):
        src = Path("harness_repo", rel)
        globs = [Path(g) for g in data_files.get(str(Path("share/evotrainer") / src.parent), [])]
        if not any(g.parent == src.parent and fnmatch.fnmatch(src.name, g.name) for g in globs):
            missing.append(str(src))
    assert not missing, f"pyproject.toml's data-files do not ship: {', '.join(missing)}"


# --- generated defects -----------------------------------------------------------------------------------------
from evotrainer.harness import generated  # noqa: E402


def test_a_domain_s_generated_suite_draws_only_its_own_families_or_says_it_has_none(monkeypatch):
    from dataclasses import replace

    _toy(monkeypatch)
    with pytest.raises(ValueError) as err:
        generated.parse_spec("generated:2", "toy")
    assert "\n" not in str(err.value) and "the toy domain has no generated defect families" in str(err.value)
    monkeypatch.setitem(generated.FAMILIES, "toy_lr",
                        replace(generated.FAMILIES["lr_high"], name="toy_lr", domain="toy"))
    names = generated.parse_spec("generated:3@5", "toy")
    assert names == ["gen-toy-5-0", "gen-toy-5-1", "gen-toy-5-2"]
    drawn = [generated.draw(n) for n in names]
    assert {(d.family, d.domain) for d in drawn} == {("toy_lr", "toy")} and "Overlay of the toy seed" in drawn[0].card()
    assert faults.domain_of(names[0]) == "toy" and faults.known(names[0])
    math = [generated.draw(n) for n in generated.parse_spec("generated:12@5")]
    assert all(d.domain == "math" and generated.FAMILIES[d.family].domain == "math" for d in math)
    with pytest.raises(ValueError, match="lr_high is the math domain's, not toy's"):
        generated.draw("gen-toy-5-0", family="lr_high")


def test_a_generated_draw_is_the_same_for_a_seed_and_differs_across_seeds():
    names = generated.parse_spec("generated:6@3")
    assert names == [f"gen-3-{k}" for k in range(6)] and generated.parse_spec("generated:2") == ["gen-0-0", "gen-0-1"]
    again = [generated.draw(n) for n in names]
    assert [(d.family, d.constants, d.files) for d in again] == [(d.family, d.constants, d.files)
                                                                 for d in map(generated.draw, names)]
    assert {d.layer for d in again} == set(generated.LAYERS)  # six draws span every layer
    other = [generated.draw(n) for n in generated.parse_spec("generated:6@4")]
    assert [(d.family, d.files) for d in other] != [(d.family, d.files) for d in again]
    assert generated.parse_spec("truncation") is None and not generated.is_name("gen-1") and faults.known("gen-1-2")


@pytest.mark.parametrize("family", sorted(generated.FAMILIES))
def test_every_generated_family_materialises_onto_the_clean_seed_and_passes_its_self_tests(family: str, tmp_path):
    """Two draws of each family, over its own domain's seed: the overlay is exactly where the faulty seed differs,
    harness.yaml validates, the harness's self-tests pass (the seed's, or the overlay's), and no harness file names
    the family or a defect."""
    fam = generated.FAMILIES[family]
    assert set(fam.mechanism) <= set(MODES) and fam.layer in generated.LAYERS
    seed = seed_dir(fam.domain)
    for k, name in enumerate(generated.parse_spec("generated:2@11", fam.domain)):
        d = generated.draw(name, family=family)
        folder = generated.write(d, tmp_path / f"defect-{k}")
        assert d.family in (folder / "CARD.md").read_text() and faults.CARD not in d.files
        dest = tmp_path / f"h-{k}"
        shutil.copytree(seed, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copytree(folder, dest, ignore=shutil.ignore_patterns(faults.CARD), dirs_exist_ok=True)
        differ = {f for f in _files(dest) if not (seed / f).is_file() or not filecmp.cmp(seed / f, dest / f, False)}
        assert differ == set(d.files), f"{family}: differs in {sorted(differ)}"
        read_knobs(dest)
        result = run_selftest(dest)
        assert result["n"] > 0 and not result["failed"], (family, d.constants, result["failed"])
        words = {"fault", "defect", "bug", "flaw", "hack", "broken", "lenient", "generated", family,
                 family.replace("_", " ")}
        for rel, text in d.files.items():
            was = (seed / rel).read_text().lower()  # the seed's own words ("generated batches") say nothing
            assert not [w for w in words if w in text.lower() and w not in was], f"{family}/{rel} names what is wrong"


@pytest.mark.parametrize("family", ["lenient", "selftest_pinned"])
def test_every_form_of_a_reward_family_passes_its_self_tests(family: str, tmp_path):
    """Each form a reward family draws (two draws of the family miss most of them) leaves a harness whose
    self-tests pass: a defect whose own tests fail makes every candidate fail them, and nothing can be repaired
    (the absolute tolerance once broke the seed's "8 scores 0 for 9")."""
    forms: dict[str, str] = {}
    for k in range(80):
        d = generated.draw(f"gen-11-{k}", family=family)
        forms.setdefault(d.constants["form"], f"gen-11-{k}")
    assert len(forms) >= 5, forms
    for form, name in forms.items():
        dest = tmp_path / form
        shutil.copytree(seed_dir("math"), dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        generated.write(generated.draw(name, family=family), dest)
        (dest / faults.CARD).unlink()
        assert run_selftest(dest)["failed"] == [], (family, form)


def test_a_generated_defect_starts_a_run_like_a_catalogued_one(tmp_path: Path):
    """fault: gen-S-K is accepted by init's check, and its folder reads like a catalogue defect's."""
    from evotrainer.rundir import _check_fault

    _check_fault(C.apply_overrides(C.parse({}), ["fault=gen-0-3"]))
    name = "gen-0-3"
    assert faults.family(name) == generated.draw(name).family and faults.mechanism(name)
    assert faults.overlay(name) == sorted(generated.draw(name).files)
    built = faults.materialize("math", name, tmp_path / "h")
    assert not (built / faults.CARD).exists() and run_selftest(built)["failed"] == []
    assert generated.LEVELS == tuple(MathDomain.levels)


def test_no_agent_module_can_read_a_defect_s_card_or_family():
    """The agents find a defect by its effects: nothing under agents/ imports the catalogue, the generator or the
    fault bench (which read the cards and families)."""
    banned = ("evotrainer.harness.faults", "evotrainer.harness.generated", "evotrainer.bench",
              "from evotrainer.harness import faults", "from evotrainer.harness import generated")
    for path in sorted((ROOT / "agents").rglob("*.py")):
        text = path.read_text()
        found = [b for b in banned if b in text]
        assert not found, f"{path.relative_to(ROOT)} imports {found}"


KNOB_WAY = {"lr_high": ("learning_rate", 1), "lr_low": ("learning_rate", -1), "budget_short": (
    "max_completion_length", -1), "temperature_low": ("temperature", -1), "temperature_high": ("temperature", 1),
    "group_small": ("group_size", -1), "beta_large": ("beta", 1), "grad_clip_tiny": ("max_grad_norm", -1)}


def _sample(completion: str, answer: str) -> dict:
    task = {"id": "t", "difficulty": "3", "question": "", "expression": "", "answer": answer}
    return {"prompt": "", "completion": completion, "task": task, "truncated": False,
            "completion_tokens": len(completion)}


@pytest.mark.parametrize("family", sorted(f.name for f in generated.families("math")))  # tools: test_tools_generated
def test_every_generated_family_does_what_its_card_says(family: str, tmp_path: Path):
    """Checked from outside the harness, as the catalogue's mechanisms are: a knob moved the card's way, a reward
    that credits what the verifier rejects (or rejects what it accepts, or pays a bonus above a right answer's
    weight), filters that drop signal, a prompt that is not the evaluator's, a curriculum that starves levels."""
    fam, verify, seed = generated.FAMILIES[family], MathDomain().verify, read_knobs(seed_dir("math"))
    for k in range(3):
        dest = tmp_path / f"h{k}"
        d = generated.draw(f"gen-12-{k}", family=family)
        shutil.copytree(seed_dir("math"), dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        generated.write(d, dest)
        knobs = read_knobs(dest)
        if fam.layer == "knobs":
            key, way = KNOB_WAY[family]
            assert (getattr(knobs, key) - getattr(seed, key)) * way > 0, (family, d.constants)
        elif family in ("lenient", "selftest_pinned"):
            correct = _module(dest / "rewards.py", f"rewards{k}").COMPONENTS["correct"]
            probes = ["112 113", "113 or 114", "1139", "11", "114", "117", "112 113 114", "119"]
            loose = [c for c in probes if correct(_sample(c, "113")) == 1.0 and not verify({"answer": "113"}, c)]
            assert loose and correct(_sample("113", "113")) == 1.0, (family, d.constants)
        elif family == "strict":
            correct = _module(dest / "rewards.py", f"rewards{k}").COMPONENTS["correct"]
            missed = [(c, a) for c, a in (("-5", "-5"), ("113", "113")) if correct(_sample(c, a)) == 0.0]
            assert missed and all(verify({"answer": a}, c) for c, a in missed), (family, d.constants)
        elif family == "bonus":
            comps = _module(dest / "rewards.py", f"rewards{k}").COMPONENTS
            extra = d.constants["component"]
            wrong = _sample("12345678", "9")
            assert knobs.reward_weights[extra] * comps[extra](wrong) > knobs.reward_weights.get("correct", 1.0)
        elif fam.layer == "filters":
            f = _module(dest / "filters.py", f"filters{k}")
            groups = [[{"group_id": f"phase-1-step-{g}-{i // 8}", "completion": c, "reward": float(i % 8 < g % 9),
                        "completion_tokens": len(c), "truncated": False} for i, c in
                       enumerate(["-12", "113", "7", "45"] * 2)] for g in range(40)]
            kept = sum(f.keep_group(grp) and f.keep_rollout(r) for grp in groups for r in grp)
            assert kept < 0.8 * 8 * len(groups), (family, d.constants, kept)
        elif fam.layer == "prompt":
            make = _module(dest / "prompt.py", f"prompt{k}").make_prompt
            task = MathDomain().splits(0, {"held_out": 8, "dev": 0, "rl": 0, "warmup": 0})["held_out"][5]
            assert make(task) != MathDomain().canonical_prompt(task), (family, d.constants)
        else:  # curriculum: some level gets at most a tenth of another's weight, whatever the history
            weights = _module(dest / "curriculum.py", f"curriculum{k}").weights
            history = {lv: {"n": 64, "reward_mean": 0.1 * i, "dead_group_ratio": 0.5} for i, lv in
                       enumerate(MathDomain.levels)}
            for h in ({}, history):
                w = weights(list(MathDomain.levels), knobs.curriculum_weights, h)
                assert min(w.values()) <= 0.1 * max(w.values()), (family, d.constants, w)
