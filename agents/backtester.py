"""Backtester: judges each candidate on retained rollouts (and a pilot run when the change needs one).

The checks themselves are framework code (``evotrainer/backtest.py``), run on the harness in the sandbox, so
no agent can weaken them. The built-in Backtester asks for a pilot when the intervention's effect cannot be
seen on fixed completions (an RL knob such as temperature), runs the checks, and promotes only when every
check passes; the reasons it gives are the failing checks in words.
"""

from __future__ import annotations

from typing import Protocol

from evotrainer.contracts import BacktestReport, Candidate


class Bench(Protocol):
    """What the graph lends the Backtester: the replay checks and, when enabled, pilot runs."""

    pilots_enabled: bool

    def pilot(self, candidate: Candidate) -> dict: ...

    def checks(self, candidate: Candidate, pilot: dict | None) -> BacktestReport: ...


class HeuristicBacktester:
    name = "heuristic"

    def judge(self, candidate: Candidate, bench: Bench, needs_pilot: bool) -> BacktestReport:
        pilot = bench.pilot(candidate) if needs_pilot and bench.pilots_enabled else None
        report = bench.checks(candidate, pilot)
        failing = [c for c in report.checks if not c.passed]
        report.verdict = "reject" if failing or (needs_pilot and pilot is None) else "promote"
        if needs_pilot and pilot is None:
            report.reasons = [*report.reasons, "needs a pilot run, and pilots are off (backtest.pilot_steps = 0)"]
        return report
