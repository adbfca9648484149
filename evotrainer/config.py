"""Run configuration: typed dataclasses (pydantic), every field with help text, loaded from YAML.

The defaults are the embedded demo: math domain, tiny local policy on CPU, built-in (heuristic) agents, a local
trainer service, Chroma and SQLite inside the run directory. A run directory keeps its resolved configuration in
``config.yaml``; `evotrainer init` writes it and `evotrainer run` reads it back.

Bad input fails at start with one readable message that names the key and what is allowed (``ConfigError``),
e.g. ``config.yaml: training.stepz: unknown key (allowed: steps_per_phase, prompts_per_step, ...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandbox import DEFAULT_IMAGE, SandboxLimits


class ConfigError(ValueError):
    """A configuration problem, with a message meant for the user (one line per problem)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TinyPolicyConfig(_Section):
    hidden_size: int = Field(128, ge=16, description="width of the tiny Qwen2-style model")
    num_layers: int = Field(3, ge=1, description="transformer layers of the tiny model")
    num_heads: int = Field(4, ge=1, description="attention heads of the tiny model")
    max_length: int = Field(64, ge=16, description="longest prompt+completion the tiny model is built for")
    warmup_steps: int = Field(1200, ge=0, description="most supervised warm-up steps on the training split")
    warmup_batch_size: int = Field(64, ge=1, description="examples per supervised warm-up step")
    warmup_lr: float = Field(3e-3, gt=0, description="learning rate of the supervised warm-up")
    warmup_target_accuracy: float = Field(
        0.35, ge=0, le=1, description="stop the warm-up once accuracy on a probe of unseen training tasks "
        "reaches this (it tracks held-out accuracy)"
    )


class PolicyConfig(_Section):
    model: str = Field(
        "tiny",
        description="'tiny' builds a character-level Qwen2-style model locally (cached); otherwise a Hugging Face "
        "model id or a local path loaded with transformers",
    )
    tiny: TinyPolicyConfig = Field(default_factory=TinyPolicyConfig, description="settings of the tiny policy")
    lora: bool = Field(False, description="train a LoRA adapter (PEFT) instead of all weights")
    lora_rank: int = Field(16, ge=1, description="LoRA rank when lora is on")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="where the trainer service trains")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="weights dtype: auto = bfloat16 on CUDA, float32 on CPU"
    )


class TrainingConfig(_Section):
    steps_per_phase: int = Field(60, ge=1, description="GRPO optimizer steps in one training phase")
    prompts_per_step: int = Field(8, ge=1, description="prompts per GRPO step (each gets a group of completions)")
    eval_size: int = Field(300, ge=10, description="held-out tasks, frozen at init, scored after every phase")
    eval_max_new_tokens: int = Field(16, ge=1, description="generation budget of the held-out evaluation")
    train_pool_size: int = Field(6000, ge=100, description="training tasks generated at init")
    threads: int = Field(0, ge=0, description="torch CPU threads for the trainer (0 = all cores)")


class TrainerConfig(_Section):
    url: str | None = Field(
        None, description="URL of a running trainer service; empty starts a local one on loopback"
    )
    start_timeout_s: float = Field(240, gt=0, description="how long to wait for a local service to come up")
    phase_timeout_s: float = Field(7200, gt=0, description="longest a phase may run before the run fails")
    max_restarts: int = Field(
        2, ge=0, description="times in a row a local trainer service that died (out of memory, crash) is restarted; "
        "the interrupted phase is trained again"
    )


class EvolutionConfig(_Section):
    max_diagnoses: int = Field(4, ge=1, description="most diagnoses the Critic passes on per phase")
    max_candidates: int = Field(3, ge=1, description="most candidate edits the Engineer makes per round")
    max_engineer_rounds: int = Field(
        2, ge=1, description="Engineer rounds per phase when every candidate was rejected"
    )
    max_evidence_rounds: int = Field(1, ge=0, description="times the Critic may send diagnoses back for evidence")
    max_promotions_per_phase: int = Field(
        1, ge=0, le=1, description="passing candidates merged per phase: 1, or 0 to keep the harness fixed. Each "
        "edit reaches main alone, judged against the main it merges into, so its effect stays attributable"
    )


