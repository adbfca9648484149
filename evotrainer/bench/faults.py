"""``evotrainer bench --faults NAMES|all``: does evolution repair what a static harness keeps?

Each catalogued defect (``harness_repo/faults/``) is planted in the clean math seed, and arms train it on the
ordinary bench's equal steps (``evotrainer/bench/arms.py``, ``FAULT_ARMS``):

    BENCH/<defect>/static-seed<N>         the faulty seed, never edited (evolution.mode: static, fault: <defect>)
    BENCH/<defect>/evotrainer-seed<N>     the full loop from the faulty seed
    BENCH/<defect>/keep_discard-seed<N>   the scalar loop from the faulty seed
    BENCH/clean/oracle-seed<N>            the defect removed: the clean seed, never edited (the ordinary bench's
                                          static); the same for every defect, so one run per seed
    BENCH/clean/clean_evotrainer-seed<N>  the full loop from the clean seed: the no-harm control, one per seed

Runs are trained by the ordinary bench's ``runner.train_runs``: a finished run folder is reused as it is, so the
clean seed's runs train once for every defect and stay cached between benches in the same folder (a run in it must
have this bench's settings). What is measured, per defect:

* every arm minus static, paired per held-out item and per seed (an arm at seed s against static at seed s: the
  same training stream, so an arm identical to static scores exactly 0; ``runner.summarize``);
* **recovery** = (arm - static) / (oracle - static) for evotrainer and keep_discard: the share of the defect's cost
  won back. None, with a note, when oracle - static is <= 0 or its interval reaches 0 (the defect costs nothing
  measurable here, so there is nothing to recover);
* **diagnosis**: whether a diagnosis the Critic confirmed (events.jsonl: the ``diagnose`` node's diagnoses, the
  ``critique`` node's verdicts) named the defect's mechanism, the failure modes of the card's ``Mechanism:`` line
  (``evotrainer.harness.faults.mechanism``), and after which phase first;
* **repairing commit**: the first promotion into main that changed one of the defect's planted lines (the lines of
  its overlay files, self-tests aside, that the clean seed lacks: :func:`planted`; an edit elsewhere in the same
  file repairs nothing) and trained within the bench (promoted after phase p < the bench's phases), and the
  state at the end: the overlay's files in the harness that trained the last phase (tag ``phase-<phases>``) equal
  the clean seed's (``clean``), the faulty overlay's (``faulty``) or neither (``changed``: edited, not restored).

Per defect and seed, the table gives oracle - static, evotrainer - static, the recovery with its interval (items
resampled), whether it was repaired (evotrainer - static clear of 0), the modes confirmed and the moves promoted, each
marked by whether it predates the family's first run (``docs/fault-register.yaml``: :func:`predates`). Over defect-seeds
(:func:`counts`): "repaired on k of n" (n: those whose oracle - static is clear of 0) and the mean recovery over all n,
failures counted, with the ones left out and why. The named-matrix (:func:`named_matrix`): confirmed modes against each
defect and the clean seed, so a mode the clean seed confirms too is seen as no evidence; and whether the first
confirmed diagnosis was one of the card's. No harm: clean_evotrainer - oracle per seed and over seeds (and on the
second clean seed, math_reference, with --arms reference_oracle,reference_evotrainer). Compute: every arm's generated
completions, judging included; the opt-in matched arms (``static_matched`` ...) train a static harness for as many
completions as the evolving arm of their seed spent, so "at equal compute" is a paired comparison. The pooled
bootstrap over defects stays below, labelled. Results: ``BENCH/faults.json`` and ``BENCH/faults.md``.

``--faults`` takes catalogue names, ``all``, and ``generated:N[@SEED]``: N defects drawn from families across every
harness layer (``evotrainer/harness/generated.py``), each a folder ``BENCH/gen-SEED-K/``.

    evotrainer bench runs/faults --faults all [--arms static,evotrainer,oracle] [--seeds 0,1,2] [--phases 3]
    evotrainer bench runs/gen --faults generated:6@1 --arms static,evotrainer,oracle,clean_evotrainer,static_matched

Its runs train at the bench's own short budget (``BUDGET``, ``PHASES``), not the default's; ``--set`` overrides it.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from evotrainer import config as config_mod
from evotrainer.bench.arms import CLEAN, FAULT_ARMS, MATCHED, check_seeds, expand_fault_arms, fault_run_dir
from evotrainer.bench.runner import arm_config, arm_table, interval_text, run_outcome, train_runs
from evotrainer.bench.runner import summarize as arm_summary
from evotrainer.console import Reporter
from evotrainer.harness import faults as catalogue
from evotrainer.harness import generated
from evotrainer.metrics import paired_gain, pooled_gain
from evotrainer.rundir import RunDir

EVOLVING = ("evotrainer", "keep_discard")  # the arms that edit the faulty seed: recovery and repairs

# The fault bench's own budget, under every --set: short runs (3 phases of 60 steps) judged as the default judged
# before 2026-11-28 (two Engineer rounds of up to three trials, the counterfactual; since issue 40 a round races
# all its candidates that pass the replay), the settings its table in
# docs/results.md was measured at. Its 42 runs then took about two hours on 2 cores; at the default budget (2 x 300
# steps, 5-6 minutes a run) they would take about four. ``evotrainer demo`` runs at the same budget. --set overrides
# any of it.
PHASES = 3
BUDGET = ("training.steps_per_phase=60", "evolution.max_engineer_rounds=2", "evolution.counterfactual=true")


def parse_faults(spec: str, domain: str = "math") -> list[str]:
    """``--faults``: comma-separated catalogue names, ``all`` (``domain``'s catalogue), ``generated:N[@SEED]`` (N
    generated defects of ``domain`` from suite seed SEED, default 0: ``evotrainer.harness.generated``) or a generated
    defect's name (``gen-[DOMAIN-]SEED-K``), mixed freely; ConfigError in one line for an unknown name or another
    domain's defect."""
    names: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        try:
            drawn = generated.parse_spec(item, domain) if item else None
        except ValueError as err:
            raise config_mod.ConfigError(f"--faults: {err}") from None
        names += catalogue.names(domain) if item == "all" else drawn if drawn is not None else [item] if item else []
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if not catalogue.known(n)]
    if unknown or not names:
        raise config_mod.ConfigError(f"--faults: {f'unknown fault(s) {unknown}' if unknown else 'no fault given'} "
                                     f"(known for {domain}: {', '.join(catalogue.names(domain)) or 'none'}, or all, "
                                     f"or {generated.SPEC}:N[@SEED])")
    for name in names:
        try:
            catalogue.check_domain(domain, name)
        except ValueError as err:
            raise config_mod.ConfigError(f"--faults: {err}") from None
    return names


