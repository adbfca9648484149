"""The trainer service's wire types: what the run process sends and what it gets back. Client and service share them.

    PhaseRequest   train one phase (or a pilot: a few steps whose rollouts judge an edit) at a harness sha
    EvalRequest    score a checkpoint on the run's held-out split
    PilotResult    what a pilot returns: its rollouts, their figures, and its policy's probe-split score (an A/B
                   trial is main and a candidate piloted with the same seeds and tasks)
    (PhaseResult and EvalResult cross more seams than this one: they live in ``evotrainer.contracts``.)

A request is built from the run's config in one place (:meth:`PhaseRequest.make`, :meth:`EvalRequest.make`), so the
request cannot drift from the config; the sandbox settings travel as the config's own ``sandbox`` section.
Try it alone: ``python -m evotrainer.trainer.wire`` prints the request the default config makes for phase 1.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.config import Config, SandboxConfig
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
    prompts_per_step: int = Field(ge=1, description="prompts per step (each gets a group of completions)")
    seed: int = Field(0, description="the run's seed")
    rerun: int = Field(0, ge=0, description="training's randomness on top of the seed (training.rerun)")
    domain: str = Field("math", description="task domain (evaluator-owned tasks and verifier)")
    device: str = Field("auto", description="auto, cpu or cuda")
    dtype: str = Field("auto", description="auto, float32 or bfloat16")
    lora: bool = Field(False, description="train a LoRA adapter instead of all weights")
    lora_rank: int = Field(16, ge=1, description="LoRA rank")
    chat: str = Field("auto", description="prompts through the tokenizer's chat template: auto, on or off")
    eval_max_new_tokens: int = Field(16, ge=1, description="generation budget of the held-out evaluation")
    eval_samples: int = Field(0, ge=0, description="held-out decoding: 0 = greedy, k = sampled pass@1 with k samples")
    threads: int = Field(0, ge=0, description="torch CPU threads (0 = all cores)")
    step_offset: int = Field(0, ge=0, description="generated batches the run trained before this phase (schedule)")
    run_steps: int = Field(1, ge=1, description="generated batches the run plans in all (the schedule's horizon)")
    carry_optimizer: bool = Field(True, description="start from the optimizer state saved with init_checkpoint")
    reference_checkpoint: str = Field("", description="the KL reference (empty: init_checkpoint)")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="where and how harness code runs")
    pilot: bool = Field(False, description="a pilot (an A/B trial arm): train from init_checkpoint, keep rollouts, "
                        "score the probe split, save nothing")
    replicate: int = Field(0, ge=0, description="a trial's replicate: shifts the seeds of training and task sampling")
    probe_size: int = Field(0, ge=0, description="a pilot scores this many probe tasks from the training pool")
    held_out: bool = Field(False, description="a pilot scores the held-out split instead (a counterfactual phase)")
    report_to: list[str] = Field(default_factory=list, description="dashboards TRL reports to (training.report_to)")
    generation: str = Field("hf", description="rollout generation: hf or vllm (trainer.generation)")
    vllm_gpu_memory_utilization: float = Field(0.3, description="GPU memory share of the colocated vLLM engine")
    run_name: str = Field("", description="the run's name: dashboards tag each phase with it")
    processes: int = Field(1, ge=1, description="processes that train the phase together (trainer.processes)")
    accelerate_args: list[str] = Field(default_factory=list, description="more flags for `accelerate launch`")

    @classmethod
    def make(cls, cfg: Config, run_dir: str, phase: int, harness_sha: str, init_checkpoint: str, steps: int,
             pilot: bool = False, base_policy: str = "") -> "PhaseRequest":
        """The request for ``phase`` of a run with config ``cfg`` (``base_policy``: the run's starting policy)."""
        per_phase = cfg.training.steps_per_phase
        return cls(
            run_dir=str(run_dir), phase=phase, harness_sha=harness_sha, init_checkpoint=init_checkpoint, steps=steps,
            prompts_per_step=cfg.training.prompts_per_step, seed=cfg.seed, rerun=cfg.training.rerun, domain=cfg.domain,
            device=cfg.policy.device, dtype=cfg.policy.dtype, lora=cfg.policy.lora, lora_rank=cfg.policy.lora_rank,
            chat=cfg.policy.chat, eval_max_new_tokens=cfg.training.eval_max_new_tokens, threads=cfg.training.threads,
            eval_samples=cfg.training.eval_samples,
            report_to=list(cfg.training.report_to), run_name=cfg.name, generation=cfg.trainer.generation,
            vllm_gpu_memory_utilization=cfg.trainer.vllm_gpu_memory_utilization,
            processes=cfg.trainer.processes, accelerate_args=list(cfg.trainer.accelerate_args),
            sandbox=cfg.sandbox, pilot=pilot, step_offset=(phase - 1) * per_phase, run_steps=cfg.phases * per_phase,
            carry_optimizer=cfg.training.carry_optimizer,
            reference_checkpoint=base_policy if cfg.training.kl_reference == "base" else init_checkpoint,
        )


class EvalRequest(_Wire):
    run_dir: str = Field(description="the run directory whose held-out split is scored")
    checkpoint: str = Field(description="model id or path to score")
    domain: str = Field("math", description="task domain")
    max_new_tokens: int = Field(16, ge=1, description="generation budget")
    samples: int = Field(0, ge=0, description="0 = greedy, k = sampled pass@1 with k samples per task")
    device: str = Field("auto", description="auto, cpu or cuda")
    dtype: str = Field("auto", description="auto, float32 or bfloat16")
    chat: str = Field("auto", description="prompts through the tokenizer's chat template: auto, on or off")

    @classmethod
    def make(cls, cfg: Config, run_dir: str, checkpoint: str) -> "EvalRequest":
        return cls(run_dir=str(run_dir), checkpoint=checkpoint, domain=cfg.domain,
                   max_new_tokens=cfg.training.eval_max_new_tokens, device=cfg.policy.device, dtype=cfg.policy.dtype,
                   samples=cfg.training.eval_samples, chat=cfg.policy.chat)


class PilotResult(_Wire):
    harness_sha: str
    steps: int
    replicate: int = 0
    rollout_path: str
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
