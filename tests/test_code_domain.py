"""The code domain (evotrainer/domains/code): disjoint deterministic splits, hidden tests kept from harness code,
and a verifier that runs the hidden tests through the policy-code executor (a grader error is never a wrong answer)."""

from __future__ import annotations

import pytest

from evotrainer.domains.base import SPLITS
from evotrainer.domains.code import LEVELS, CodeDomain, GraderError
from evotrainer.execute import ExecLimits

SIZES = {"held_out": 8, "dev": 8, "rl": 16, "warmup": 40}


@pytest.fixture(scope="module")
def domain() -> CodeDomain:
    return CodeDomain(ExecLimits(time_s=1.0))


@pytest.fixture(scope="module")
def splits(domain):
    return domain.splits(0, SIZES)


def test_splits_are_deterministic_and_share_no_prompt(domain, splits):
    assert splits == domain.splits(0, SIZES)
    prompts = {name: {domain.canonical_prompt(t) for t in splits[name]} for name in SPLITS}
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1:]:
            assert not prompts[a] & prompts[b], (a, b)


def test_no_function_family_belongs_to_two_levels():
    bodies = [{ref for ref, _, _ in LEVELS[level]} for level in LEVELS]
    assert sum(map(len, bodies)) == len(set().union(*bodies))


def test_the_harness_view_has_the_visible_tests_but_never_the_hidden_ones_or_the_reference(domain, splits):
    task = splits["rl"][0]
    view = domain.harness_task(task)
    assert view["tests"] == task["tests"] and "hidden_tests" not in view and "answer" not in view
    assert not {repr(t) for t in task["hidden_tests"]} & {repr(t) for t in view["tests"]}


def test_the_reference_passes_hidden_tests_and_the_near_miss_does_not(domain, splits):
    tasks = splits["dev"]
    assert domain.verify_batch(tasks, [domain.reference_completion(t) for t in tasks]) == [True] * len(tasks)
    assert domain.verify_batch(tasks, [domain.near_miss(t) for t in tasks]) == [False] * len(tasks)


def test_verify_decides_on_hidden_tests_not_visible_ones(domain, splits):
    task = splits["dev"][0]
    (a, va), (b, vb) = [(int(t["call"][2:-1]), t["expected"]) for t in task["tests"]]
    lookup = f" {va} if x == {a} else {vb} if x == {b} else -1"  # passes the examples, nothing else
    assert domain.execute([task], [lookup], "tests")[0].status == "ok"
    assert domain.verify(task, lookup) is False


def test_no_null_probe_verifies(domain, splits):
    task = splits["dev"][0]
    probes = domain.null_probes(task)
    assert {"no_code", "raises", "exits_early", "prints_expected"} <= set(probes)
    assert domain.verify_batch([task] * len(probes), list(probes.values())) == [False] * len(probes)


def test_a_grader_error_is_raised_never_scored_wrong(splits):
    broken = CodeDomain(ExecLimits(time_s=1.0), python="/nonexistent/python3")  # the executor cannot run anything
    task = splits["dev"][0]
    with pytest.raises(GraderError):
        broken.verify(task, task["answer"])
    assert broken.verify_batch([task], [task["answer"]]) == [None]


def test_the_prompt_is_in_the_tiny_policy_s_alphabet(domain, splits):
    from evotrainer.policy.build import CHARS

    for task in splits["warmup"]:
        assert set(domain.canonical_prompt(task) + task["answer"] + domain.near_miss(task)) <= set(CHARS)
