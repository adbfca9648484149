"""``evotrainer bench``: does evolving the harness pay? Arms with the same data, model, evaluator and training budget.

    static        the seed harness, never edited                         (evolution.mode: static)
    static_rerun  static trained again with other training randomness   (training.rerun: 1): no effect by
                  construction, so its interval shows what "no difference" looks like at this bench's size;
                  ``--reruns N`` adds static_rerun2 .. static_rerunN (training.rerun: 2 .. N), more static runs
    reference     a fixed expert harness (harness_repo/math_reference)   (evolution.mode: static)
    keep_discard  the scalar loop: next playbook edit, kept if dev accuracy rose, else reverted
    evotrainer    the full system: diagnose, critique, engineer, backtest with A/B trials, promote, realized effect

Every arm trains the same phases x steps from the same starting policy with the same seeds and tasks; within a
seed, all arms are scored on the same held-out items, so each arm is compared with static paired per item and per
seed (a two-level bootstrap: seeds, then items). That interval cannot see training's run-to-run noise with a few
seeds; with static_rerun in the bench, every other arm is also compared with static on its own training stream (the
same seed and training randomness: an arm identical to static scores exactly 0), by a t interval over seeds that
counts the run-to-run noise the static runs' spread shows (``metrics.gain_over_stream``; each extra rerun narrows
it): read a claim from that one. Each arm-seed is an
ordinary run directory under the bench folder (``BENCH/<arm>-seed<N>``), resumable with the same command; results
go to ``BENCH/bench.json`` and ``BENCH/bench.md``. ``--tasks FILE`` applies a YAML of config overrides (e.g.
``tasks: {mix: {"1": 1, "4": 3}}``) to every arm, so the same bench runs on other task mixes.

    evotrainer bench runs/bench [--arms static,static_rerun,evotrainer] [--reruns 3] [--seeds 0,1,2] [--phases 3]
                                [--tasks mix.yaml]
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from evotrainer import config as config_mod
from evotrainer.bench.arms import arm_overrides, check_seeds, expand_arms, run_dir_name, static_runs
from evotrainer.console import Reporter
from evotrainer.metrics import gain_over_stream, paired_gain
from evotrainer.report.history import phase_results
from evotrainer.rundir import RunDir


def arm_config(arm: str, seed: int, phases: int, tasks: dict | None, overrides: list[str],
            name: str | None = None) -> config_mod.Config:
    cfg = config_mod.parse({**(tasks or {}), "name": name or f"bench-{arm}-seed{seed}"}, "--tasks")
    return config_mod.apply_overrides(cfg, [f"seed={seed}", f"phases={phases}", *overrides, *arm_overrides(arm)])


def _dotted(data: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_same_settings(rd: RunDir, expected: config_mod.Config) -> None:
    """A run already in the bench folder must have been made with this bench's settings (the phase budget aside:
    raising it trains every arm on; and the run's name, a label), or the arms would no longer share data, model and
    budget: one line if not. So a run made by hand with an arm's settings (``evotrainer init --config``) and copied
    in as ``<arm>-seed<N>`` is one of the bench's runs. A static run never reads the evolving loop's settings (its
    mode aside), so benches that differ only there (``--set evolution.KEY=VALUE``) can share their static runs, copied
    in."""
    have, want = (_dotted(c.model_dump(mode="json")) for c in (rd.load_config(), expected))
    static = have.get("evolution.mode") == want.get("evolution.mode") == "static"
    unread = {k for k in have.keys() | want.keys() if static and k.startswith("evolution.") and k != "evolution.mode"}
    differ = sorted(k for k in have.keys() | want.keys()
                    if k not in ("phases", "name", *unread) and have.get(k) != want.get(k))
    if differ:
        shown = ", ".join(f"{k} {have.get(k)!r} (this bench: {want.get(k)!r})" for k in differ[:3])
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        raise config_mod.ConfigError(f"{rd.root} was made with other settings: {shown}{more}; use a new bench "
                                     "folder, or the --set/--tasks it was made with")


# the events whose ``completions`` are a run's judging, each completion counted in exactly one of them: a race's screen
# arms, a trial's arms (a race's confirmation, with the start's answers when they had to be generated) and a
# counterfactual's
JUDGING_EVENTS = ("race", "trial", "counterfactual")


def run_outcome(rd: RunDir, phases: int) -> dict[str, Any]:
    """What one finished arm-seed run gives the bench: its held-out result after the bench's last phase (a run
    copied in or trained on to more phases is scored there too, so every arm is scored on the same budget), and
    where its time went (the run's wall time without building the starting policy, which is set-up, cached across
    runs; for a longer run, over all of its phases, said in ``phases_trained``)."""
    results = phase_results(rd)
    setup = sum(e.get("seconds", 0.0) for e in rd.events.read("policy"))  # building the starting policy, once
    wall = sum(e.get("wall_time_s", 0.0) for e in rd.events.read("run_done")) - setup
    training = sum(r.wall_time_s for r in results)
    baseline = rd.baseline()
    judging = sum(e.get("completions", 0) for kind in JUDGING_EVENTS for e in rd.events.read(kind)
                  if e.get("phase", 0) <= phases)  # the bench's budget: a longer run's later judging is not counted
    return {"final": results[phases - 1].eval, "accuracy": [r.eval.accuracy for r in results[:phases]],
            "baseline": baseline.accuracy if baseline else None, "wall_s": wall, "training_s": training,
            "phases_trained": len(results),
            "completions": {"phases": sum(r.completions for r in results[:phases]), "judging": judging}}


def train_runs(planned: dict[Path, tuple[str, config_mod.Config]], phases: int, reporter: Reporter
               ) -> dict[Path, dict]:
    """Train every planned run (folder -> (label, config)) to ``phases`` and return each one's outcome
    (:func:`run_outcome`). A folder already there must hold a run made with the same settings (checked for every run
    before anything trains: one line if not, :func:`check_same_settings`); a missing one is initialised; a run
    finished to the budget (state done, ``phases`` results) is reused as it is, anything else is resumed. So a bench
    run twice trains only what the first left unfinished, and a run shared by several comparisons trains once."""
    from evotrainer.run import run

    for root, (_, cfg) in planned.items():  # before training anything: a mismatch fails at once
        if (rd := RunDir(root)).exists():
            check_same_settings(rd, cfg)
    outcomes: dict[Path, dict] = {}
    quiet = Reporter(quiet=True)
    with reporter.progress("bench", len(planned)) as bar:
        for i, (root, (label, cfg)) in enumerate(planned.items()):
            rd = RunDir(root)
            bar(step=i, total=len(planned), stage=label)
            if not rd.exists():
                rd.init(cfg, log=lambda _: None)
            if rd.status().get("state") != "done" or len(phase_results(rd)) < phases:
                run(rd.root, phases=phases, reporter=quiet)
            outcomes[root] = got = run_outcome(rd, phases)
            start = f"{got['baseline']:.1%}" if got["baseline"] is not None else "not measured"
            reporter.info(f"{label}: held-out accuracy {got['final'].accuracy:.1%} (start {start})")
        bar(step=len(planned), total=len(planned))
    return outcomes


def run_bench(out: Path, arms: list[str], seeds: list[int], phases: int, tasks: dict | None = None,
              overrides: list[str] = (), reporter: Reporter | None = None, reruns: int = 1,
              calibration: bool = False, domain: str = "math") -> dict:
    """Run (or resume) every arm for every seed of ``domain`` (with ``reruns`` static runs besides static when
    static_rerun is among the arms), then compare each arm with static; write bench.json/.md. Bench seeds and
    calibration seeds are kept apart (:func:`~evotrainer.bench.arms.check_seeds`)."""
    check_seeds(seeds, calibration)
    reporter = reporter or Reporter()
    arms = expand_arms(arms, reruns)
    t0 = time.time()
    planned = {out / run_dir_name(arm, seed): (f"{arm}, seed {seed}", arm_config(arm, seed, phases, tasks,
                                                                              [f"domain={domain}", *overrides]))
               for seed in seeds for arm in arms}
    out.mkdir(parents=True, exist_ok=True)
    done = train_runs(planned, phases, reporter)
    outcomes = {arm: {seed: done[out / run_dir_name(arm, seed)] for seed in seeds} for arm in arms}
    summary = summarize(outcomes, seeds, phases)
    summary.update(domain=domain, phases=phases, seeds=seeds, calibration=calibration, arm_order=arms,
                   wall_s=round(time.time() - t0, 1), tasks=tasks, overrides=list(overrides))
    (out / "bench.json").write_text(json.dumps(summary, indent=1))
    (out / "bench.md").write_text(markdown(summary))
    return summary


def summarize(outcomes: dict[str, dict[int, dict]], seeds: list[int], phases: int) -> dict:
    """Per arm: final accuracy (mean, per seed), the paired interval against static, the time outside training."""
    arms: dict[str, dict] = {}
    baseline = static_runs(outcomes)  # static and its reruns: the noise-counted comparison needs two at least
    for arm, by_seed in outcomes.items():
        finals = {s: by_seed[s]["final"] for s in seeds}
        wall = sum(by_seed[s]["wall_s"] for s in seeds)
        training = sum(by_seed[s]["training_s"] for s in seeds)
        entry = {"accuracy": sum(f.accuracy for f in finals.values()) / len(seeds),
                 "per_seed": {str(s): finals[s].accuracy for s in seeds}, "wall_s": round(wall, 1),
                 "outside_training": round(1 - training / wall, 3) if wall else None,
                 "completions": {part: sum(by_seed[s].get("completions", {}).get(part, 0) for s in seeds)
                                 for part in ("phases", "judging")}}
        if longer := {str(s): n for s in seeds if (n := by_seed[s].get("phases_trained", 0)) > phases}:
            entry["phases_trained"] = longer  # scored after the bench's last phase; time over all of them
        if arm != "static" and "static" in outcomes:
            entry["vs_static"] = paired_gain([(outcomes["static"][s]["final"].items, finals[s].items)
                                              for s in seeds])
        if arm not in baseline and len(baseline) > 1 and "static" in baseline:
            entry["vs_static_runs"] = gain_over_stream(  # static first: the arms' own training stream
                {s: finals[s].accuracy for s in seeds},
                {s: [outcomes[a][s]["final"].accuracy for a in ["static", *(b for b in baseline if b != "static")]]
                 for s in seeds})
        arms[arm] = entry
    return {"arms": arms}


def interval_text(vs: dict | None) -> str:
    return f"{vs['diff']:+.1%} ({vs['low']:+.1%} to {vs['high']:+.1%})" if vs else "-"


def arm_table(arms: dict[str, dict]) -> list[str]:
    """The arms' table (Markdown lines): accuracy, per seed, minus static (and, with static reruns, minus static on
    the same stream with training noise counted), wall time, share outside training, completions generated."""
    noise = any("vs_static_runs" in e for e in arms.values())
    extra = " minus static, same stream, training noise counted (95% CI) |" if noise else ""
    lines = [f"| arm | held-out accuracy (mean) | per seed | minus static (paired 95% CI) |{extra} wall | outside "
             "training | completions: phases + judging |", "|---|---|---|---|" + ("---|" if noise else "") + "---|---|---|"]
    for arm, e in arms.items():
        per_seed = ", ".join(f"{v:.1%}" for v in e["per_seed"].values())
        cells = [arm, f"{e['accuracy']:.1%}", per_seed, interval_text(e.get("vs_static"))]
        cells += [interval_text(e.get("vs_static_runs"))] if noise else []
        cells += [f"{e['wall_s']:.0f} s", f"{e['outside_training']:.0%}" if e["outside_training"] is not None else "-"]
        done = e.get("completions", {})
        cells += [f"{done.get('phases', 0):,} + {done.get('judging', 0):,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(summary: dict) -> str:
    noise = any("vs_static_runs" in e for e in summary["arms"].values())
    lines = [f"# evotrainer bench: {len(summary['seeds'])} seed(s) x {summary['phases']} phases", "",
             *arm_table(summary["arms"])]
    total = sum(e["wall_s"] for e in summary["arms"].values())
    lines += ["", f"Runs' wall time {total:.0f} s in all (building the starting policy excluded); outside training = "
              "agents, backtests, trials, counterfactuals, the starting policy's evaluation and orchestration (a "
              "phase's own held-out evaluation counts with its training). Completions are every generated completion: "
              "the phases' own (equal across arms by construction) and judging's (A/B trials, counterfactuals), which "
              "the arms' equal step budgets do not count. Paired per held-out task and per seed (all "
              "arms of a seed are scored on the same tasks); the interval bootstraps seeds, then tasks."]
    if reruns := [a for a in static_runs(summary["arms"]) if a != "static"]:
        lines += ["", f"{', '.join(reruns)} {'is' if len(reruns) == 1 else 'are'} static trained again with other "
                  "training randomness: any difference they show is training noise, so an arm's gain means little "
                  "unless it clears theirs."]
    for arm, e in summary["arms"].items():
        for seed, n in e.get("phases_trained", {}).items():
            lines += ["", f"{arm}-seed{seed} trained {n} phases: it is scored after phase {summary['phases']}, like "
                      f"every arm, but its wall and outside-training figures cover all {n}."]
    if noise:
        vs = next(e["vs_static_runs"] for e in summary["arms"].values() if "vs_static_runs" in e)
        runs = static_runs(summary["arms"])
        lines += ["", f"Training noise counted: per seed, an arm is compared with static on the same training stream "
                  f"(an arm identical to static scores exactly 0); the spread of the {len(runs)} static runs "
                  f"({', '.join(runs)}) puts one run's training noise at {vs['run_sd']:.1%} (sd), and a gain, the "
                  f"difference of two runs, carries twice its variance; the interval is a t interval over the "
                  f"{vs['seeds']} seeds pooling that noise with the gains' spread across seeds ({vs['df']} degrees of "
                  "freedom). Read a claim from this column: the paired column resamples tasks and a few seeds, and "
                  "cannot see the noise of training."]
    return "\n".join(lines) + "\n"


def load_tasks(path: Path | None) -> dict | None:
    """The ``--tasks`` file: a YAML mapping of config overrides applied to every arm."""
    if path is None:
        return None
    data = config_mod.read_yaml(path, f"--tasks {path}")
    if not isinstance(data, dict):
        raise config_mod.ConfigError(f"--tasks {path}: expected a mapping of config keys")
    config_mod.parse(data, f"--tasks {path}")  # a wrong key fails here, with its name
    return data
