"""What a person watching ``evotrainer run`` sees: progress bars for long steps and a summary per phase.

Per phase it prints held-out accuracy, the diagnoses (confirmed or rejected, with the Critic's reason), each
candidate edit with its backtest verdict and reasons, and what was promoted to ``main``. Everything printed
here is also in ``events.jsonl``; this module only renders.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table


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
        delta = f" ({acc - prev:+.1%} vs {s.get('previous_label', 'previous')})" if prev is not None else ""
        c.rule(f"[bold]phase {s['phase']}[/bold]  held-out accuracy {acc:.1%}{delta}  (n={s['eval_n']})")
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
        else:
            c.print("diagnoses: none (no rule fired)")
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
