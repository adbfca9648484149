"""Librarian: keeps what the run learns about interventions as skills in a Chroma store.

A skill is "when <failure mode> shows up, <intervention> moves <metric>", with its evidence: every candidate
that tried it (commit, backtest verdict and reasons) and, for promoted ones, the realized effect measured after
the next phase trained. Rejections count as uses without a win; a promoted edit wins when its realized effect
moved the targeted metric the promised way without costing held-out accuracy. The Engineer retrieves skills
(by meaning of the diagnosis, filtered by failure mode and domain) before it falls back to its playbook.
"""

from __future__ import annotations

from typing import Any

from evotrainer.contracts import BacktestReport, Candidate, Diagnosis, Skill


class HeuristicLibrarian:
    name = "heuristic"

    def __init__(self, path: str, top_k: int = 3):
        from evotrainer.skills import SkillStore

        self.store = SkillStore(path)
        self.top_k = top_k

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
            self.store.add(Skill(
                id=sid, trigger=f"{failure_mode}: {statement}", failure_mode=failure_mode,
                intervention=candidate.intervention,
                expected_outcome=f"{candidate.target_metric} goes {candidate.direction}; {candidate.hypothesis}",
                validation="backtest on retained rollouts; realized effect after the next phase",
                domains=[domain],
            ))
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
