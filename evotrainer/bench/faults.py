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

Pooled over defects: each arm minus static with a hierarchical bootstrap (defects, then seeds, then items:
``metrics.pooled_gain``), evotrainer minus keep_discard likewise, the mean recovery, and the no-harm row:
clean_evotrainer minus oracle per seed and over seeds. Results: ``BENCH/faults.json`` and ``BENCH/faults.md``.

    evotrainer bench runs/faults --faults all [--arms static,evotrainer,oracle] [--seeds 0,1,2] [--phases 3]

Its runs train at the bench's own short budget (``BUDGET``, ``PHASES``), not the default's; ``--set`` overrides it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from evotrainer import config as config_mod
from evotrainer.bench.arms import CLEAN, FAULT_ARMS, check_seeds, expand_fault_arms, fault_run_dir
from evotrainer.bench.runner import arm_config, arm_table, interval_text, run_outcome, train_runs
from evotrainer.bench.runner import summarize as arm_summary
from evotrainer.console import Reporter
from evotrainer.harness import faults as catalogue
from evotrainer.metrics import paired_gain, pooled_gain
from evotrainer.rundir import RunDir

EVOLVING = ("evotrainer", "keep_discard")  # the arms that edit the faulty seed: recovery and repairs

# The fault bench's own budget, under every --set: short runs (3 phases of 60 steps) judged as the default judged
# before 2026-11-28 (two Engineer rounds of up to three trials, the counterfactual), the settings its table in
# docs/results.md was measured at. Its 42 runs then took about two hours on 2 cores; at the default budget (2 x 300
# steps, 5-6 minutes a run) they would take about four. ``evotrainer demo`` runs at the same budget. --set overrides
# any of it.
PHASES = 3
BUDGET = ("training.steps_per_phase=60", "evolution.max_engineer_rounds=2", "backtest.max_trials=3",
          "evolution.counterfactual=true")


def parse_faults(spec: str) -> list[str]:
    """``--faults``: comma-separated catalogue names, or ``all``; ConfigError in one line for an unknown name."""
    names = catalogue.names() if spec.strip() == "all" else list(dict.fromkeys(s.strip() for s in spec.split(",")
                                                                                if s.strip()))
    unknown = [n for n in names if n not in catalogue.names()]
    if unknown or not names:
        raise config_mod.ConfigError(f"--faults: {f'unknown fault(s) {unknown}' if unknown else 'no fault given'} "
                                     f"(known: {', '.join(catalogue.names())}, or all)")
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
    """Each planned run's config: the ordinary arm it trains as, with ``fault`` set on the faulty seed. The clean
    seed's runs must stay clean: a ``fault`` or ``harness`` from --set or --tasks is refused (one line)."""
    out = {}
    for rel, (fault, arm, seed) in runs.items():
        extra = [f"fault={fault}"] if fault else []
        out[rel] = arm_config(FAULT_ARMS[arm][0], seed, phases, tasks, [*overrides, *extra],
                           name=f"faults-{fault or CLEAN}-{arm}-seed{seed}")
        if fault is None and (out[rel].fault or out[rel].harness):
            raise config_mod.ConfigError("--set/--tasks: a fault bench plants each defect in the domain's own seed "
                                         f"harness; leave fault and harness unset (got fault {out[rel].fault!r}, "
                                         f"harness {out[rel].harness!r})")
    return out