def plan(faults: list[str], arms: list[str], seeds: list[int]) -> dict[str, tuple[str | None, str, int]]:
    """The runs a fault bench makes: folder (relative to the bench) -> (defect, or None on the clean seed, arm,
    seed). The clean seed's runs come first, once per seed whatever the number of defects."""
    runs: dict[str, tuple[str | None, str, int]] = {}
    for seed in seeds:
        for arm in arms:
            if not FAULT_ARMS[arm][1]:
                runs[fault_run_dir(None, arm, seed)] = (None, arm, seed)
    for fault in faults:
        for seed in seeds:
            for arm in arms:
                if FAULT_ARMS[arm][1]:
                    runs[fault_run_dir(fault, arm, seed)] = (fault, arm, seed)
    return runs


def configs(runs: dict[str, tuple[str | None, str, int]], phases: int, tasks: dict | None,
            overrides: list[str]) -> dict[str, config_mod.Config]:
    """Each planned run's config: the ordinary arm it trains as, with ``fault`` set on the faulty seed (and the arm's
    own overrides: the reference seed's harness). The clean seeds' runs must stay clean: a ``fault`` or ``harness``
    from --set or --tasks is refused (one line). A matched arm's config here is its static arm's; :func:`matched`
    gives it its steps once the run it is matched to has finished."""
    out = {}
    for rel, (fault, arm, seed) in runs.items():
        ordinary, _, own = FAULT_ARMS[arm]
        extra = [f"fault={fault}"] if fault else []
        out[rel] = arm_config(ordinary, seed, phases, tasks, [*overrides, *extra, *own],
                              name=f"faults-{fault or CLEAN}-{arm}-seed{seed}")
        expected = arm_config(ordinary, seed, phases, None, list(own)).harness
        if fault is None and (out[rel].fault or out[rel].harness != expected):
            raise config_mod.ConfigError("--set/--tasks: a fault bench plants each defect in the domain's own seed "
                                         f"harness; leave fault and harness unset (got fault {out[rel].fault!r}, "
                                         f"harness {out[rel].harness!r})")
    return out


def matched(cfg: config_mod.Config, arm: str, outcomes: dict[str, dict], phases: int) -> config_mod.Config:
    """A matched arm's config: its static arm's (``cfg``), trained for as many generated completions as the evolving
    arm it is matched to spent (``MATCHED``: phases and judging), at the static arm's completions per step, in more
    steps per phase (rounded up). ``outcomes``: arm -> that seed's outcome (``runner.run_outcome``)."""
    base, evolving = MATCHED[arm]
    spent = sum(outcomes[evolving]["completions"].values())
    per_step = outcomes[base]["completions"]["phases"] / (phases * cfg.training.steps_per_phase)
    steps = max(cfg.training.steps_per_phase, math.ceil(spent / per_step / phases)) if per_step else \
        cfg.training.steps_per_phase
    return config_mod.apply_overrides(cfg, [f"training.steps_per_phase={steps}"])


