"""The evaluator's side of the math domain: levels with disjoint prompt spaces of thousands of prompts each, four
disjoint splits (held-out, dev, RL, warm-up), determinism per seed, and the verifier."""

from __future__ import annotations

from collections import Counter

import pytest

from evotrainer.domains import DOMAINS, get_domain
from evotrainer.domains.base import SPLITS
from evotrainer.domains.math import LEVELS, expression, space_size


SIZES = {"held_out": 1000, "dev": 2000, "rl": 6000, "warmup": 4000}  # the defaults


@pytest.fixture(scope="module")
def splits():
    domain = get_domain("math")
    return domain, domain.splits(0, SIZES)


def prompts_by_level(domain, tasks) -> dict[str, set[str]]:
    by: dict[str, set[str]] = {level: set() for level in domain.levels}
    for t in tasks:
        by[t["difficulty"]].add(domain.canonical_prompt(t))
    return by


def test_each_level_draws_thousands_of_distinct_prompts_without_repeats(splits):
    domain, s = splits
    assert domain.levels == ["1", "2", "3", "4"] and list(s) == list(SPLITS)
    for name, size in SIZES.items():
        assert Counter(t["difficulty"] for t in s[name]) == {lv: size // 4 for lv in domain.levels}, name
        for level, prompts in prompts_by_level(domain, s[name]).items():
            assert len(prompts) == size // 4, (name, level)  # no split repeats a prompt at the default sizes
    assert len({t["id"] for tasks in s.values() for t in tasks}) == sum(SIZES.values())
    assert {t["id"].split("-")[0] for t in s["dev"]} == {"dev"} and {t["id"].split("-")[0] for t in s["held_out"]} \
        == {"eval"}


@pytest.mark.parametrize("name", DOMAINS)
def test_the_four_splits_share_no_prompt_in_every_domain(name):
    """Disjoint by content, not by id: a prompt (the evaluator's canonical text) is in one split only, at the
    defaults and when the training pools ask for more than a level's space holds."""
    domain = get_domain(name)
    for seed, sizes in ((0, SIZES), (3, {"held_out": 40, "dev": 80, "rl": 4 * 5000, "warmup": 4 * 3000})):
        s = domain.splits(seed, sizes)
        owner: dict[str, str] = {}
        for split, tasks in s.items():
            for t in tasks:
                prompt = domain.canonical_prompt(t)
                assert owner.setdefault(prompt, split) == split, (t, owner[prompt])
        assert all(s[k] for k in SPLITS)


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


def test_every_task_reads_back_its_answer(splits):
    domain, s = splits
    for t in (t for tasks in s.values() for t in tasks):
        assert str(eval(t["expression"])) == t["answer"] and t["question"].endswith(t["expression"] + " =")
        assert set(t) == {"id", "difficulty", "question", "expression", "answer"}


def test_generation_is_deterministic_per_seed_and_differs_across_seeds(splits):
    domain, s = splits
    assert domain.splits(0, SIZES) == s
    other = domain.splits(1, SIZES)
    assert len({t["expression"] for t in other["held_out"]} & {t["expression"] for t in s["held_out"]}) < 100
    assert other["rl"] != s["rl"]
    # the held-out split depends on no other split's size, the dev split on neither training pool's
    smaller = domain.splits(0, {"held_out": 1000, "dev": 2000, "rl": 400})
    assert smaller["held_out"] == s["held_out"] and smaller["dev"] == s["dev"] and smaller["warmup"] == []
    assert domain.splits(0, {"held_out": 1000, "dev": 400})["held_out"] == s["held_out"]


def test_pools_larger_than_a_level_share_what_is_left_and_cycle_and_scoring_splits_too_large_are_refused():
    domain = get_domain("math")
    s = domain.splits(0, {"held_out": 40, "dev": 40, "rl": 4 * 5000, "warmup": 4 * 5000})
    level1 = {name: [domain.canonical_prompt(t) for t in s[name] if t["difficulty"] == "1"] for name in ("rl", "warmup")}
    assert len(level1["rl"]) == len(level1["warmup"]) == 5000
    assert len(set(level1["rl"])) + len(set(level1["warmup"])) == space_size("1") - 20  # all that is left, shared
    assert abs(len(set(level1["rl"])) - len(set(level1["warmup"]))) <= 1  # in proportion to their sizes
    with pytest.raises(ValueError, match="training.eval_size"):
        domain.splits(0, {"held_out": 4 * 1000, "dev": 4 * 1000, "rl": 400})


def test_verifier_accepts_the_integer_answer_on_the_first_line_only(splits):
    domain, s = splits
    task = {**s["rl"][0], "answer": "-7"}
    assert domain.verify(task, "-7") and domain.verify(task, " -7 \nanything after")
    assert not domain.verify(task, "-7 8") and not domain.verify(task, "7") and not domain.verify(task, "")
    assert domain.verify({**task, "answer": "9"}, "+9")


def test_the_tolerant_verdict_forgives_a_period_slip_and_never_another_number(splits):
    domain, s = splits
    task = {**s["rl"][0], "answer": "40"}
    for slip in ("40.", "40 .", " 40!\n", "\n\n40.", "= 40,"):  # the warm-up's slip and its kin: strict-wrong
        assert domain.verify_tolerant(task, slip) and not domain.verify(task, slip), slip
    for wrong in ("41.", "40.5", "4,0", "-40.", "40 41.", "", "."):  # another number, or none: wrong under both
        assert not domain.verify_tolerant(task, wrong) and not domain.verify(task, wrong), wrong
    for right in ("40", "= 40.", " 40 \nanything after"):  # what the strict verdict takes, the tolerant one takes
        assert domain.verify(task, right) and domain.verify_tolerant(task, right), right
    assert all(domain.verify_tolerant(t, domain.near_miss(t)) for t in s["dev"][:200])  # math's near miss is a slip
