"""Librarian: keeps what the run learns about interventions as skills in a Chroma store.

A skill is "when <failure mode> shows up, <intervention> moves <metric>", with its evidence: every candidate
that tried it (commit, backtest verdict and reasons) and, for promoted ones, the realized effect measured after
the next phase trained. Rejections count as uses without a win; a promoted edit wins when its realized effect
raised dev accuracy beyond the paired margin of its counterfactual (the old main trained from the same
checkpoint with the same seeds: ``evotrainer.loop.effect.realized_effect``; with ``evolution.counterfactual``
off, when the metric moved as promised and accuracy rose beyond the unpaired margin between consecutive phases).
The Engineer retrieves skills (by meaning of the diagnosis, filtered by failure mode and domain) before it falls
back to its playbook.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, Field

from agents.llm import LLMRole
from evotrainer.contracts import BacktestReport, Candidate, Diagnosis, Skill


class HeuristicLibrarian:
    name = "heuristic"

    def __init__(self, path: str, top_k: int = 3):
        from evotrainer.skills import SkillStore

        self.store = SkillStore(path)
        self.top_k = top_k
        self.describe: Callable[..., Skill] | None = None  # writes a new skill's text (the LLM Librarian's)

    @staticmethod
    def skill_id(failure_mode: str, intervention: str) -> str:
        return f"{failure_mode}:{intervention}"

    def retrieve(self, diagnosis: Diagnosis, domain: str) -> list[Skill]:
        if len(self.store) == 0:
            return []
        hits = self.store.search(diagnosis.statement, failure_mode=diagnosis.failure_mode, domain=domain,
                                 k=self.top_k)
        return [skill for skill, _ in hits]

    def _ensure(self, candidate: Candidate, failure_mode: str, statement: str, domain: str) -> str:
        sid = self.skill_id(failure_mode, candidate.intervention)
        if self.store.get(sid) is None:
            skill = Skill(
                id=sid, trigger=f"{failure_mode}: {statement}", failure_mode=failure_mode,
                intervention=candidate.intervention,
                expected_outcome=f"{candidate.target_metric} goes {candidate.direction}; {candidate.hypothesis}",
                validation="backtest on retained rollouts; realized effect after the next phase",
                domains=[domain],
            )
            self.store.add(self.describe(skill, candidate, statement, domain) if self.describe else skill)
        return sid

    def _recorded(self, sid: str, commit: str, verdict: str) -> bool:
        """Whether this commit's outcome is already counted (a node re-run after a kill must not count twice)."""
        skill = self.store.get(sid)
        return bool(skill) and any(e.get("commit") == commit and e.get("verdict") == verdict for e in skill.evidence)

    def record_outcome(self, candidate: Candidate, report: BacktestReport, diagnosis: Diagnosis | None,
                       domain: str) -> None:
        """A backtest verdict: a rejection is a use without a win; a pass waits for its realized effect."""
        failure_mode = diagnosis.failure_mode if diagnosis else "unknown"
        sid = self._ensure(candidate, failure_mode, diagnosis.statement if diagnosis else "", domain)
        if report.verdict == "reject" and not self._recorded(sid, candidate.sha, "reject"):
            self.store.record_use(sid, won=False, evidence={
                "commit": candidate.sha, "branch": candidate.branch, "verdict": "reject",
                "reasons": report.reasons[:3]})

    def record_effect(self, promotion: dict[str, Any], effect: dict[str, Any], domain: str) -> None:
        candidate = Candidate.model_validate(promotion["candidate"])
        sid = self._ensure(candidate, promotion.get("failure_mode", "unknown"), promotion.get("statement", ""),
                           domain)
        if self._recorded(sid, candidate.sha, "promote"):
            return
        self.store.record_use(sid, won=bool(effect["won"]), evidence={
            "commit": candidate.sha, "branch": candidate.branch, "verdict": "promote", **effect})


HOW = "how"  # the evidence entry holding the LLM Librarian's text of how to make the edit again


def how_of(skill: Skill) -> str:
    """How to make the skill's edit again, in the LLM Librarian's words ("" for a skill the built-in one wrote)."""
    return next((str(e[HOW]) for e in skill.evidence if e.get(HOW)), "")


class SkillDraft(BaseModel):
    trigger: str = Field(min_length=1)
    intervention: str = Field(min_length=1, description="what to change, precisely enough to do it again")
    expected: str = Field(min_length=1)
    validation: str = Field(min_length=1)
    applicability: list[str] = Field(min_length=1, description="domains and settings where it should hold")


class LLMLibrarian(LLMRole):
    """The Librarian on an LLM: it writes each new skill's text (trigger, intervention, expected, validation,
    applicability) from the candidate, its diagnosis and its backtest; uses, wins and evidence are counted as by the
    built-in Librarian, whose store and retrieval (what the Engineer receives) it shares. The intervention text is
    kept in the skill's evidence (:func:`how_of`), since ``Skill.intervention`` is the name the Engineers match on;
    the LLM Engineer's request shows it. Prompt:
    ``agents/prompts/librarian.md``.
    """

    role = "librarian"

    def __init__(self, ctx, builtin: HeuristicLibrarian):
        super().__init__(ctx, builtin)
        builtin.describe = self.describe  # new skills get the model's text

    def retrieve(self, diagnosis: Diagnosis, domain: str) -> list[Skill]:
        return self.builtin.retrieve(diagnosis, domain)

    def record_outcome(self, candidate: Candidate, report: BacktestReport, diagnosis: Diagnosis | None,
                       domain: str) -> None:
        self._report = report
        self.builtin.record_outcome(candidate, report, diagnosis, domain)

    def record_effect(self, promotion: dict[str, Any], effect: dict[str, Any], domain: str) -> None:
        self._report = None
        self.builtin.record_effect(promotion, effect, domain)

    def describe(self, skill: Skill, candidate: Candidate, statement: str, domain: str) -> Skill:
        report = getattr(self, "_report", None)
        outcome = (f"backtest {report.verdict}: {'; '.join(report.reasons)}" if report else "promoted")
        draft = self.ask_once(
            f"skill {skill.id}",
            f"Diagnosis ({skill.failure_mode}): {statement}\nCandidate {candidate.branch}: {candidate.hypothesis}"
            f"\nVariable {candidate.variable}; intervention {candidate.intervention}; target "
            f"{candidate.target_metric} {candidate.direction}; expected {candidate.expected}\nOutcome: {outcome}"
            f"\nDomain: {domain}. Write the skill.", SkillDraft)
        if draft is None:
            return skill
        return skill.model_copy(update={
            "trigger": draft.trigger, "expected_outcome": draft.expected, "validation": draft.validation,
            "domains": sorted({domain, *draft.applicability}),
            "evidence": [*skill.evidence, {HOW: draft.intervention}]})