def run_fault_bench(out: Path, faults: list[str], arms: list[str], seeds: list[int], phases: int,
                    tasks: dict | None = None, overrides: list[str] = (), reporter: Reporter | None = None,
                    calibration: bool = False, domain: str = "math") -> dict:
    """Run (or resume, or reuse) every planned run, then compare; write faults.json and faults.md. Every run is of
    ``domain``, and every defect must be one of its own. Bench seeds and calibration seeds are kept apart as in the
    ordinary bench (``check_seeds``)."""
    check_seeds(seeds, calibration)
    faults = parse_faults(",".join(faults), domain)  # each checked, once, in the order given
    arms = expand_fault_arms(arms)
    reporter = reporter or Reporter()
    t0 = time.time()
    runs = plan(faults, arms, seeds)
    cfgs = configs(runs, phases, tasks, [*BUDGET, f"domain={domain}", *overrides])
    label = {rel: f"{fault or CLEAN}: {arm}, seed {seed}" for rel, (fault, arm, seed) in runs.items()}
    out.mkdir(parents=True, exist_ok=True)
    first = {out / rel: (label[rel], cfgs[rel]) for rel, (_, arm, _) in runs.items() if arm not in MATCHED}
    outcomes = train_runs(first, phases, reporter)
    later = {}  # the matched arms: after the runs whose completions they match
    for rel, (fault, arm, seed) in runs.items():
        if arm in MATCHED:
            by_arm = {a: outcomes[out / fault_run_dir(fault, a, seed)] for a in MATCHED[arm]}
            later[out / rel] = (label[rel], matched(cfgs[rel], arm, by_arm, phases))
    outcomes.update(train_runs(later, phases, reporter) if later else {})
    summary = collect(out, faults, arms, seeds, phases, outcomes)
    summary.update(domain=domain, phases=phases, seeds=seeds, calibration=calibration, faults=faults, arm_order=arms,
                   wall_s=round(time.time() - t0, 1), tasks=tasks, overrides=[*BUDGET, *overrides])
    (out / "faults.json").write_text(json.dumps(summary, indent=1))
    (out / "faults.md").write_text(markdown(summary))
    return summary


# --- reading the runs ---------------------------------------------------------------------------------------------
def diagnosis(events: Iterable[dict], mechanism: list[str], phases: int) -> dict[str, Any]:
    """Whether a confirmed diagnosis named the defect's mechanism, and after which phase first.

    Reads a run's events: each ``diagnose`` node_end lists the phase's diagnoses (id, failure_mode, statement, ...),
    each ``critique`` node_end the Critic's verdict per id (status, critique). A diagnosis counts when the Critic
    confirmed it within the bench's phases and its failure mode is one of ``mechanism``. Returns ``named``,
    ``phase``, ``failure_mode``, ``statement`` (the evidence it cited), and ``confirmed``: every confirmed
    diagnosis, ``[phase, failure_mode]``, whatever its mode."""
    found: dict[str, Any] = {"named": False, "phase": None, "failure_mode": None, "statement": None, "confirmed": []}
    said: dict[tuple[int, str], dict] = {}  # (phase, id) -> the diagnosis as its latest round stated it
    for e in events:
        if e.get("kind") != "node_end" or (phase := e.get("phase", 0)) > phases:
            continue
        if e.get("node") == "diagnose":
            said.update({(phase, d.get("id")): d for d in e.get("diagnoses") or []})
        elif e.get("node") == "critique":
            for did, verdict in (e.get("verdicts") or {}).items():
                d = said.get((phase, did))
                if not d or not verdict or verdict[0] != "confirmed":
                    continue
                if [phase, d.get("failure_mode")] not in found["confirmed"]:
                    found["confirmed"].append([phase, d.get("failure_mode")])
                if not found["named"] and d.get("failure_mode") in mechanism:
                    found.update(named=True, phase=phase, failure_mode=d["failure_mode"],
                                 statement=d.get("statement"))
    return found


def planted(fault: str, domain: str = "math") -> dict[str, list[str]]:
    """The defect's own lines: per overlay file, the stripped lines the clean seed's file lacks. Self-tests
    (``tests/``) are left out when the overlay has other files: a test that accepts the defect is not the defect."""
    from evotrainer.harness.repo import seed_dir

    files = catalogue.overlay(fault)
    kept = [f for f in files if not f.startswith("tests/")] or files
    seed, out = seed_dir(domain), {}
    for f in kept:
        clean = Counter(_lines((seed / f).read_text() if (seed / f).is_file() else ""))
        out[f] = list((Counter(_lines((catalogue.fault_dir(fault) / f).read_text())) - clean).elements())
    return out


def _lines(text: str | None) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def _planted_left(repo, ref: str, lines: dict[str, list[str]]) -> int:
    """How many of the planted lines the harness at ``ref`` still holds."""
    return sum(sum((Counter(want) & Counter(_lines(repo.read(ref, f)))).values()) for f, want in lines.items())


