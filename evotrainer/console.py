"""What a person watching ``evotrainer run`` sees: progress bars for long steps and a summary per phase.

Per phase it prints held-out accuracy (and its tolerant score, which forgives formatting slips), the diagnoses
(confirmed or rejected, with the Critic's reason), each candidate edit with its backtest verdict and reasons, and
what was promoted to ``main``. :func:`summarize` turns the run's state into that summary (also logged as the
``phase_summary`` event); this module only renders.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from evotrainer.contracts import EvalResult

if TYPE_CHECKING:
    from evotrainer.loop.state import RunState


def summarize(state: RunState, effects: list[dict], baseline: EvalResult | None) -> dict:
    """The phase summary of ``state`` (printed by :meth:`Reporter.phase_summary`, logged as ``phase_summary``)."""
    from evotrainer.metrics import accuracy_change

    results = state.results
    cur = results[-1]
    prev_eval = results[-2].eval if len(results) > 1 else baseline
    prev = prev_eval.accuracy if prev_eval else None
    change = accuracy_change(prev_eval, cur.eval) if prev_eval else None
    tolerant, prev_tolerant = cur.eval.tolerant(), prev_eval.tolerant() if prev_eval else None
    promoted = [{"branch": p.branch, "main_sha": p.main_sha, "hypothesis": p.candidate.hypothesis}
                for p in state.promotions if p.phase == state.phase]
    by_branch = {c.branch: c for c in state.candidates}
    cands = []
    for r in state.reports:
        c = by_branch.get(r.branch)
        verdict = f"passed, not promoted ({state.held[r.branch]})" if r.branch in state.held else r.verdict
        cands.append({"branch": r.branch, "verdict": verdict, "reasons": r.reasons,
                      "variable": c.variable if c else "", "intervention": c.intervention if c else ""})
    return {
        "phase": state.phase, "accuracy": cur.eval.accuracy, "previous_accuracy": prev, "eval_n": cur.eval.n,
        "change": change, "tolerant_accuracy": tolerant.accuracy if tolerant else None,
        "tolerant_change": accuracy_change(prev_tolerant, tolerant) if tolerant and prev_tolerant else None,
        "dev_accuracy": cur.dev.accuracy, "dev_n": cur.dev.n,
        "previous_label": "previous" if len(results) > 1 else "start",
        "by_difficulty": cur.eval.by_difficulty, "harness_sha": cur.harness_sha, "train_s": cur.wall_time_s,
        "reward_mean": cur.train.get("reward_mean", 0.0), "dead_group_ratio": cur.train.get("dead_group_ratio", 0.0),
        "kept_fraction": cur.train.get("kept_fraction", 0.0), "truncation_rate": cur.train.get("truncation_rate", 0.0),
        "diagnoses": [d.model_dump(include={"id", "layer", "failure_mode", "statement", "status", "critique"})
                      for d in state.diagnoses],
        "candidates": cands, "promoted": promoted, "effects": effects,
    }


def tolerant_line(accuracy: float, change: dict | None = None, against: str = "previous") -> str:
    """The held-out score under the domain's tolerant verdict, as the console says it (reports only)."""
    moved = f" ({change['change']:+.1%} vs {against}, 95% CI {change['low']:+.1%} to {change['high']:+.1%})" \
        if change else ""
    return (f"held-out tolerant score {accuracy:.1%}{moved}: formatting slips forgiven (Domain.verify_tolerant: a "
            "trailing period, spaces), never another answer; reports only")


class Reporter:
    def __init__(self, console: Console | None = None, quiet: bool = False):
        self.console = console or Console()
        self.quiet = quiet

    def info(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, highlight=False)

    @contextlib.contextmanager
    def progress(self, label: str, total: int | None = None) -> Iterator[Any]:
        """A progress bar; the yielded callable takes the service's progress dict or (completed, total)."""
        if self.quiet:
            yield lambda *a, **k: None
            return
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=self.console, transient=True) as bar:
            task = bar.add_task(label, total=total)

            def update(p: dict | None = None, **kw: Any) -> None:
                p = {**(p or {}), **kw}
                desc = label + (f" [{p['stage']}]" if p.get("stage") else "")
                bar.update(task, completed=p.get("step", 0), total=p.get("total", total), description=desc)

            yield update

    def phase_summary(self, s: dict[str, Any]) -> None:
        if self.quiet:
            return
        c = self.console
        acc = s["accuracy"]
        prev = s.get("previous_accuracy")
        ch = s.get("change")
        ci = f", 95% CI {ch['low']:+.1%} to {ch['high']:+.1%}{' paired' if ch['method'] == 'paired bootstrap' else ''}" if ch else ""
        delta = f" ({acc - prev:+.1%} vs {s.get('previous_label', 'previous')}{ci})" if prev is not None else ""
        c.rule(f"[bold]phase {s['phase']}[/bold]  held-out accuracy {acc:.1%}{delta}  (n={s['eval_n']})")
        if s.get("tolerant_accuracy") is not None:
            c.print(tolerant_line(s["tolerant_accuracy"], s.get("tolerant_change"),
                                  s.get("previous_label", "previous")), highlight=False)
        c.print(f"dev accuracy {s['dev_accuracy']:.1%} (n={s['dev_n']}): what the loop's decisions read; the held-out "
                "split above only reports", highlight=False)
        c.print(f"trained on main@{s['harness_sha'][:8]} in {s['train_s']:.0f} s: reward {s['reward_mean']:.3f}, "
                f"dead groups {s['dead_group_ratio']:.0%}, kept {s['kept_fraction']:.0%}, "
                f"truncated {s['truncation_rate']:.0%}", highlight=False)
        if s["diagnoses"]:
            t = Table(title="diagnoses", show_lines=False, expand=True)
            for col in ("id", "layer/mode", "statement", "status"):
                t.add_column(col, overflow="fold")
            for d in s["diagnoses"]:
                t.add_row(d["id"], f"{d['layer']}/{d['failure_mode']}", d["statement"],
                          f"{d['status']}: {d['critique']}")
            c.print(t)
        elif s.get("mode", "evolve") != "evolve":  # the baselines never diagnose: say so, not "nothing found"
            c.print(f"diagnoses: not made (evolution.mode {s['mode']}: no Diagnostician runs)")
        elif s.get("round_waits"):  # the last phase: no round unless a later phase would train on it
            c.print("diagnoses: not made yet: after the last phase the round waits until a later phase would train "
                    "on it (`evotrainer run --phases N` raises the budget; evolution.final_round runs it now)")
        else:
            c.print("diagnoses: none (the Diagnostician named none, and no built-in rule fired)")
        if s["candidates"]:
            t = Table(title="candidate harness edits", expand=True)
            for col in ("branch", "edit", "verdict", "reasons"):
                t.add_column(col, overflow="fold")
            for k in s["candidates"]:
                t.add_row(k["branch"], f"{k['variable']} ({k['intervention']})", k["verdict"],
                          "; ".join(k["reasons"]))
            c.print(t)
        if s["promoted"]:
            for p in s["promoted"]:
                c.print(f"[green]promoted[/green] {p['branch']} -> main@{p['main_sha'][:8]}: {p['hypothesis']}",
                        highlight=False)
        else:
            c.print("promoted: nothing (main unchanged)")
        for e in s.get("effects", []):
            c.print(f"realized effect of {e['branch']}: {e['summary']}", highlight=False)