class BacktestConfig(_Section):
    retained_phases: int = Field(2, ge=1, description="most recent phases whose rollouts the replay uses")
    bootstrap: int = Field(200, ge=20, description="bootstrap resamples (over groups) for the noise floor")
    time_budget_s: float = Field(120, gt=0, description="longest a candidate's replay may take")
    test_timeout_s: float = Field(60, gt=0, description="time limit of the harness self-tests")
    pilot_steps: int = Field(
        15, ge=0, description="training steps of the pilot that judges RL-knob edits (0 = no pilots: such edits "
        "are not proposed)"
    )
    alignment_tolerance: float = Field(
        0.01, ge=0, description="how much worse reward/verified alignment may get before a candidate fails"
    )


class SandboxConfig(_Section):
    backend: Literal["auto", "docker", "bwrap", "unshare", "process"] = Field(
        "auto", description="auto = the strongest available: Docker when a daemon answers, else bubblewrap, else "
        "unshare (no network, private mounts), else a plain rlimit-limited process"
    )
    image: str = Field(DEFAULT_IMAGE, description="Docker image built from sandbox/Dockerfile (docker backend)")
    limits: SandboxLimits = Field(default_factory=SandboxLimits, description="resource limits of harness code")


class AgentConfig(_Section):
    model: str = Field(
        "heuristic", description="'heuristic' = built-in deterministic agent (the only one in this version)"
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        if v != "heuristic":
            raise ValueError("only 'heuristic' (the built-in agent) is available in this version")
        return v


class AgentsConfig(_Section):
    diagnostician: AgentConfig = Field(default_factory=AgentConfig, description="reads rollouts, diagnoses")
    critic: AgentConfig = Field(default_factory=AgentConfig, description="confirms or rejects diagnoses")
    engineer: AgentConfig = Field(default_factory=AgentConfig, description="turns diagnoses into harness edits")
    backtester: AgentConfig = Field(default_factory=AgentConfig, description="judges candidates on replay")
    librarian: AgentConfig = Field(default_factory=AgentConfig, description="keeps skills across phases")


class SkillsConfig(_Section):
    path: str | None = Field(
        None, description="Chroma folder of the skill library; empty = skills/ inside the run directory "
        "(point several runs at one folder to share what they learn)"
    )
    top_k: int = Field(3, ge=1, description="skills retrieved per diagnosis")


class Config(_Section):
    name: str = Field("demo", description="name of the run")
    domain: Literal["math"] = Field("math", description="task domain (tasks and verifier are evaluator-owned)")
    seed: int = Field(0, description="seed of task sampling, initialisation and training")
    phases: int = Field(3, ge=1, description="training phases in the run (the evolution budget)")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="the policy being trained")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="one phase of training")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="the trainer service")
    evolution: EvolutionConfig = Field(default_factory=EvolutionConfig, description="the evolution step")
    backtest: BacktestConfig = Field(default_factory=BacktestConfig, description="judging candidate edits")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="where harness code runs")
    agents: AgentsConfig = Field(default_factory=AgentsConfig, description="the five specialist roles")
    skills: SkillsConfig = Field(default_factory=SkillsConfig, description="the Librarian's skill library")

    @field_validator("name")
    @classmethod
    def _name_is_simple(cls, v: str) -> str:
        if not v or any(c in v for c in "/\\ \t\n"):
            raise ValueError("must be non-empty, without slashes or spaces")
        return v


def _allowed(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at ``loc`` (a pydantic error location), for 'unknown key' messages."""
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return list(model.model_fields)


def _format(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed(Config, e["loc"]))
            lines.append(f"{source}: {key}: unknown key (allowed: {allowed})")
        elif e["type"] == "literal_error":
            lines.append(f"{source}: {key}: {e['msg'].lower()} (got {e['input']!r})")
        else:
            lines.append(f"{source}: {key}: {e['msg'].lower()} (got {e.get('input')!r})")
    return "\n".join(lines)


def parse(data: dict[str, Any] | None, source: str = "config") -> Config:
    """Validate a mapping into a Config, raising ConfigError with one line per problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys to values, got {type(data).__name__}")
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format(err, source)) from None


def load(path: str | Path) -> Config:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    return parse(data, str(path))


def apply_overrides(cfg: Config, overrides: list[str]) -> Config:
    """Apply ``key.sub=value`` overrides (values parsed as YAML), revalidating the whole config."""
    data = cfg.model_dump(mode="json")
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. training.steps_per_phase=40")
        key, raw = item.split("=", 1)
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                raise ConfigError(f"override {key}: {part!r} is not a section")
            node = node[part]
        node[parts[-1]] = yaml.safe_load(raw)
    return parse(data, "override")


def dump(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
