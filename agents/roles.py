"""What the loop and the five roles exchange: the evidence each role reads and the interface each implements.

The loop builds :class:`PhaseEvidence` and :class:`EngineerContext`; each role (built-in or LLM) implements its
Protocol below and answers with the pydantic contracts of ``evotrainer.contracts``. Kept apart from
``agents/__init__.py`` (which builds the roles) so a role module imports these without importing its builder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

import agents.modes as modes
from evotrainer.contracts import BacktestReport, Candidate, Diagnosis, EvalResult, PhaseResult, Promotion, Skill
from evotrainer.domains.base import Domain
from evotrainer.harness.knobs import Knobs
from evotrainer.harness.repo import HarnessRepo


OBJECTIVE_MODES = modes.of_question("objective")  # the reward disagrees with the verifier (agents/modes.py)
# the update itself overshoots (agents/modes.py): the policy falls on an unchanged harness, or grows certain without
# reward
OVERSHOOT_MODES = modes.of_question("overshoot")


def urgency(d: Diagnosis) -> tuple[int, float]:
    """What a repair must answer first (the Critic's ranking and the Engineer's order, so the trials, which stop at
    the first candidate to pass, judge in it): a reward that disagrees with the verifier, since every signal derived
    from the reward (dead groups and format failures included) is measured against the wrong objective until it is
    fixed, and shaping added on top of it leaves the defect in place; then an update that overshoots (the rollouts'
    own evidence of it, not a fall in accuracy), since every later signal is measured on a policy the step damages
    and shaping added under it trains at the same step; then the rest by severity x confidence. Harm to the policy
    (an accuracy regression) is no tier of its own: it is a symptom, and what answers it depends on its cause (a
    learning rate, or a curriculum that starves the levels that regress). The tier is the registry's
    (``agents.modes``: a mode's ``question`` decides it)."""
    mode = modes.MODES.get(d.failure_mode)  # an unregistered mode (none is emitted; an old run's) ranks with the rest
    return mode.tier if mode else 2, -d.severity * d.confidence


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
    baseline: EvalResult | None = None  # dev result of the starting policy, before any training (decisions read dev)
    start: EvalResult | None = None  # dev result of the checkpoint this phase trained from (None: the phase before's,
    # or the starting policy's for phase 1; see :meth:`start_dev`)
    tasks: dict[str, dict] = field(default_factory=dict)  # the training pool by task id (rules that rebuild the
    # evaluator's view of a training rollout read it: its canonical prompt, its answer cut at the evaluator's budget)
    run_dir: Path | None = None  # the run directory, for tools that read its history (LLM roles)

    @property
    def current(self) -> PhaseResult:
        return self.results[-1]

    def start_dev(self) -> EvalResult | None:
        """The dev result of the checkpoint this phase trained from: ``start`` when the loop gave it (a phase may
        train on from an earlier checkpoint, ``evotrainer/loop/resume.py``), else the phase before's, else the
        starting policy's."""
        if self.start is not None:
            return self.start
        return self.results[-2].dev if len(self.results) >= 2 else self.baseline


class MetricProposal(BaseModel):
    """A diagnostics metric the Critic wants as a gate: added to main's ``diagnostics.py`` once it is validated on
    earlier phases' rollouts (``evotrainer.loop.new_metric``); later candidates that push it past its threshold are
    then rejected by the backtest like any registered diagnostic."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{2,40}$", description="registry name, snake_case")
    help: str = Field(min_length=1, max_length=200, description="what it measures, one line")
    code: str = Field(min_length=10, max_length=4000, description="one Python function `def NAME(rollouts):` "
                      "returning a float from the phase's rollouts (dicts of the harness's rollout view)")
    min: float | None = Field(None, description="alert when the value falls below this")
    max: float | None = Field(None, description="alert when the value rises above this")
    reason: str = Field(min_length=1, max_length=600, description="which failure it guards against, and why now")


@dataclass
class Critique:
    diagnoses: list[Diagnosis]
    needs_more_evidence: bool = False
    metric: MetricProposal | None = None  # a gate the Critic wants on main (validated before it lands)


@dataclass
class EngineerContext:
    phase: int
    round: int
    repo: HarnessRepo
    base_sha: str
    knobs: Knobs
    domain: str
    tried: list[str] = field(default_factory=list)  # interventions already tried this phase (branch names too)
    no_effect: list[str] = field(default_factory=list)  # interventions that changed no update on this main before
    trial_lost: list[str] = field(default_factory=list)  # interventions that lost their A/B trial on this main before
    rejections: dict[str, list[str]] = field(default_factory=dict)  # branch -> reasons its backtest failed
    pilot: bool = False  # whether edits only training can judge (RL knobs) are judged: A/B trials are on
    level_stats: dict[str, dict] = field(default_factory=dict)  # per difficulty level: n, reward_mean, dead ratio
    feedback: str = ""  # what a person said at the gate (`evotrainer approve --revise "..."`): revise with it
    escalation: str = ""  # set after phases in a row with nothing promoted: change layer or propose a subtraction
    avoid_layers: list[str] = field(default_factory=list)  # harness layers edited during that stall
    promotions: list[Promotion] = field(default_factory=list)  # every promotion so far (what a subtraction undoes)
    ceilings: dict[str, float] = field(default_factory=dict)  # knob -> the most it can be here (ceilings_of)


def ceilings_of(results: list) -> dict[str, float]:
    """The most a knob can be on this run, as the last trained phase (a PhaseResult) measured it: for
    max_completion_length, the room its prompts left in the policy's context window (a larger budget fails in the
    trainer). A move never asks for more (``agents.knob_moves``)."""
    room = results[-1].train.get("budget_room") if results else None
    return {"max_completion_length": room} if room else {}


class Diagnostician(Protocol):
    def diagnose(self, evidence: PhaseEvidence) -> list[Diagnosis]: ...


class Critic(Protocol):
    def critique(self, diagnoses: list[Diagnosis], evidence: PhaseEvidence, rounds_left: int) -> Critique: ...


class Engineer(Protocol):
    def propose(self, diagnoses: list[Diagnosis], ctx: EngineerContext, skills: dict[str, list[Skill]]
                ) -> list[Candidate]: ...


class Backtester(Protocol):
    def judge(self, candidate: Candidate, bench: Any) -> BacktestReport: ...


class Librarian(Protocol):
    def retrieve(self, diagnosis: Diagnosis, domain: str) -> list[Skill]: ...

    def record_outcome(self, candidate: Candidate, report: BacktestReport, diagnosis: Diagnosis | None,
                       domain: str) -> None: ...

    def record_effect(self, promotion: dict[str, Any], effect: dict[str, Any], domain: str) -> None: ...
