"""The demo: what the product is for, on a seed harness with one catalogue defect, against that faulty seed left alone.

``evotrainer demo RUN_DIR [--domain NAME]`` plants a defect of the domain's catalogue
(``harness_repo/faults/<domain>/``; :func:`default_fault` unless ``--fault`` names another, or ``none`` for the clean
seed) in its seed harness, says so plainly, and runs the loop from it in RUN_DIR, with the console showing the
diagnoses, the candidate repairs, the trials and what was promoted. The agents are not told the defect: they see the
rollouts, as with any harness. Then the same faulty seed is trained with its harness never edited (``RUN_DIR-static``:
the same seed, tasks and training streams, the bench's static arm), and the demo prints both held-out accuracies and
their difference, paired per held-out task, with its interval, strict and under the tolerant score (formatting slips
forgiven: what was learned beyond the answer's form). Both run directories can be inspected and resumed like any run; a
second ``evotrainer demo`` reuses them. Both train at the fault bench's short budget (``bench.faults.BUDGET``: phases of
60 steps, judged as in the fault bench), so the demo finishes in minutes; a run at the defaults trains 2 x 300 steps.

Alone (after a demo ran): ``python -m evotrainer.demo runs/demo`` prints the comparison again.
"""

from __future__ import annotations

import sys
from pathlib import Path

from evotrainer.metrics import paired_gain
from evotrainer.report.history import phase_results
from evotrainer.rundir import RunDir



def default_fault(domain: str) -> str:
    """The defect the demo plants in ``domain``'s seed unless told: its registration's ``demo_fault`` (none: the clean
    seed)."""
    from evotrainer.domains import spec

    return spec(domain).demo_fault or "none"


DEFAULT_FAULT = default_fault("math")  # what `make demo` plants (a reward that credits answers the verifier rejects)


def static_dir(run_dir: Path) -> Path:
    """Where the demo trains the faulty seed with its harness never edited: beside RUN_DIR."""
    return run_dir.with_name(f"{run_dir.name}-static")


def what_is_wrong(fault: str) -> str:
    """The card's first paragraph under "What is wrong", on one line: what the demo tells the user."""
    from evotrainer.harness import faults

    text = faults.card(fault).split("## What is wrong", 1)[-1].strip().split("\n\n", 1)[0]
    return " ".join(text.split())


def comparison(run_dir: Path) -> dict:
    """Held-out accuracy of the evolved run and of the faulty seed left alone after the same phases, and the
    difference paired per held-out task (``metrics.paired_gain``: ``diff``, ``low``, ``high``); under ``tolerant``
    the same figures on the tolerant score (``EvalResult.tolerant``), None when a run did not measure it."""
    evolved, static = phase_results(RunDir(run_dir)), phase_results(RunDir(static_dir(run_dir)))
    phases = min(len(evolved), len(static))
    if not phases:
        raise ValueError(f"{run_dir} and {static_dir(run_dir)} need a trained phase each to be compared")
    a, b = static[phases - 1].eval, evolved[phases - 1].eval
    start = RunDir(run_dir).baseline()
    out = {"phases": phases, "start": start.accuracy if start else None, "static": a.accuracy,
           "evotrainer": b.accuracy, "gain": paired_gain([(a.items, b.items)]), "tolerant": None}
    ta, tb, t0 = a.tolerant(), b.tolerant(), start.tolerant() if start else None
    if ta and tb:
        out["tolerant"] = {"start": t0.accuracy if t0 else None, "static": ta.accuracy, "evotrainer": tb.accuracy,
                           "gain": paired_gain([(ta.items, tb.items)])}
    return out


def summary_lines(run_dir: Path, fault: str) -> list[str]:
    """What the demo prints last: both runs' held-out accuracy and the paired difference, strict and tolerant."""
    c = comparison(run_dir)
    g = c["gain"]
    start = f"{c['start']:.1%} at the start; " if c["start"] is not None else ""
    lines = [f"demo summary (the seed harness had a planted defect, {fault}): held-out accuracy after {c['phases']} "
             f"phases: {start}EvoTrainer {c['evotrainer']:.1%}, the faulty seed left alone {c['static']:.1%} "
             f"({static_dir(run_dir)})",
             f"  EvoTrainer minus the faulty seed: {g['diff']:+.1%} (95% CI {g['low']:+.1%} to {g['high']:+.1%}, "
             f"paired on {g['n']} held-out tasks)"]
    if t := c["tolerant"]:
        g = t["gain"]
        start = f"{t['start']:.1%} at the start; " if t["start"] is not None else ""
        lines.append(f"  tolerant score (formatting slips such as a trailing period forgiven; reports only): {start}"
                     f"EvoTrainer {t['evotrainer']:.1%}, left alone {t['static']:.1%}, difference {g['diff']:+.1%} "
                     f"(95% CI {g['low']:+.1%} to {g['high']:+.1%})")
    return lines


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/demo")
    print("\n".join(summary_lines(root, RunDir(root).load_config().fault or "none")))
