"""The evaluator's side of the math domain: a held-out split that training never sees, and the verifier."""

from __future__ import annotations

from collections import Counter

import pytest

from evotrainer.domains import get_domain


@pytest.fixture(scope="module")
def splits():
    domain = get_domain("math")
    return domain, *domain.generate(seed=0, train_size=6000, eval_size=300)


def test_no_held_out_prompt_is_in_the_training_pool(splits):
    domain, train, held_out = splits
    # levels overlap (every level-1 sum is also a level-3 sum): disjointness must hold across levels
    train_prompts = {domain.canonical_prompt(t) for t in train}
    assert not [t["id"] for t in held_out if domain.canonical_prompt(t) in train_prompts]
    assert len({domain.canonical_prompt(t) for t in held_out}) == len(held_out) == 300


def test_every_level_is_represented_and_generation_is_deterministic(splits):
    domain, train, held_out = splits
    assert Counter(t["difficulty"] for t in held_out) == {lv: 75 for lv in domain.levels}
    assert Counter(t["difficulty"] for t in train) == {lv: 1500 for lv in domain.levels}
    again_train, again_held_out = domain.generate(seed=0, train_size=6000, eval_size=300)
    assert again_held_out == held_out and again_train == train
    assert domain.generate(seed=1, train_size=400, eval_size=40)[1] != held_out[:40]


def test_verifier_accepts_the_integer_answer_on_the_first_line_only(splits):
    domain, train, _ = splits
    task = {**train[0], "answer": "-7"}
    assert domain.verify(task, "-7") and domain.verify(task, " -7 \nanything after")
    assert not domain.verify(task, "-7 8") and not domain.verify(task, "7") and not domain.verify(task, "")
    assert domain.verify({**task, "answer": "9"}, "+9")
