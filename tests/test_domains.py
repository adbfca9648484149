"""The evaluator's side of the math domain: levels with disjoint prompt spaces of thousands of prompts each, a
held-out split that training never sees, determinism per seed, and the verifier."""

from __future__ import annotations

from collections import Counter

import pytest

from evotrainer.domains import get_domain
from evotrainer.domains.math import LEVELS, expression, space_size


@pytest.fixture(scope="module")
def splits():
    domain = get_domain("math")
    return domain, *domain.generate(seed=0, train_size=6000, eval_size=1000)


def prompts_by_level(domain, tasks) -> dict[str, set[str]]:
    by: dict[str, set[str]] = {level: set() for level in domain.levels}
    for t in tasks:
        by[t["difficulty"]].add(domain.canonical_prompt(t))
    return by


def test_each_level_draws_thousands_of_distinct_prompts_without_repeats(splits):
    domain, train, held_out = splits
    assert domain.levels == ["1", "2", "3", "4"]
    assert Counter(t["difficulty"] for t in held_out) == {lv: 250 for lv in domain.levels}
    assert Counter(t["difficulty"] for t in train) == {lv: 1500 for lv in domain.levels}
    for level, prompts in prompts_by_level(domain, train).items():
        assert len(prompts) == 1500, level  # the pool repeats nothing
        assert space_size(level) >= 3000, level
    assert len({domain.canonical_prompt(t) for t in held_out}) == 1000
    assert len({t["id"] for t in train + held_out}) == 7000


def test_levels_have_disjoint_prompt_spaces_by_construction():
    domain = get_domain("math")
    shapes = [shape for level in LEVELS.values() for shape in level]
    assert len(shapes) == len(set(shapes))  # no shape in two levels
    # every prompt of the small levels, and a sample of the large ones, read back to its own level's shape
    owner = {shape: level for level, ss in LEVELS.items() for shape in ss}
    for level in LEVELS:
        step = max(1, space_size(level) // 5000)
        for index in range(0, space_size(level), step):
            text, value = expression(level, index)
            terms = text.split(" ")[::2]
            assert owner[tuple(len(t) for t in terms)] == level, text
            assert eval(text) == value
    with pytest.raises(IndexError):
        expression("1", space_size("1"))
    # and the whole spaces of the two small levels are all distinct prompts
    for level in ("1", "2"):
        assert len({expression(level, i)[0] for i in range(space_size(level))}) == space_size(level)
    assert domain.canonical_prompt({"expression": "37 - 5 + 8"}) == "37-5+8="


def test_no_held_out_prompt_is_in_the_training_pool(splits):
    domain, train, held_out = splits
    train_prompts = {domain.canonical_prompt(t) for t in train}
    assert not [t["id"] for t in held_out if domain.canonical_prompt(t) in train_prompts]
    for t in train + held_out:
        assert str(eval(t["expression"])) == t["answer"] and t["question"].endswith(t["expression"] + " =")
        assert set(t) == {"id", "difficulty", "question", "expression", "answer"}


def test_generation_is_deterministic_per_seed_and_differs_across_seeds(splits):
    domain, train, held_out = splits
    again_train, again_held_out = domain.generate(seed=0, train_size=6000, eval_size=1000)
    assert again_held_out == held_out and again_train == train
    other_train, other_held_out = domain.generate(seed=1, train_size=6000, eval_size=1000)
    assert len({t["expression"] for t in other_held_out} & {t["expression"] for t in held_out}) < 100
    assert other_train != train
    # the held-out split does not depend on the training pool's size
    assert domain.generate(seed=0, train_size=400, eval_size=1000)[1] == held_out


def test_a_pool_larger_than_a_level_cycles_and_a_held_out_split_too_large_is_refused():
    domain = get_domain("math")
    train, held_out = domain.generate(seed=0, train_size=4 * 5000, eval_size=40)
    level1 = [domain.canonical_prompt(t) for t in train if t["difficulty"] == "1"]
    assert len(level1) == 5000 and len(set(level1)) == space_size("1") - 10  # all of the space but the held-out
    assert not set(level1) & {domain.canonical_prompt(t) for t in held_out}
    with pytest.raises(ValueError, match="training.eval_size"):
        domain.generate(seed=0, train_size=400, eval_size=4 * 2000)


def test_verifier_accepts_the_integer_answer_on_the_first_line_only(splits):
    domain, train, _ = splits
    task = {**train[0], "answer": "-7"}
    assert domain.verify(task, "-7") and domain.verify(task, " -7 \nanything after")
    assert not domain.verify(task, "-7 8") and not domain.verify(task, "7") and not domain.verify(task, "")
    assert domain.verify({**task, "answer": "9"}, "+9")