def repair(rd: RunDir, fault: str, phases: int) -> dict[str, Any] | None:
    """Which promotion removed the defect from the run's harness, and what the harness that trained last holds.

    ``commit``: the first promotion into main (a ``promoted`` event, after phase p < ``phases``, so it trained
    within the bench) whose merge changed one of the defect's planted lines (:func:`planted`: main before it held
    more of them than after; ``{sha, branch, phase, files}``, files the overlay files it changed), or None.
    ``at_end``: the overlay's files in the harness that trained the bench's last phase (tag ``phase-<phases>``; main
    when there is no such tag) are the clean seed's (``clean``), the faulty overlay's (``faulty``), or neither
    (``changed``). None for a folder without a run (no harness repo)."""
    from evotrainer.harness.repo import HarnessRepo, seed_dir

    if not rd.exists():
        return None
    repo = HarnessRepo(rd.harness)
    files = catalogue.overlay(fault)
    lines = planted(fault, rd.load_config().domain)
    commit = None
    for e in rd.events.read("promoted"):
        if e.get("phase", 0) >= phases or not e.get("main_sha"):
            continue
        merge = repo.commit(e["main_sha"])
        if not merge.parents or _planted_left(repo, merge.sha, lines) >= _planted_left(repo, merge.parents[0], lines):
            continue
        touched = sorted(set(repo.changed_files(merge.parents[0], merge.sha)) & set(files))
        if touched:
            commit = {"sha": merge.sha, "branch": e.get("branch"), "phase": e["phase"], "files": touched}
            break
    end = f"phase-{phases}" if f"phase-{phases}" in repo.tags() else "main"
    have = {f: repo.read(end, f) for f in files}
    seed = seed_dir(rd.load_config().domain)
    clean = {f: (seed / f).read_text() if (seed / f).is_file() else None for f in files}
    faulty = {f: (catalogue.fault_dir(fault) / f).read_text() for f in files}
    at_end = "clean" if have == clean else "faulty" if have == faulty else "changed"
    return {"commit": commit, "at_end": at_end, "end_ref": end}


def promoted_moves(rd: RunDir, phases: int) -> list[dict[str, Any]]:
    """The moves a run promoted into main within the bench's phases: ``{phase, branch, move}``, the move read from the
    candidate's commit ("Intervention NAME from the ...", as the Engineer writes it; the variable when no name)."""
    from evotrainer.harness.repo import HarnessRepo

    if not rd.exists():
        return []
    repo, out = HarnessRepo(rd.harness), []
    for e in rd.events.read("promoted"):
        if e.get("phase", 0) >= phases:
            continue
        try:
            message = repo.message(e.get("branch") or e["main_sha"])
        except (ValueError, KeyError):
            message = ""
        named = re.search(r"Intervention (\S+) from the", message)
        out.append({"phase": e.get("phase"), "branch": e.get("branch"),
                    "move": named.group(1) if named else e.get("variable") or "?"})
    return out


# --- the register: which moves predate a family's first run (docs/fault-register.yaml) ---------------------------
REGISTER = Path(__file__).resolve().parents[2] / "docs" / "fault-register.yaml"


def register(path: Path = REGISTER) -> dict | None:
    """The register of moves and families, or None when it is not there (an installed EvoTrainer)."""
    return config_mod.read_yaml(path, str(path)) if path.is_file() else None


def predates(reg: dict | None, move: str, family: str | None) -> bool | None:
    """Whether ``move`` existed before ``family`` was first run, by the register's order: catalogue families ran
    before the baseline's moves existed, the baseline's moves come next, then ``later`` in the order written. A move
    not in the register is newer than every entry; a family not in it has not been run (every registered move
    predates it). A move entry with a ``domain`` is that domain's move of that name (one domain's
    ``verifier_aligned_reward`` is not another's) and, for a generated family of that domain, counts before the
    entry without one. None when neither says (a move not registered and a family never run), or without a
    register."""
    if reg is None or family is None:
        return None
    order: dict[tuple[str, str], int] = {("family", f): -1 for f in reg.get("before_baseline") or []}
    order.update({("move", m): 0 for m in (reg.get("baseline") or {}).get("moves") or []})
    for i, entry in enumerate(reg.get("later") or [], 1):
        for kind in ("move", "family"):
            if entry.get(kind):
                name = f"{entry['domain']}/{entry[kind]}" if kind == "move" and entry.get("domain") else entry[kind]
                order.setdefault((kind, name), i)
    key = move.split(":", 1)[0]
    domain = generated.FAMILIES[family].domain if family in generated.FAMILIES else None
    m = order.get(("move", f"{domain}/{key}")) if domain else None
    m, f = (m if m is not None else order.get(("move", key))), order.get(("family", family))
    if m is None and f is None:
        return None
    return (m if m is not None else math.inf) < (f if f is not None else math.inf)


