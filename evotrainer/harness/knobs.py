"""The schema of ``harness.yaml``: every RL knob a harness sets, typed and bounded, and refused where it could not act.

An edit that breaks harness.yaml fails its backtest with :class:`KnobsError`'s one line. Alone:
``python -c "from evotrainer.harness.knobs import read_knobs; print(read_knobs('harness_repo/math'))"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evotrainer.harness.files import load_yaml


class Knobs(BaseModel):
    """harness.yaml, validated. An edit that breaks it fails its backtest with this model's message.

    Every knob changes the update (``tests/test_knobs.py`` shows it for each one); a value that could not act is
    refused here rather than silently ignored: the clip epsilons act only when a generated batch is used for more
    than one update. There is no reward scale: a constant factor on every reward is divided out by the advantage's
    std scaling, and under ``scale_rewards: none`` by AdamW, whose update does not depend on the gradient's scale
    (it acted only through gradient clipping, which ``max_grad_norm`` sets directly); for the same reason the weight
    of a single reward component is refused (``scoring.total_reward``).
    """

    model_config = ConfigDict(extra="forbid")
    learning_rate: float = Field(gt=0, lt=1)
    group_size: int = Field(ge=2, le=64)
    temperature: float = Field(gt=0, le=3)
    max_completion_length: int = Field(ge=1, le=32768)
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"]
    beta: float = Field(ge=0)
    epsilon: float = Field(0.2, gt=0, lt=1)
    epsilon_high: float = Field(0.2, gt=0, lt=1)
    scale_rewards: Literal["group", "batch", "none"]
    mask_truncated_completions: bool
    reward_weights: dict[str, float]
    curriculum_weights: dict[str, float]
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    weight_decay: float = Field(0.0, ge=0, lt=1)
    updates_per_batch: int = Field(1, ge=1, le=8)
    oversample: int = Field(1, ge=1, le=8)
    max_turns: int | None = Field(None, ge=1, le=16)  # a multi-turn domain's training turn cap (trainer.shapes)

    @model_validator(mode="after")
    def _every_knob_acts(self) -> "Knobs":
        if self.updates_per_batch == 1 and (self.epsilon, self.epsilon_high) != (0.2, 0.2):
            raise ValueError("epsilon/epsilon_high act only with updates_per_batch > 1 (with one update per "
                             "generated batch the policy ratio is always 1, so the clip never binds)")
        return self  # a reward weight's rule needs rewards.py's components: scoring.total_reward applies it


class KnobsError(ValueError):
    pass


def read_knobs(harness_dir: Path) -> Knobs:
    """harness.yaml of a harness directory, validated."""
    try:
        text = (Path(harness_dir) / "harness.yaml").read_text()
    except FileNotFoundError:
        raise KnobsError("harness.yaml: missing") from None
    return parse_knobs(text)


def parse_knobs(text: str) -> Knobs:
    """The text of a harness.yaml, validated (raises KnobsError with one readable line)."""
    try:
        return Knobs.model_validate(load_yaml(text))  # safe loader with size, alias and depth limits
    except yaml.YAMLError as err:
        raise KnobsError(f"harness.yaml: not valid YAML: {str(err).splitlines()[0]}") from None
    except ValidationError as err:
        e = err.errors()[0]
        if not e["loc"]:  # a rule across knobs: the message says which
            raise KnobsError(f"harness.yaml: {e['msg'].removeprefix('Value error, ')}") from None
        key = ".".join(str(p) for p in e["loc"])
        raise KnobsError(f"harness.yaml: {key}: {e['msg']} (got {e.get('input')!r})") from None
