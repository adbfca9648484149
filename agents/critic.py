"""Critic: decides which diagnoses the evidence really supports before anyone edits the harness.

The built-in Critic confirms a diagnosis when its interval clears the threshold (confidence >= 0.8) and it
rests on enough units (groups, rollouts or tasks); it rejects one whose evidence is thin, saying why. A
diagnosis whose estimate crosses the threshold while its interval straddles it is borderline: if evidence
rounds are left, the Critic sends the batch back to the Diagnostician with more phases in view; otherwise it
rejects it as unproven. Confirmed diagnoses are ranked by severity x confidence and capped.
"""

from __future__ import annotations

from agents import Critique, PhaseEvidence
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
        if borderline:
            return Critique(diagnoses=out, needs_more_evidence=True)
        confirmed = sorted((d for d in out if d.status == "confirmed"), key=lambda d: -d.severity * d.confidence)
        for d in confirmed[self.max_confirmed:]:
            d.status, d.critique = "rejected", f"outranked: only the top {self.max_confirmed} go to the Engineer"
        return Critique(diagnoses=out)
