"""Backtester: judges each candidate: replay checks on retained rollouts, then an A/B training trial.

The checks themselves are framework code (``evotrainer/judge/checks.py``, run by the loop's ``Testbed``), on the harness
in the sandbox, so no agent can weaken them. The built-in Backtester promotes only when every check passes (the
trial included); the reasons it gives are the failing checks in words.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field

from agents.llm import LLMRole
from evotrainer.contracts import BacktestReport, Candidate


class Testbed(Protocol):
    """What the loop lends the Backtester: every check of a candidate, the A/B trial included."""

    def judge(self, candidate: Candidate) -> BacktestReport: ...


class HeuristicBacktester:
    name = "heuristic"

    def judge(self, candidate: Candidate, testbed: Testbed) -> BacktestReport:
        report = testbed.judge(candidate)
        failing = [c for c in report.checks if not c.passed]
        report.verdict = "reject" if failing else "promote"
        return report


class BacktestVerdict(BaseModel):
    reasons: list[str] = Field(min_length=1, description="what the checks show, in numbers")
    verdict: Literal["promote", "reject"]


class LLMBacktester(LLMRole):
    """The Backtester on an LLM: it reads the checks (the A/B trial included) and writes the verdict's reasons.

    The checks and the trial run exactly as for the built-in Backtester. The model may reject what the checks
    pass, never promote what they fail: a failing check makes the verdict ``reject`` whatever the model says, and
    the failing checks stay in the reasons. Prompt: ``agents/prompts/backtester.md``.
    """

    role = "backtester"

    def judge(self, candidate: Candidate, testbed: Testbed) -> BacktestReport:
        report = self.builtin.judge(candidate, testbed)
        checks = "\n".join(f"{c.name}: main {c.base}, candidate {c.candidate}, threshold {c.threshold}, "
                           f"{'passed' if c.passed else 'FAILED'} {c.detail}" for c in report.checks)
        answer = self.ask_once(
            f"judge {candidate.branch}",
            f"Candidate {candidate.branch}: {candidate.hypothesis}\nVariable: {candidate.variable}; target "
            f"{candidate.target_metric} {candidate.direction}; expected: {candidate.expected}\nNoise floor "
            f"{report.noise_floor}; {report.rollouts} rollouts replayed.\nChecks:\n{checks}\nThe checks alone "
            f"say: {report.verdict} ({'; '.join(report.reasons)}).", BacktestVerdict)
        if answer is None:
            return report
        if report.verdict == "reject":  # the checks failed: never promote; keep their reasons first
            report.reasons = [*report.reasons, *(r for r in answer.reasons if r not in report.reasons)]
        else:
            report.verdict, report.reasons = answer.verdict, answer.reasons
        return report