def collect(out: Path, faults: list[str], arms: list[str], seeds: list[int], phases: int,
            outcomes: dict[Path, dict] | None = None) -> dict:
    """The fault bench's summary from its folder: each run's outcome (or the one ``train_runs`` returned), the
    evolving runs' diagnoses (the clean seeds' too: a mode they confirm says nothing of a defect), repairs and
    promoted moves, then :func:`summarize`."""
    outcomes = outcomes or {}
    by: dict[str, dict[str, dict[int, dict]]] = {}
    found: dict[str, dict] = {}
    reg = register()
    for rel, (fault, arm, seed) in plan(faults, arms, seeds).items():
        root = out / rel
        by.setdefault(fault or CLEAN, {}).setdefault(arm, {})[seed] = outcomes.get(root) or run_outcome(RunDir(root),
                                                                                                   phases)
        if fault is None:
            if arm == "clean_evotrainer":
                entry = found.setdefault(CLEAN, {"diagnosis": {}})
                entry["diagnosis"][str(seed)] = diagnosis(RunDir(root).events.read("node_end"), [], phases)
            continue
        entry = found.setdefault(fault, {"mechanism": catalogue.mechanism(fault), "family": catalogue.family(fault),
                                         "diagnosis": {}, "repair": {}, "moves": {}})
        if generated.is_name(fault) and "drawn" not in entry:  # what was drawn: its layer and constants
            d = generated.draw(fault)
            entry["drawn"] = {"layer": d.layer, "constants": d.constants}
        if arm == "evotrainer":
            entry["diagnosis"][str(seed)] = diagnosis(RunDir(root).events.read("node_end"), entry["mechanism"], phases)
            entry["moves"][str(seed)] = [{**m, "predates": predates(reg, m["move"], entry["family"])}
                                         for m in promoted_moves(RunDir(root), phases)]
        if arm in EVOLVING:
            entry["repair"].setdefault(arm, {})[str(seed)] = repair(RunDir(root), fault, phases)
    summary = summarize(by, seeds, phases, found)
    if reg is not None:  # a family run here for the first time goes into the register before any move it suggests
        listed = set(reg.get("before_baseline") or []) | {e.get("family") for e in reg.get("later") or []}
        summary["unregistered"] = sorted({e["family"] for e in found.values() if e.get("family")} - listed)
    return summary


# --- the comparison ----------------------------------------------------------------------------------------------
def recovery(gain: dict | None, gap: dict | None) -> tuple[float | None, str | None]:
    """(arm - static) / (oracle - static) from the two paired comparisons with static, or None and why."""
    if gain is None or gap is None:
        return None, "needs static, the arm and oracle"
    if gap["diff"] <= 0:
        return None, f"oracle - static is {gap['diff']:+.1%}: the defect costs nothing here, nothing to recover"
    if gap["low"] <= 0:
        return None, (f"oracle - static is {interval_text(gap)}, its interval reaches 0: the defect's cost is within "
                      "noise, so a share of it means nothing")
    return gain["diff"] / gap["diff"], None


