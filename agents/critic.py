"""Critic: decides which diagnoses the evidence really supports before anyone edits the harness.

The built-in Critic confirms a diagnosis when its interval clears the threshold (confidence >= 0.8) and it
rests on enough units (groups, rollouts or tasks); it rejects one whose evidence is thin, saying why. A
diagnosis whose estimate crosses the threshold while its interval straddles it is borderline: if evidence
rounds are left, the Critic sends the batch back to the Diagnostician with more phases in view; otherwise it
rejects it as unproven. Confirmed diagnoses are ranked (``agents.roles.urgency``, by the registry's tier,
``agents.modes``: a reward that disagrees with the verifier first, then an update that moves the wrong way, then by
severity x confidence) and capped.

:class:`LLMCritic` (``agents.critic.model`` set to an LLM) challenges each diagnosis with its own queries (its system
prompt lists the registry of failure modes), and may propose a diagnostics metric that becomes a gate on later
candidates once validated.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agents.roles import Critique, MetricProposal, PhaseEvidence, urgency
from agents.evidence_tools import EvidenceTools, ToolCall, investigate
from agents.llm import LLMRole, UseBuiltin
from evotrainer.contracts import Diagnosis

MIN_UNITS = 20


class HeuristicCritic:
    name = "heuristic"

    def __init__(self, max_confirmed: int = 4):
        self.max_confirmed = max_confirmed

    def critique(self, diagnoses: list[Diagnosis], evidence: PhaseEvidence, rounds_left: int) -> Critique:
        out: list[Diagnosis] = []
        borderline = False
        for d in diagnoses:
            d = d.model_copy(deep=True)
            n = min((e.n for e in d.evidence), default=0)
            if n < MIN_UNITS:
                d.status, d.critique = "rejected", f"rests on {n} units; at least {MIN_UNITS} are needed"
            elif d.confidence >= 0.8:
                d.status, d.critique = "confirmed", "the 95% interval clears the threshold"
            elif rounds_left > 0:
                borderline = True
                d.status, d.critique = "proposed", "borderline: the interval straddles the threshold"
            else:
                d.status, d.critique = "rejected", "the 95% interval straddles the threshold even with more evidence"
            out.append(d)
        return ranked(out, self.max_confirmed, borderline)


def ranked(out: list[Diagnosis], max_confirmed: int, more_evidence: bool) -> Critique:
    """The critique: back for more evidence, or the top ``max_confirmed`` confirmed, in order of ``urgency``."""
    if more_evidence:
        return Critique(diagnoses=out, needs_more_evidence=True)
    confirmed = sorted((d for d in out if d.status == "confirmed"), key=urgency)
    for d in confirmed[max_confirmed:]:
        d.status, d.critique = "rejected", f"outranked: only the top {max_confirmed} go to the Engineer"
    return Critique(diagnoses=out)


class Verdict(BaseModel):
    id: str = Field(description="the diagnosis id")
    verdict: Literal["confirm", "reject", "revise", "more_evidence"]
    reason: str = Field(min_length=1)
    statement: str = Field("", description="the corrected statement, with verdict 'revise'")
    severity: float | None = Field(None, ge=0, le=1)
    confidence: float | None = Field(None, ge=0, le=1)


class CriticStep(ToolCall):
    verdicts: list[Verdict] = Field(default_factory=list, description="with action 'answer': one per diagnosis")
    metric: MetricProposal | None = Field(None, description="with action 'answer', optionally: a diagnostics "
                                          "metric to add to main as a gate on later candidates")


class LLMCritic(LLMRole):
    """The Critic on an LLM: its own queries over the evidence, then confirm / reject / revise / more evidence.

    A revised diagnosis goes on to the Engineer in its corrected form; ``more_evidence`` sends the batch back to
    the Diagnostician while evidence rounds are left, else the diagnosis is rejected as unproven. The top
    ``max_confirmed`` (severity x confidence) go on. It may also propose one diagnostics metric (``metric``), which
    the loop validates on earlier phases and commits to main as a gate (``evotrainer.loop.new_metric``). Prompt:
    ``agents/prompts/critic.md``.
    """

    role = "critic"

    def __init__(self, ctx, builtin: HeuristicCritic):
        super().__init__(ctx, builtin)
        self.max_confirmed = builtin.max_confirmed

    def critique(self, diagnoses: list[Diagnosis], evidence: PhaseEvidence, rounds_left: int) -> Critique:
        from agents.llm_diagnostician import evidence_brief, history_of, modes_prompt

        if not diagnoses:
            return Critique(diagnoses=[])
        ids = {d.id for d in diagnoses}

        def check(step: CriticStep) -> str | None:
            missing = ids - {v.id for v in step.verdicts}
            extra = {v.id for v in step.verdicts} - ids
            return (f"give one verdict per diagnosis id; missing {sorted(missing)}" if missing else
                    f"unknown diagnosis ids {sorted(extra)}" if extra else None)

        tools = EvidenceTools.from_evidence(evidence, history_of(evidence))
        listing = "\n".join(d.model_dump_json(exclude={"status", "critique"}) for d in diagnoses)
        try:
            conversation = self.conversation(f"critique phase {evidence.phase}", modes_prompt(self.role))
            step = investigate(conversation, tools, CriticStep,
                               f"{evidence_brief(evidence, tools)}\n\nDiagnoses:\n{listing}\n\nEvidence rounds "
                               f"left: {rounds_left}. Challenge each diagnosis.", self.settings.tool_rounds, check)
        except UseBuiltin:
            return self.builtin.critique(diagnoses, evidence, rounds_left)
        finally:
            tools.close()
        verdicts = {v.id: v for v in step.verdicts} if step else {}
        critique = self.apply(diagnoses, verdicts, rounds_left)
        critique.metric = step.metric if step else None
        return critique

    def apply(self, diagnoses: list[Diagnosis], verdicts: dict[str, Verdict], rounds_left: int) -> Critique:
        out, more = [], False
        for d in diagnoses:
            d = d.model_copy(deep=True)
            v = verdicts.get(d.id)
            if v is None:
                d.status, d.critique = "rejected", "the Critic gave no verdict (no model answered)"
            elif v.verdict == "confirm":
                d.status, d.critique = "confirmed", v.reason
            elif v.verdict == "revise":
                d.status, d.critique = "confirmed", f"revised: {v.reason}"
                d.statement = v.statement or d.statement
                d.severity = d.severity if v.severity is None else v.severity
                d.confidence = d.confidence if v.confidence is None else v.confidence
            elif v.verdict == "more_evidence" and rounds_left > 0:
                d.status, d.critique, more = "proposed", f"needs more evidence: {v.reason}", True
            else:
                d.status, d.critique = "rejected", v.reason if v.verdict == "reject" else f"unproven: {v.reason}"
            out.append(d)
        return ranked(out, self.max_confirmed, more)
