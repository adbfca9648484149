"""The scoring contract's numbers (``evotrainer/judge/scoring.py``), worked by hand: what training and replay both compute.

A filter that drops part of a group recomputes that group's advantages over the rollouts it kept (a lone survivor
gets 0, a dropped rollout 0); dynamic sampling trains the first kept groups up to the step's prompt count. That
training and replay agree on these numbers is ``tests/test_trainer.py::test_replay_reproduces_what_training_logged``.
"""

from __future__ import annotations

import math

import pytest

from evotrainer.judge.scoring import batch_advantages, capacity_cut

STD_OF_1_0 = math.sqrt(0.5)  # the unbiased standard deviation of [1, 0]


def test_group_advantages_are_reward_minus_the_group_mean_over_its_standard_deviation():
    adv = batch_advantages([1, 0, 0, 0, 1, 1, 1, 1], 4, "group")
    std = math.sqrt(0.25)  # [1, 0, 0, 0]: mean 0.25, unbiased variance 0.25
    assert adv[:4] == pytest.approx([0.75 / (std + 1e-4), -0.25 / (std + 1e-4), -0.25 / (std + 1e-4),
                                     -0.25 / (std + 1e-4)], rel=1e-6)
    assert adv[4:] == [0.0] * 4  # all equal: no advantage
    assert batch_advantages([1, 0, 0, 0], 4, "none") == [0.75, -0.25, -0.25, -0.25]


def test_a_filter_that_drops_part_of_a_group_recomputes_its_advantages_over_the_kept():
    rewards = [1, 0, 0, 0, 1, 0, 0, 0]
    kept = [True, True, False, False, True, False, False, False]
    adv = batch_advantages(rewards, 4, "group", kept)
    assert adv[:2] == pytest.approx([0.5 / (STD_OF_1_0 + 1e-4), -0.5 / (STD_OF_1_0 + 1e-4)], rel=1e-6)  # [1, 0]
    assert adv[2:4] == [0.0, 0.0]  # dropped: no gradient
    assert adv[4:] == [0.0] * 4  # a lone survivor has nothing to be compared with
    # batch scaling: the standard deviation is the kept rollouts' across the whole batch
    batch = batch_advantages(rewards, 4, "batch", kept)
    kept_rewards = [1, 0, 1]
    mean = sum(kept_rewards) / 3
    std = math.sqrt(sum((r - mean) ** 2 for r in kept_rewards) / 2)
    assert batch[:2] == pytest.approx([0.5 / (std + 1e-4), -0.5 / (std + 1e-4)], rel=1e-6) and batch[4] == 0.0


def test_dynamic_sampling_trains_the_first_kept_groups_up_to_the_step_s_prompt_count():
    # 8 groups generated for a step of 4 prompts (oversample 2): the first four the filters kept train
    assert capacity_cut([False, True, True, False, True, True, True, False], 2) == [
        False, True, True, False, True, True, False, False]
    assert capacity_cut([True, False, False, False, True, False], 2) == [True, False, False, False, True, False]
    assert capacity_cut([True, False, True], 1) == [True, False, True]  # oversample 1 changes nothing
    with pytest.raises(ValueError, match="not whole groups of 4"):
        batch_advantages([1, 0, 1], 4, "group")
