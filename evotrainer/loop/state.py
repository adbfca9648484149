"""The run's state: everything the loop decides with, typed, checkpointed by LangGraph after every step.

State lives here and only here: the audit log (``events.jsonl``) is written, never read back to decide. The fields
are the data contracts of ``evotrainer.contracts``, validated once when a step makes them; LangGraph stores them
with its msgpack serializer, restricted to the types listed in :data:`STATE_TYPES`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.contracts import (
    BacktestReport,
    Candidate,
    Check,
    Diagnosis,
    EvalResult,
    MetricEvidence,
    PhaseResult,
    Promotion,
)

# the classes the checkpoint may hold (LangGraph's serializer refuses others when strict, warns otherwise)
STATE_TYPES = [BacktestReport, Candidate, Check, Diagnosis, EvalResult, MetricEvidence, PhaseResult, Promotion]


class RunState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    phase: int = Field(0, description="last phase whose training finished")
    results: list[PhaseResult] = Field(default_factory=list, description="one per trained phase")
    diagnoses: list[Diagnosis] = Field(default_factory=list, description="this phase's, after critique")
    evidence_round: int = Field(0, description="times the Critic sent this phase's diagnoses back for evidence")
    engineer_round: int = Field(0, description="Engineer rounds this phase")
    candidates: list[Candidate] = Field(default_factory=list, description="this phase's candidates, every round")
    round_branches: list[str] = Field(default_factory=list, description="the candidates of the latest round")
    reports: list[BacktestReport] = Field(default_factory=list, description="this phase's backtest reports")
    held: dict[str, str] = Field(default_factory=dict, description="passing branches not promoted, and why")
    promotions: list[Promotion] = Field(default_factory=list, description="every promotion of the run")
    round_due: bool = Field(
        False, description="this phase's evolution round has not run yet (set by training, cleared by the diagnosis"
        " or by keep/discard's next edit; it waits after the last phase unless evolution.final_round, and a raised"
        " budget runs it first)")
    feedback: str = Field("", description="a person's request at the gate (--revise), for the Engineer's next round")
    withdrawn: list[str] = Field(default_factory=list, description="branches a person sent back for revision")
    no_effect: dict[str, list[str]] = Field(
        default_factory=dict, description="main sha -> interventions rejected there as 'no effect' (run-level: on "
        "the same main the same edit changes no update again, so the Engineer does not retry it)")
    starts: dict[str, int] = Field(
        default_factory=dict, description="phase -> the earlier phase whose checkpoint it trains from instead of the "
        "previous one (0 = the starting policy): set when a repair is promoted whose trial trained from an earlier "
        "checkpoint, because the last phase had harmed the policy on the dev split or its update overshot "
        "(loop/resume.py; read through start_of)")
    trial_lost: dict[str, list[str]] = Field(
        default_factory=dict, description="main sha -> interventions that lost their A/B trial there (run-level: a "
        "retry on the same main is another draw of the same test, and every draw adds to the chance of promoting "
        "an edit that does not help, so the Engineer does not retry it until main changes)")

    def round_candidates(self) -> list[Candidate]:
        return [c for c in self.candidates if c.branch in self.round_branches]

    def tried(self) -> list[str]:
        """Interventions the Engineer already tried this phase."""
        return [c.intervention for c in self.candidates]


def serializer():
    """LangGraph's checkpoint serializer, allowed to revive exactly the state's types."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer(allowed_msgpack_modules=[(t.__module__, t.__name__) for t in STATE_TYPES])


def start_of(phase: int, starts: dict[str, int] | None = None) -> int:
    """The phase whose checkpoint phase ``phase`` trains from: the previous one, or the earlier one ``starts`` (a
    run state's) names for it; 0 is the starting policy."""
    return (starts or {}).get(str(phase), phase - 1)