def recovery_interval(static: dict[str, float], arm: dict[str, float], oracle: dict[str, float],
                      resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A 95% interval of one seed's recovery, (arm - static) / (oracle - static), resampling the held-out items
    (the same resample for both differences; a resample whose oracle - static is not above 0 has no ratio)."""
    keys = sorted(static)
    gain = [arm[k] - static[k] for k in keys]
    gap = [oracle[k] - static[k] for k in keys]
    rng, n, ratios = random.Random(seed), len(keys), []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        den = sum(gap[i] for i in idx)
        if den > 0:
            ratios.append(sum(gain[i] for i in idx) / den)
    ratios.sort()
    if len(ratios) < 0.95 * resamples:  # the cost itself is not clear of 0 in too many resamples: no bound
        return -math.inf, math.inf
    return ratios[int(0.025 * resamples)], ratios[len(ratios) - 1 - int(0.025 * resamples)]


MIN_COST = 0.03  # issue 40's bar for a defect-seed that counts toward the generated suite's target: 3 points


def per_seed(arms: dict[str, dict[int, dict]], seeds: list[int]) -> dict[str, dict]:
    """Per seed of one defect: oracle - static (``gap``), each evolving arm (and static_matched) minus static
    (``gain``), the recovery with its interval (None and why when the gap is not clear of 0), and ``repaired``: the
    evotrainer arm's gain clear of 0."""
    out = {}
    items = {a: {s: r["final"].items for s, r in by.items()} for a, by in arms.items()}
    for s in seeds:
        if "static" not in items or s not in items["static"]:
            continue
        st = items["static"][s]
        row: dict[str, Any] = {"gain": {a: paired_gain([(st, items[a][s])]) for a in (*EVOLVING, "static_matched")
                                        if s in items.get(a, {})}}
        row["gap"] = paired_gain([(st, items["oracle"][s])]) if s in items.get("oracle", {}) else None
        row["recovery"], row["note"] = {}, None
        for arm in EVOLVING:
            if arm in row["gain"]:
                value, note = recovery(row["gain"][arm], row["gap"])
                row["note"] = row["note"] or note
                row["recovery"][arm] = None if value is None else {
                    "value": value, **dict(zip(("low", "high"), recovery_interval(st, items[arm][s],
                                                                                  items["oracle"][s])))}
        row["cost"] = row["gap"] is not None and row["gap"]["low"] > 0
        ev = row["gain"].get("evotrainer")
        row["repaired"] = ev is not None and ev["low"] > 0
        if "static_matched" in row["gain"] and "evotrainer" in items:  # equal compute: evotrainer - static_matched
            row["vs_matched"] = paired_gain([(items["static_matched"][s], items["evotrainer"][s])])
        out[str(s)] = row
    return out


def summarize(outcomes: dict[str, dict[str, dict[int, dict]]], seeds: list[int], phases: int,
              found: dict[str, dict] | None = None) -> dict:
    """Per defect, the counts over defect-seeds, the named-matrix, compute and no harm. ``outcomes``: defect (or
    ``clean``) -> arm -> seed -> a run's outcome (as ``runner.run_outcome`` gives it); ``found``: defect (and
    ``clean``) -> ``mechanism``, ``family``, ``diagnosis`` per seed, ``repair`` per arm and seed, ``moves`` per seed
    (as :func:`collect` reads them)."""
    found = found or {}
    clean = outcomes.get(CLEAN, {})
    defects: dict[str, dict] = {}
    for fault, arms in outcomes.items():
        if fault == CLEAN:
            continue
        both = {**arms, **({"oracle": clean["oracle"]} if "oracle" in clean else {})}
        entry = {"arms": arm_summary({a: both[a] for a in FAULT_ARMS if a in both}, seeds, phases)["arms"],
                 **found.get(fault, {})}
        gap = entry["arms"].get("oracle", {}).get("vs_static")
        entry["recovery"], notes = {}, []
        for arm in EVOLVING:
            if arm in entry["arms"]:
                entry["recovery"][arm], note = recovery(entry["arms"][arm].get("vs_static"), gap)
                notes += [note] if note and note not in notes else []
        entry["recovery_note"] = "; ".join(notes) or None
        entry["per_seed"] = per_seed(both, seeds)
        if "static_matched" in both and "evotrainer" in both:
            entry["vs_matched"] = paired_gain([(both["static_matched"][s]["final"].items,
                                                both["evotrainer"][s]["final"].items) for s in seeds])
        defects[fault] = entry
    summary: dict[str, Any] = {"defects": defects, "counts": counts(defects),
                               "named": named_matrix(defects, found.get(CLEAN, {}).get("diagnosis", {})),
                               "compute": compute(outcomes, seeds), "pooled": pooled(outcomes, defects, seeds)}
    if clean:
        summary["clean"] = {"arms": arm_summary({a: clean[a] for a in FAULT_ARMS if a in clean}, seeds, phases)["arms"]}
    harm = {}
    for label, (base, arm) in {"clean": ("oracle", "clean_evotrainer"), "clean, compute-matched": (
            "oracle_matched", "clean_evotrainer"), "math_reference": ("reference_oracle", "reference_evotrainer"),
            "math_reference, compute-matched": ("reference_matched", "reference_evotrainer")}.items():
        if base in clean and arm in clean:
            pairs = {s: (clean[base][s]["final"].items, clean[arm][s]["final"].items) for s in seeds}
            harm[label] = {"arms": [arm, base], "per_seed": {str(s): paired_gain([p]) for s, p in pairs.items()},
                           "pooled": paired_gain(list(pairs.values()))}
    if harm:
        summary["no_harm"] = harm
    return summary


def counts(defects: dict[str, dict]) -> dict[str, Any]:
    """Over every defect-seed: how many cost something (oracle - static clear of 0), how many of those evotrainer
    repaired (its gain clear of 0: k of n), the mean recovery over them with every failure in it, and the ones left
    out with why; the same k of n over the defect-seeds costing at least ``MIN_COST``."""
    out: dict[str, Any] = {"defect_seeds": 0, "left_out": []}
    for arm in EVOLVING:
        got, k, n, k3, n3 = [], 0, 0, 0, 0
        for fault, e in defects.items():
            for s, row in e.get("per_seed", {}).items():
                if arm not in row["recovery"]:
                    continue
                if arm == "evotrainer":
                    out["defect_seeds"] += 1
                if not row["cost"] or row["recovery"][arm] is None:
                    if arm == "evotrainer":
                        out["left_out"].append(f"{fault} seed {s}: {row['note'] or 'no cost'}")
                    continue
                got.append(row["recovery"][arm]["value"])
                repaired = row["gain"][arm]["low"] > 0
                n, k = n + 1, k + repaired
                if row["gap"]["diff"] >= MIN_COST:
                    n3, k3 = n3 + 1, k3 + repaired
        if n:
            out[arm] = {"repaired": k, "of": n, "mean_recovery": sum(got) / n, "repaired_3pt": k3, "of_3pt": n3}
    return out


def named_matrix(defects: dict[str, dict], clean: dict[str, dict]) -> dict[str, Any]:
    """Confirmed failure modes (rows) against each defect and the clean seed (columns): the number of seeds whose
    evotrainer run confirmed the mode. Per defect: on how many seeds the first confirmed diagnosis was one of its
    card's modes, and on how many seeds the clean seed (same seed) confirmed none of them (specificity)."""
    columns = {**{f: e.get("diagnosis", {}) for f, e in defects.items()}, **({CLEAN: clean} if clean else {})}
    rows: dict[str, dict[str, int]] = {}
    for col, per in columns.items():
        for d in per.values():
            for mode in dict.fromkeys(m for _, m in d["confirmed"]):
                rows.setdefault(mode, {}).setdefault(col, 0)
                rows[mode][col] += 1
    first, specific = {}, {}
    for f, e in defects.items():
        card = set(e.get("mechanism") or [])
        per = e.get("diagnosis", {})
        first[f] = {"seeds": sum(bool(d["confirmed"]) and d["confirmed"][0][1] in card for d in per.values()),
                    "of": len(per)}
        if clean:
            specific[f] = {"seeds": sum(not card & {m for _, m in clean[s]["confirmed"]} for s in per if s in clean),
                           "of": sum(s in clean for s in per)}
    return {"modes": rows, "columns": list(columns), "first": first, "specific": specific}


def compute(outcomes: dict[str, dict[str, dict[int, dict]]], seeds: list[int]) -> dict[str, dict]:
    """Generated completions (the phases' and judging's) per defect (and clean) and arm, summed over seeds."""
    out: dict[str, dict] = {}
    for where, arms in outcomes.items():
        for arm, by in arms.items():
            done = [by[s].get("completions", {}) for s in seeds if s in by]
            out.setdefault(where, {})[arm] = {part: sum(d.get(part, 0) for d in done) for part in ("phases", "judging")}
    return out


def pooled(outcomes: dict[str, dict[str, dict[int, dict]]], defects: dict[str, dict], seeds: list[int]) -> dict:
    """Over defects, below the counts and labelled as such: each arm minus static (and evotrainer minus keep_discard)
    by ``metrics.pooled_gain`` (a bootstrap over a few defects: read the counts first)."""
    oracle = outcomes.get(CLEAN, {}).get("oracle")
    arms = {f: {**a, **({"oracle": oracle} if oracle else {})} for f, a in outcomes.items() if f != CLEAN}
    out: dict[str, Any] = {}
    for base, arm in (("static", "evotrainer"), ("static", "keep_discard"), ("static", "oracle"),
                      ("keep_discard", "evotrainer"), ("static_matched", "evotrainer")):
        groups = {f: [(a[base][s]["final"].items, a[arm][s]["final"].items) for s in seeds]
                  for f, a in arms.items() if base in a and arm in a}
        if groups:
            out[arm if base == "static" else f"{arm}_vs_{base}"] = pooled_gain(groups)
    return out


# --- the tables ---------------------------------------------------------------------------------------------------
def _repair_text(r: dict | None) -> str:
    if r is None:
        return "no run"
    c = r["commit"]
    made = f"{c['branch']} {c['sha'][:8]} (after phase {c['phase']}: {', '.join(c['files'])})" if c else "none"
    return f"{made}, at the end {r['at_end']}"


def _repair_cell(entry: dict, arm: str = "evotrainer") -> str:
    per_seed = entry.get("repair", {}).get(arm, {})
    return "; ".join(f"seed {s}: {_repair_text(r)}" for s, r in per_seed.items()) or "-"


def _recovery_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _seed_recovery(row: dict) -> str:
    r = row["recovery"].get("evotrainer")
    if r is None:
        return "- (" + ("no cost" if not row["cost"] else "no run") + ")"
    bounds = "" if math.isinf(r["low"]) else f" ({r['low']:.0%} to {r['high']:.0%})"
    return f"{r['value']:.0%}{bounds}"


def _moves_text(moves: list[dict]) -> str:
    if not moves:
        return "none"
    flag = {True: "predates", False: "written after the family's first run", None: "not in the register"}
    return "; ".join(f"{m['move']} (after phase {m['phase']}, {flag[m['predates']]})" for m in moves)


def markdown(summary: dict) -> str:
    """faults.md: per defect and seed (gains, recovery with its interval, repaired, confirmed modes, promoted moves),
    the counts over defect-seeds (k of n repaired, mean recovery with failures in it), the named-matrix, no harm,
    compute, then the pooled bootstrap (labelled), each defect's arms, and what each column means."""
    defects, counts_, named = summary["defects"], summary.get("counts", {}), summary.get("named", {})
    lines = [f"# evotrainer fault bench: {len(defects)} defect(s) x {len(summary['seeds'])} seed(s) x "
             f"{summary['phases']} phases", "",
             "| defect (family) | seed | oracle - static | evotrainer - static | recovery (95% CI) | repaired | "
             "confirmed modes (in order) | promoted moves |", "|---|---|---|---|---|---|---|---|"]
    for fault, e in defects.items():
        for s, row in e.get("per_seed", {}).items():
            d = e.get("diagnosis", {}).get(s)
            modes = ", ".join(dict.fromkeys(m for _, m in d["confirmed"])) if d and d["confirmed"] else "none"
            lines.append("| " + " | ".join([
                f"{fault} ({e.get('family') or '-'})", s, interval_text(row["gap"]),
                interval_text(row["gain"].get("evotrainer")), _seed_recovery(row),
                "yes" if row["repaired"] else "no", modes, _moves_text(e.get("moves", {}).get(s, []))]) + " |")
    lines += ["", "## Over defect-seeds", ""]
    for arm in EVOLVING:
        if c := counts_.get(arm):
            lines.append(f"- {arm}: repaired on **{c['repaired']} of {c['of']}** defect-seeds that cost something "
                         f"(oracle - static clear of 0); mean recovery **{c['mean_recovery']:.0%}** over those "
                         f"{c['of']}, failures counted; {c['repaired_3pt']} of {c['of_3pt']} where the cost is at "
                         f"least {MIN_COST * 100:.0f} points.")
    if left := counts_.get("left_out"):
        lines.append(f"- left out of the means ({len(left)} of {counts_['defect_seeds']}): " + "; ".join(left) + ".")
    if fresh := summary.get("unregistered"):
        lines.append(f"- families without a first run in docs/fault-register.yaml: {', '.join(fresh)} (append it "
                     "there, before writing any move this run suggests).")
    if named.get("modes"):
        cols = named["columns"]
        lines += ["", "## Named: confirmed failure modes (seeds) by defect and the clean seed", "",
                  "| mode | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for mode, by in sorted(named["modes"].items()):
            cells = []
            for col in cols:
                n = by.get(col, 0)
                on_card = col != CLEAN and mode in (defects[col].get("mechanism") or [])
                cells.append(f"**{n}**" if on_card and n else str(n))
            lines.append(f"| {mode} | " + " | ".join(cells) + " |")
        lines += ["", "Bold: a mode of the defect's card. A mode the clean seed also confirms is no evidence of the "
                  "defect.", ""]
        for f in defects:
            first, spec = named["first"].get(f), named["specific"].get(f)
            text = (f"- {f}: first confirmed diagnosis one of the card's modes on {first['seeds']} of "
                    f"{first['of']} seeds")
            if spec:
                text += f"; the clean seed confirms none of them on {spec['seeds']} of {spec['of']} seeds"
            lines.append(text + ".")
    if harm := summary.get("no_harm"):
        lines += ["", "## No harm", ""]
        for label, h in harm.items():
            per = ", ".join(f"seed {s} {interval_text(g)}" for s, g in h["per_seed"].items())
            lines.append(f"- {label}: {h['arms'][0]} - {h['arms'][1]} {interval_text(h['pooled'])}; per seed {per}.")
    if comp := summary.get("compute"):
        lines += ["", "## Compute: completions generated (phases + judging, all seeds)", "",
                  "| where | arm | phases | judging | total | x static |", "|---|---|---|---|---|---|"]
        for where, arms in comp.items():
            ref = arms.get("static") or arms.get("oracle")
            base = sum(ref.values()) if ref else 0
            for arm, c in arms.items():
                total = c["phases"] + c["judging"]
                ratio = f"{total / base:.2f}" if base else "-"
                lines.append(f"| {where} | {arm} | {c['phases']:,} | {c['judging']:,} | {total:,} | {ratio} |")
        matched_ = [(f, e["vs_matched"]) for f, e in defects.items() if e.get("vs_matched")]
        if matched_:
            lines += ["", "At equal compute (evotrainer - static_matched, paired per item and seed): " + "; ".join(
                f"{f} {interval_text(v)}" for f, v in matched_) + "."]
    pool = summary.get("pooled", {})
    if pool:
        lines += ["", "## Pooled over defects (a bootstrap over few defects: read the counts above first)", "",
                  "; ".join(f"{k.replace('_vs_', ' - ')}{' - static' if '_vs_' not in k else ''} "
                            f"{interval_text(v)}" for k, v in pool.items()) + "."]
    for fault, e in defects.items():
        drawn = e.get("drawn")
        head = f"Family: {e.get('family') or '-'}"
        head += f" ({drawn['layer']} layer; drawn {json.dumps(drawn['constants'])})" if drawn else ""
        head += f". Mechanism: {', '.join(e.get('mechanism') or ['-'])}."
        head += f" Recovery over seeds: {e['recovery_note']}." if e.get("recovery_note") else ""
        lines += ["", f"## {fault}", "", head, "", *arm_table(e["arms"])]
        for s, d in e.get("diagnosis", {}).items():
            if d["named"]:
                lines += ["", f"Seed {s}: confirmed after phase {d['phase']}, {d['failure_mode']}: {d['statement']}"]
        for arm in EVOLVING:
            if arm in e.get("repair", {}):
                lines += ["", f"Repairs by {arm} (first promotion that changed a planted line; the overlay's files at "
                          f"the end): {_repair_cell(e, arm)}."]
    if clean := summary.get("clean"):
        lines += ["", "## clean seeds (shared by every defect)", "", *arm_table(clean["arms"])]
    lines += ["", "## What the columns mean", "",
              "- oracle is the clean seed, never edited: the defect removed (the ordinary bench's static arm), one run "
              "per seed shared by every defect; clean_evotrainer evolves from it (the no-harm control); the "
              "reference arms do the same from harness_repo/math_reference, a second clean seed.",
              "- per seed, each difference is paired per held-out item with its 95% interval; recovery = (evotrainer "
              "- static) / (oracle - static), its interval resampling items; none where oracle - static is not "
              "clear of 0 (the defect-seed is left out of the means, and counted as left out).",
              "- repaired: evotrainer - static clear of 0 on that seed. k of n counts every defect-seed that costs "
              "something; the mean recovery counts every one of them, failures (0 or below) included.",
              "- confirmed modes: the failure modes of diagnoses the Critic confirmed, in the order confirmed; the "
              "matrix counts seeds per mode and column, the clean seed's column beside the defects'.",
              "- promoted moves: what the run promoted within the bench, and whether the register "
              "(docs/fault-register.md) shows the move existed before the defect's family was first run.",
              "- compute: every generated completion, the phases' and judging's (trials, races, counterfactuals); "
              "static_matched / oracle_matched / reference_matched train the static harness for as many completions "
              "as the evolving arm of their seed spent (more steps per phase): equal compute, paired."]
    return "\n".join(lines) + "\n"
