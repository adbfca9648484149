"""The five specialists of the evolution step, one module each, behind typed role interfaces.

    diagnostician.py   rollouts + history          -> Diagnosis[] with evidence
    critic.py          Diagnosis[] + evidence      -> confirmed / rejected (or: needs more evidence)
    engineer.py        confirmed Diagnosis[]       -> Candidate[] (one single-variable commit each)
    backtester.py      Candidate + retained rollouts -> BacktestReport (verdict promote | reject)
    librarian.py       outcomes                    -> Skills in Chroma; realized effect of promoted edits

Each role is picked by ``agents.<role>.model`` in the config. ``heuristic`` is the built-in deterministic
implementation (offline, no LLM). The interfaces take and return the pydantic contracts of
``evotrainer.contracts``, never free text, so an LLM-backed implementation can stand in for any role.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from evotrainer.config import Config
from evotrainer.contracts import BacktestReport, Candidate, Diagnosis, EvalResult, PhaseResult, Skill
from evotrainer.domains.base import Domain
from evotrainer.harness import HarnessRepo, Knobs


@dataclass
class PhaseEvidence:
    """What the Diagnostician and the Critic read about the phase that just trained."""

    phase: int
    results: list[PhaseResult]
    rollouts: list[dict]
    phases_in_view: list[int]
    registry: dict[str, dict]
    knobs: Knobs
    domain: Domain
    last_promotion: dict[str, Any] | None = None
    baseline: EvalResult | None = None  # held-out result of the starting policy, before any training

    @property
    def current(self) -> PhaseResult:
        return self.results[-1]


@dataclass
class Critique:
    diagnoses: list[Diagnosis]
    needs_more_evidence: bool = False


@dataclass
class EngineerContext:
    phase: int
    round: int
    repo: HarnessRepo
    base_sha: str
    knobs: Knobs
    domain: str
    tried: list[str] = field(default_factory=list)  # interventions already tried this phase (branch names too)
    rejections: dict[str, list[str]] = field(default_factory=dict)  # branch -> reasons its backtest failed
    pilot: bool = False  # whether RL-knob edits can be judged (pilot runs on)
    level_stats: dict[str, dict] = field(default_factory=dict)  # per difficulty level: n, reward_mean, dead ratio


class Diagnostician(Protocol):
    def diagnose(self, evidence: PhaseEvidence) -> list[Diagnosis]: ...


class Critic(Protocol):
    def critique(self, diagnoses: list[Diagnosis], evidence: PhaseEvidence, rounds_left: int) -> Critique: ...


class Engineer(Protocol):
    def propose(self, diagnoses: list[Diagnosis], ctx: EngineerContext, skills: dict[str, list[Skill]]
                ) -> list[Candidate]: ...


class Backtester(Protocol):
    def judge(self, candidate: Candidate, bench: Any, needs_pilot: bool) -> BacktestReport: ...


class Librarian(Protocol):
    def retrieve(self, diagnosis: Diagnosis, domain: str) -> list[Skill]: ...

    def record_outcome(self, candidate: Candidate, report: BacktestReport, diagnosis: Diagnosis | None,
                       domain: str) -> None: ...

    def record_effect(self, promotion: dict[str, Any], effect: dict[str, Any], domain: str) -> None: ...


@dataclass
class Agents:
    diagnostician: Diagnostician
    critic: Critic
    engineer: Engineer
    backtester: Backtester
    librarian: Librarian


def build_agents(cfg: Config, skills_path: str) -> Agents:
    """Pick each role's implementation from ``agents.<role>.model``."""
    from agents.backtester import HeuristicBacktester
    from agents.critic import HeuristicCritic
    from agents.diagnostician import HeuristicDiagnostician
    from agents.engineer import HeuristicEngineer
    from agents.librarian import HeuristicLibrarian

    builtin = {
        "diagnostician": HeuristicDiagnostician,
        "critic": lambda: HeuristicCritic(max_confirmed=cfg.evolution.max_diagnoses),
        "engineer": lambda: HeuristicEngineer(max_candidates=cfg.evolution.max_candidates),
        "backtester": HeuristicBacktester,
        "librarian": lambda: HeuristicLibrarian(skills_path, top_k=cfg.skills.top_k),
    }
    # config validation admits only 'heuristic' for now; the LLM-backed roles plug in here by model name
    return Agents(**{role: make() for role, make in builtin.items()})
