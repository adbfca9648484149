"""What the loop's steps use besides the state: the run directory, config, trainer, agents, console and evidence.

A :class:`Runtime` is made once per ``evotrainer run`` process (``evotrainer/run.py``); nothing in it is state
that must survive a kill (that is :class:`~evotrainer.loop.state.RunState`): the evidence cache is rebuilt from
disk on demand after a resume.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents import Agents
from evotrainer.config import Config
from evotrainer.console import Reporter
from evotrainer.contracts import EvalResult
from evotrainer.harness.repo import HarnessRepo
from evotrainer.loop.evidence import EvidenceCache
from evotrainer.loop.state import start_of
from evotrainer.rundir import RunDir
from evotrainer.trainer.client import TrainerClient
from evotrainer.trainer.wire import PhaseRequest


def none_follows(cfg: Config, phase: int) -> bool:
    """Whether no phase trains after ``phase`` (the run's last, unless ``evolution.final_round`` keeps a round after
    it): an edit promoted, or rolled back, then reaches no training."""
    return phase >= cfg.phases and not cfg.evolution.final_round


@dataclass
class Runtime:
    rd: RunDir
    cfg: Config
    trainer: TrainerClient
    agents: Agents
    reporter: Reporter
    base_policy: str
    baseline: EvalResult | None = None  # held-out result of the starting policy ("phase 0"): reports only
    baseline_dev: EvalResult | None = None  # its dev result: what decisions compare with
    repo: HarnessRepo = field(init=False)
    evidence: EvidenceCache = field(init=False)

    def __post_init__(self) -> None:
        self.repo = HarnessRepo(self.rd.harness)
        self.evidence = EvidenceCache(self.rd, self.repo, self.cfg)

    def emit(self, kind: str, **fields: Any) -> None:
        self.rd.events.emit(kind, **fields)

    def checkpoint_for(self, phase: int, starts: dict[str, int] | None = None) -> str:
        """What phase ``phase`` starts from: the previous phase's checkpoint, or the base policy; with ``starts``
        (the run state's), the earlier checkpoint a promoted repair trains on from."""
        return self.checkpoint_of(start_of(phase, starts))

    def checkpoint_of(self, phase: int) -> str:
        """Phase ``phase``'s checkpoint; the starting policy for 0."""
        return str(self.rd.checkpoint(phase)) if phase > 0 else self.base_policy

    def request(self, phase: int, sha: str, steps: int, init: str | None = None, pilot: bool = False
                ) -> PhaseRequest:
        return PhaseRequest.make(self.cfg, str(self.rd.root), phase, sha, init or self.checkpoint_for(phase), steps,
                                 pilot=pilot, base_policy=self.base_policy)

    def close(self) -> None:
        self.evidence.close()
