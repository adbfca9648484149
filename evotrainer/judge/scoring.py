"""How a harness's decisions become training signal: one definition, called by training and by replay.

The trainer (``trainer/hooks.py``) and the backtest's replay (``backtest.py``) must agree on every number a harness
produces, or the judge judges a different harness from the one that trains. So both call these functions:

    total_reward(components, knobs)        the weighted, scaled sum of reward components (what GRPO sees)
    batch_advantages(rewards, group, scale, kept)
                                           GRPO advantages of one generated batch, computed as TRL 1.16 does:
                                           float32, reward minus the group mean, divided by the group's (or the
                                           batch's) standard deviation + 1e-4 unless scale is "none". With
                                           ``kept``, over the kept rollouts only: a filter that drops part of a
                                           group recomputes that group's advantages (a lone survivor gets 0)
    capacity_cut(group_kept, oversample)   dynamic sampling: of a batch generated with ``oversample`` x the
                                           step's prompts, the first groups the filters kept train, up to the
                                           step's prompt count
    masked(truncated, knobs)               TRL masks a truncated completion out of the loss (mask knob on)
    trains(kept, masked)                   a rollout trains when the filters keep it and it is not masked
    trained(row)                           the same rule on a logged rollout row

``tests/test_scoring.py`` works these numbers by hand; ``tests/test_trainer.py`` (test_replay_reproduces_what_
training_logged) replays main on a trained phase's rollouts and checks it reproduces the logged rewards, advantages
and kept flags exactly. Run ``python -m evotrainer.judge.scoring`` to print the advantages of a toy batch.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from evotrainer.harness.knobs import Knobs


def total_reward(components: Mapping[str, float], knobs: Knobs) -> float:
    """The reward a rollout trains with: the ``reward_weights``-weighted sum of components (a component without a
    weight counts once). A weight that could not act raises ValueError, one line naming it, in training and in
    replay alike: one that names no component of rewards.py, and a positive weight other than 1 on the only
    component (a constant factor on every reward: group or batch scaling divides it out of the advantage, and under
    no scaling AdamW divides it out of the update)."""
    unused = sorted(set(knobs.reward_weights) - set(components))
    if unused:
        raise ValueError(f"harness.yaml: reward_weights.{unused[0]} names no reward component (rewards.py's "
                         f"COMPONENTS: {', '.join(sorted(components)) or 'none'}), so it would weigh nothing")
    if len(components) == 1:
        (name,) = components
        if (weight := knobs.reward_weights.get(name, 1.0)) > 0 and weight != 1.0:
            raise ValueError(f"harness.yaml: reward_weights.{name}: the weight of the only reward component cannot "
                             "act (a constant factor on every reward is divided out: by the advantage's std scaling, "
                             "or by AdamW under scale_rewards: none); keep it 1.0, or add a second component for it "
                             "to weigh against")
    return float(sum(knobs.reward_weights.get(k, 1.0) * v for k, v in components.items()))


def _nanstd(t, dim=None):
    """``trl.trainer.utils.nanstd`` (unbiased, NaN-aware), repeated here so replay needs no TRL import."""
    import torch

    mean = torch.nanmean(t, dim=dim, keepdim=True)
    variance = torch.nanmean((t - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(t), dim=dim, keepdim=True)
    variance = variance * (count / (count - 1))
    return torch.sqrt(variance).squeeze() if dim is None else torch.sqrt(variance).squeeze(dim)


def batch_advantages(rewards: Sequence[float], group_size: int, scale: str,
                     kept: Sequence[bool] | None = None) -> list[float]:
    """GRPO advantages of one generated batch whose rows come group by group (``group_size`` each), as TRL does;
    with ``kept``, computed over the kept rows alone (the others get 0)."""
    import torch

    values = list(rewards) if kept is None else [r if k else math.nan for r, k in zip(rewards, kept)]
    r = torch.tensor(values, dtype=torch.float32)
    if r.numel() % group_size:
        raise ValueError(f"a batch of {r.numel()} rollouts is not whole groups of {group_size}")
    mean = torch.nanmean(r.view(-1, group_size), dim=1).repeat_interleave(group_size, dim=0)
    if scale == "batch":
        std = _nanstd(r).expand_as(r) if r.numel() > 1 else torch.zeros_like(r)
    elif scale in ("group", "none"):
        std = _nanstd(r.view(-1, group_size), dim=1).repeat_interleave(group_size, dim=0)
    else:
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale!r}")
    adv = r - mean
    if scale != "none":
        adv = adv / (std + 1e-4)
    return torch.nan_to_num(adv, nan=0.0).tolist()


def capacity_cut(group_kept: Sequence[bool], oversample: int) -> list[bool]:
    """Which groups of a generated batch train under dynamic sampling: the kept ones, in generation order, up to
    ``len(group_kept) // oversample`` (the step's prompt count). ``oversample`` 1 changes nothing."""
    room = len(group_kept) // oversample
    out = []
    for keep in group_kept:
        out.append(bool(keep) and room > 0)
        room -= out[-1]
    return out


def masked(truncated: bool, knobs: Knobs) -> bool:
    """Whether TRL masks this completion out of the loss (``mask_truncated_completions`` and it was cut)."""
    return bool(knobs.mask_truncated_completions and truncated)


def trains(kept: bool, is_masked: bool) -> bool:
    """Whether a rollout contributes to the update: the filters kept it and it is not masked out."""
    return bool(kept) and not is_masked


def trained(row: dict) -> bool:
    """``trains`` on a logged rollout row (the mask decision is in ``extra.masked_truncated``)."""
    return trains(row["kept"], bool((row.get("extra") or {}).get("masked_truncated", False)))


if __name__ == "__main__":
    print(batch_advantages([1, 0, 0, 0, 1, 1, 1, 1], 4, "group"))