def run_fault_bench(out: Path, faults: list[str], arms: list[str], seeds: list[int], phases: int,
                    tasks: dict | None = None, overrides: list[str] = (), reporter: Reporter | None = None,
                    calibration: bool = False) -> dict:
    """Run (or resume, or reuse) every planned run, then compare; write faults.json and faults.md. Bench seeds and
    calibration seeds are kept apart as in the ordinary bench (``check_seeds``)."""
    check_seeds(seeds, calibration)
    faults = parse_faults(",".join(faults))  # each checked, once, in the order given
    arms = expand_fault_arms(arms)
    reporter = reporter or Reporter()
    t0 = time.time()
    runs = plan(faults, arms, seeds)
    cfgs = configs(runs, phases, tasks, [*BUDGET, *overrides])
    planned = {out / rel: (f"{fault or CLEAN}: {arm}, seed {seed}", cfgs[rel]) for rel, (fault, arm, seed) in
               runs.items()}
    out.mkdir(parents=True, exist_ok=True)
    outcomes = train_runs(planned, phases, reporter)
    summary = collect(out, faults, arms, seeds, phases, outcomes)
    summary.update(phases=phases, seeds=seeds, calibration=calibration, faults=faults, arm_order=arms,
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


def collect(out: Path, faults: list[str], arms: list[str], seeds: list[int], phases: int,
            outcomes: dict[Path, dict] | None = None) -> dict:
    """The fault bench's summary from its folder: each run's outcome (or the one ``train_runs`` returned), the
    evotrainer runs' diagnoses and the evolving runs' repairs, then :func:`summarize`."""
    outcomes = outcomes or {}
    by: dict[str, dict[str, dict[int, dict]]] = {}
    found: dict[str, dict] = {}
    for rel, (fault, arm, seed) in plan(faults, arms, seeds).items():
        root = out / rel
        by.setdefault(fault or CLEAN, {}).setdefault(arm, {})[seed] = outcomes.get(root) or run_outcome(RunDir(root),
                                                                                                   phases)
        if fault is None:
            continue
        entry = found.setdefault(fault, {"mechanism": catalogue.mechanism(fault), "diagnosis": {}, "repair": {}})
        if arm == "evotrainer":
            entry["diagnosis"][str(seed)] = diagnosis(RunDir(root).events.read("node_end"), entry["mechanism"], phases)
        if arm in EVOLVING:
            entry["repair"].setdefault(arm, {})[str(seed)] = repair(RunDir(root), fault, phases)
    return summarize(by, seeds, phases, found)


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


def summarize(outcomes: dict[str, dict[str, dict[int, dict]]], seeds: list[int], phases: int,
              found: dict[str, dict] | None = None) -> dict:
    """Per defect, pooled, and no harm. ``outcomes``: defect (or ``clean``) -> arm -> seed -> a run's outcome (as
    ``runner.run_outcome`` gives it); ``found``: defect -> ``mechanism``, ``diagnosis`` per seed, ``repair`` per arm
    and seed (as :func:`collect` reads them)."""
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
        defects[fault] = entry
    summary: dict[str, Any] = {"defects": defects, "pooled": pooled(outcomes, defects, seeds)}
    if clean:
        summary["clean"] = {"arms": arm_summary({a: clean[a] for a in FAULT_ARMS if a in clean}, seeds, phases)["arms"]}
    if "oracle" in clean and "clean_evotrainer" in clean:
        pairs = {s: (clean["oracle"][s]["final"].items, clean["clean_evotrainer"][s]["final"].items) for s in seeds}
        summary["no_harm"] = {"per_seed": {str(s): paired_gain([p]) for s, p in pairs.items()},
                              "pooled": paired_gain(list(pairs.values()))}
    return summary


def pooled(outcomes: dict[str, dict[str, dict[int, dict]]], defects: dict[str, dict], seeds: list[int]) -> dict:
    """Over defects: each arm minus static (and evotrainer minus keep_discard) by ``metrics.pooled_gain``, the mean
    recovery over the defects that have one, and how many defect-seeds a confirmed diagnosis named."""
    oracle = outcomes.get(CLEAN, {}).get("oracle")
    arms = {f: {**a, **({"oracle": oracle} if oracle else {})} for f, a in outcomes.items() if f != CLEAN}
    out: dict[str, Any] = {}
    for base, arm in (("static", "evotrainer"), ("static", "keep_discard"), ("static", "oracle"),
                      ("keep_discard", "evotrainer")):
        groups = {f: [(a[base][s]["final"].items, a[arm][s]["final"].items) for s in seeds]
                  for f, a in arms.items() if base in a and arm in a}
        if groups:
            out[arm if base == "static" else f"{arm}_vs_{base}"] = pooled_gain(groups)
    for arm in EVOLVING:
        got = [d["recovery"][arm] for d in defects.values() if d["recovery"].get(arm) is not None]
        if got:
            out.setdefault("mean_recovery", {})[arm] = {"mean": sum(got) / len(got), "defects": len(got)}
    named = [[d["named"] for d in e.get("diagnosis", {}).values()] for e in defects.values()]
    if any(named):
        out["diagnosed"] = {"defect_seeds": sum(map(sum, named)), "of": sum(map(len, named)),
                            "defects_on_every_seed": sum(bool(n) and all(n) for n in named), "defects": len(named)}
    return out


# --- the tables ---------------------------------------------------------------------------------------------------
def _cell(arms: dict, arm: str) -> str:
    e = arms.get(arm)
    if not e:
        return "-"
    return f"{e['accuracy']:.1%}" + (f", {interval_text(e['vs_static'])}" if e.get("vs_static") else "")


def _diagnosis_cell(entry: dict) -> str:
    def one(d: dict) -> str:
        if d["named"]:
            return f"after phase {d['phase']} ({d['failure_mode']})"
        modes = sorted({m for _, m in d["confirmed"]})
        return "no" + (f" (confirmed: {', '.join(modes)})" if modes else " (nothing confirmed)")

    per_seed = entry.get("diagnosis", {})
    return "; ".join(f"seed {s}: {one(d)}" for s, d in per_seed.items()) or "-"


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


def markdown(summary: dict) -> str:
    """faults.md: the table (a row per defect, the pooled row, the no-harm row), each defect's arms as the
    ordinary bench shows them, and what each column means."""
    defects, pool = summary["defects"], summary["pooled"]
    lines = [f"# evotrainer fault bench: {len(defects)} defect(s) x {len(summary['seeds'])} seed(s) x "
             f"{summary['phases']} phases", "",
             "| defect | static | evotrainer | keep_discard | oracle | recovery (evotrainer) | a confirmed diagnosis "
             "named the mechanism | repairing commit (evotrainer) |", "|---|---|---|---|---|---|---|---|"]
    for fault, e in defects.items():
        cells = [fault, *(_cell(e["arms"], a) for a in ("static", "evotrainer", "keep_discard", "oracle")),
                 _recovery_cell(e["recovery"].get("evotrainer")), _diagnosis_cell(e), _repair_cell(e)]
        lines.append("| " + " | ".join(cells) + " |")
    mean = pool.get("mean_recovery", {}).get("evotrainer")
    named = pool.get("diagnosed")
    lines.append("| " + " | ".join([
        "pooled (defects, seeds, items)", "-",
        *(interval_text(pool.get(a)) for a in ("evotrainer", "keep_discard", "oracle")),
        f"mean {mean['mean']:.0%} over {mean['defects']} defect(s)" if mean else "-",
        f"{named['defect_seeds']} of {named['of']} defect-seeds; {named['defects_on_every_seed']} of "
        f"{named['defects']} defects on every seed" if named else "-", "-"]) + " |")
    if harm := summary.get("no_harm"):
        lines.append(f"| no harm (clean seed): clean_evotrainer - oracle | - | {interval_text(harm['pooled'])} | - | "
                     f"{summary['clean']['arms']['oracle']['accuracy']:.1%} | - | - | - |")
    lines += ["", "Arm cells: held-out accuracy (mean over seeds), then minus static, paired per item and seed, with "
              "its 95% interval. The pooled row gives each arm minus static pooled over defects (hierarchical "
              "bootstrap: defects, then seeds, then items)."]
    if vs := pool.get("evotrainer_vs_keep_discard"):
        lines += ["", f"evotrainer minus keep_discard, pooled: {interval_text(vs)}."]
    if harm:
        per_seed = ", ".join(f"seed {s} {interval_text(g)}" for s, g in harm["per_seed"].items())
        lines += ["", f"No harm per seed (clean_evotrainer - oracle, paired per item): {per_seed}."]
    for fault, e in defects.items():
        lines += ["", f"## {fault}", "", f"Mechanism: {', '.join(e.get('mechanism') or ['-'])}."
                  + (f" Recovery: {e['recovery_note']}." if e.get("recovery_note") else ""), "", *arm_table(e["arms"])]
        for s, d in e.get("diagnosis", {}).items():
            if d["named"]:
                lines += ["", f"Seed {s}: confirmed after phase {d['phase']}, {d['failure_mode']}: {d['statement']}"]
        for arm in EVOLVING:
            if arm in e.get("repair", {}) and arm != "evotrainer":
                lines += ["", f"Repairs by {arm}: {_repair_cell(e, arm)}."]
    if clean := summary.get("clean"):
        lines += ["", "## clean seed (shared by every defect)", "", *arm_table(clean["arms"])]
    lines += ["", "## What the columns mean", "",
              "- oracle is the clean seed, never edited: the defect removed (the ordinary bench's static arm), one run "
              "per seed shared by every defect; clean_evotrainer evolves from the clean seed (the no-harm control).",
              "- recovery = (evotrainer - static) / (oracle - static): the share of the defect's cost won back; none "
              "when oracle - static is <= 0 or its interval reaches 0.",
              "- a confirmed diagnosis named the mechanism: a diagnosis the Critic confirmed whose failure mode is one "
              "of the card's Mechanism line, and after which phase first; otherwise what was confirmed instead.",
              "- repairing commit: the first promotion into main that changed one of the defect's planted lines "
              "(those of its overlay the clean seed lacks) and trained within the bench; at the end: the overlay's "
              "files in the harness that trained the last phase are the clean seed's (clean), the faulty overlay's "
              "(faulty) or neither (changed)."]
    return "\n".join(lines) + "\n"
