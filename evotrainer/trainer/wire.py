"""The trainer service's wire types: what the run process sends and what it gets back. Client and service share them.

    PhaseRequest   train one phase (or a pilot: a few steps whose rollouts judge an edit) at a harness sha
    EvalRequest    score a checkpoint on the run's held-out split
    PilotResult    what a pilot returns: its rollouts, their figures, and its policy's probe-split score (an A/B
                   trial is main and a candidate piloted with the same seeds and tasks)
    (PhaseResult and EvalResult cross more seams than this one: they live in ``evotrainer.contracts``.)

A request is built from the run's config in one place (:meth:`PhaseRequest.make`, :meth:`EvalRequest.make`) and
carries the config's own sections (training, policy, trainer, sandbox, executor) rather than copies of their fields,
so the request cannot drift from the config: a field's type, bounds and help are declared once, in
``evotrainer/config.py``.
Try it alone: ``python -m evotrainer.trainer.wire`` prints the request the default config makes for phase 1.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.config import Config, PolicyConfig, SandboxConfig, TrainerConfig, TrainingConfig
from evotrainer.domains.execute import ExecLimits
from evotrainer.contracts import EvalResult

HEALTH_WAIT_S = 20  # GET /health waits this long for the service's heavy imports before answering "loading"

# The service's bearer token: read from this variable by the service at start and by the client of a trainer.url;
# a local service gets a fresh one from its run (never on disk, never in the config, which refuses secrets).
TOKEN_ENV = "EVOTRAINER_TRAINER_TOKEN"


def package_dir() -> str:
    """Where this process imported evotrainer from: a local service must run the code of the run that started it
    (``GET /health`` reports it, and the client compares it with its own)."""
    from pathlib import Path

    import evotrainer

    return str(Path(evotrainer.__file__).resolve().parent)


def auth_headers(token: str | None) -> dict[str, str]:
    """The request headers that carry ``token`` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PhaseRequest(_Wire):
    run_dir: str = Field(description="the run directory (the service reads the harness repo and tasks there)")
    phase: int = Field(ge=1, description="phase number (1-based); a finished phase is never trained twice")
    harness_sha: str = Field(description="harness commit to train on")
    init_checkpoint: str = Field(description="model id or path the phase starts from")
    steps: int = Field(ge=1, description="GRPO optimizer steps")
    seed: int = Field(0, description="the run's seed")
    domain: str = Field("math", description="task domain (evaluator-owned tasks and verifier)")
    run_name: str = Field("", description="the run's name: dashboards tag each phase with it")
    step_offset: int = Field(0, ge=0, description="generated batches the run trained before this phase (schedule)")
    run_steps: int = Field(1, ge=1, description="generated batches the run plans in all (the schedule's horizon)")
    reference_checkpoint: str = Field("", description="the KL reference (empty: init_checkpoint)")
    pilot: bool = Field(False, description="a pilot (an A/B trial arm): train from init_checkpoint, keep rollouts, "
                        "score the probe split, save nothing")
    replicate: int = Field(0, ge=0, description="a trial's replicate: shifts the seeds of training and task sampling")
    probe_size: int = Field(0, ge=0, description="a pilot scores this many probe tasks of the dev split")
    counterfactual: bool = Field(
        False, description="a pilot scores the whole dev split instead of the probe (a counterfactual phase)")
    # the run's config sections, as they are (their fields, bounds and help live in evotrainer/config.py only)
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="the config's training section")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="the config's policy section")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="the config's trainer section")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="where and how harness code runs")
    executor: ExecLimits = Field(default_factory=ExecLimits, description="the config's executor section (limits of "
                                 "policy code the rewards' executions run)")

    @classmethod
    def make(cls, cfg: Config, run_dir: str, phase: int, harness_sha: str, init_checkpoint: str, steps: int,
             pilot: bool = False, base_policy: str = "") -> "PhaseRequest":
        """The request for ``phase`` of a run with config ``cfg`` (``base_policy``: the run's starting policy)."""
        per_phase = cfg.training.steps_per_phase
        return cls(
            run_dir=str(run_dir), phase=phase, harness_sha=harness_sha, init_checkpoint=init_checkpoint, steps=steps,
            seed=cfg.seed, domain=cfg.domain, run_name=cfg.name, pilot=pilot, step_offset=(phase - 1) * per_phase,
            run_steps=cfg.phases * per_phase,
            reference_checkpoint=base_policy if cfg.training.kl_reference == "base" else init_checkpoint,
            training=cfg.training, policy=cfg.policy, trainer=cfg.trainer, sandbox=cfg.sandbox, executor=cfg.executor,
        )


class EvalRequest(_Wire):
    run_dir: str = Field(description="the run directory whose split is scored")
    split: Literal["held_out", "dev"] = Field("held_out", description="which of the run's splits to score")
    checkpoint: str = Field(description="model id or path to score")
    domain: str = Field("math", description="task domain")
    training: TrainingConfig = Field(default_factory=TrainingConfig,
                                     description="the config's training section (eval_max_new_tokens, eval_samples)")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="the config's policy section")
    executor: ExecLimits = Field(default_factory=ExecLimits, description="the config's executor section (limits of "
                                 "policy code the verifier runs)")

    @classmethod
    def make(cls, cfg: Config, run_dir: str, checkpoint: str) -> "EvalRequest":
        return cls(run_dir=str(run_dir), checkpoint=checkpoint, domain=cfg.domain, training=cfg.training,
                   policy=cfg.policy, executor=cfg.executor)

    def on(self, split: str) -> "EvalRequest":
        return self.model_copy(update={"split": split})


class PilotResult(_Wire):
    harness_sha: str
    steps: int
    replicate: int = 0
    rollout_path: str
    completions: int = Field(0, description="completions generated while training (every group, kept or not)")
    stats: dict[str, float]
    probe: EvalResult | None = Field(None, description="the trained policy scored on the probe split")
    wall_time_s: float
    sandbox_attempts: list[dict] = Field(
        default_factory=list, description="what harness code tried in the sandbox while training (denied): "
        "{kind, what, where, op}; any rejects a candidate")


if __name__ == "__main__":
    from evotrainer.config import parse

    print(PhaseRequest.make(parse({}), "runs/demo", 1, "0" * 40, "runs/demo/policy/base", 60)
          .model_dump_json(indent=1))
