"""The code domain (evotrainer/domains/code): disjoint deterministic splits, hidden tests kept from harness code,
and a verifier that runs the hidden tests through the policy-code executor (a grader error is never a wrong answer)."""

from __future__ import annotations

import pytest

from evotrainer.domains.base import SPLITS
from evotrainer.domains.code import LEVELS, CodeDomain, GraderError
from evotrainer.domains.execute import ExecLimits

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
    bodies = [{ref for ref, _, _ in LEVELS[level][0]} for level in LEVELS]
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


def test_training_and_replay_give_the_reward_the_same_visible_test_execution(tmp_path):
    """HarnessHooks (TRL's reward function) with the code seed in a real sandbox worker: each sample carries its
    visible-test execution, the rollout store keeps it, replay hands it to the reward again (same rewards), and
    ``verified`` comes from the hidden tests (a body fitting only the examples is paid and not verified)."""
    import json

    from evotrainer.domains import get_domain
    from evotrainer.harness.knobs import read_knobs
    from evotrainer.harness.repo import seed_dir
    from evotrainer.judge.replay import replay
    from evotrainer.trainer.hooks import HarnessHooks
    from sandbox import HarnessWorker, SandboxLimits

    domain = get_domain("code")
    tasks = domain.splits(1, {"rl": 4})["rl"][:2]
    (a, va), (b, vb) = [(int(t["call"][2:-1]), t["expected"]) for t in tasks[0]["tests"]]
    texts = [tasks[0]["answer"], f" {va} if x == {a} else {vb}", " x +", tasks[1]["answer"]]
    group = [tasks[0]] * 3 + [tasks[1]]
    harness = seed_dir("code")
    with HarnessWorker(harness, limits=SandboxLimits(memory_mb=1024, cpu_s=60, call_timeout_s=20)) as worker:
        hooks = HarnessHooks(worker, read_knobs(harness), domain, phase=1, sha="0" * 40, eos_ids=[0])
        rewards = hooks(prompts=["p"] * 4, completions=texts, completion_ids=[[5, 0]] * 4,
                        task_json=[json.dumps(t) for t in group])
        batch = hooks.take_batch()
        kept, advantages = hooks.decide(batch, [0.0] * 4, 2, step=0)
        hooks.log(batch, kept, advantages)
        rows = [r.model_dump() for r in hooks.rollouts]
        replayed = replay(worker, harness, rows, {t["id"]: domain.harness_task(t) for t in tasks})
    assert [s["execution"]["status"] for s in batch] == ["ok", "ok", "syntax_error", "ok"]
    assert rewards == [1.0, 1.0, 0.0, 1.0] and [s["verified"] for s in batch] == [True, False, False, True]
    assert [r["extra"]["execution"] for r in rows] == [s["execution"] for s in batch]
    assert [r["reward"] for r in replayed["rows"]] == rewards


def test_the_config_s_executor_section_sets_the_limits_training_and_evaluation_run_policy_code_under(splits):
    """``executor.time_s`` reaches the code domain through both trainer requests (training's rewards, evaluation):
    a body that takes 0.8 s over its two visible tests passes under the default limit and times out under 0.3 s."""
    from evotrainer import config as C
    from evotrainer.domains import get_domain
    from evotrainer.trainer.wire import EvalRequest, PhaseRequest

    task = splits["dev"][0]
    slow = " __import__('time').sleep(0.4) or " + task["answer"].strip()
    default = C.parse({"domain": "code"})
    tight = C.apply_overrides(default, ["executor.time_s=0.3"])
    for cfg, status in ((default, "ok"), (tight, "timeout")):
        for req in (PhaseRequest.make(cfg, "r", 1, "0" * 40, "c", 1), EvalRequest.make(cfg, "r", "c")):
            req = type(req).model_validate_json(req.model_dump_json())  # what the trainer service receives
            domain = get_domain(req.domain, req.executor)
            assert domain.reward_executions([task], [slow])[0]["status"] == status, (cfg.executor, type(req))
    with pytest.raises(C.ConfigError, match="executor.time_s"):
        C.apply_overrides(default, ["executor.time_s=0"])


def test_the_tolerant_score_forgives_an_integer_written_as_a_float_and_nothing_else(domain, splits):
    tasks = splits["dev"]
    misses = [domain.near_miss(t) for t in tasks]
    assert domain.verify_tolerant_batch(tasks, misses) == [True] * len(tasks)  # the warm-up's slip: the same function
    assert domain.verify_tolerant_batch(tasks, [m.replace(".", ".5") for m in misses]) == [False] * len(tasks)
    assert domain.verify_tolerant_batch(tasks, [" x + 1000."] * len(tasks)) == [False] * len(tasks)
    assert domain.verify_tolerant(tasks[0], tasks[0]["answer"]) and not domain.verify_tolerant(tasks[0], " x.")


def test_training_s_one_executor_run_gives_what_the_visible_and_hidden_runs_give_apart(domain, splits):
    """score_batch runs each program once on its visible then hidden tests; the reward's execution and the verdict
    are what reward_executions and verify_batch give apart, for programs that stop, hang or fail in either part."""
    task = next(t for t in splits["rl"] if t["difficulty"] == "4")  # its visible tests also fit a line
    (a, _), (b, _) = [(int(t["call"][2:-1]), t["expected"]) for t in task["tests"]]
    slope = (task["tests"][1]["expected"] - task["tests"][0]["expected"]) // (b - a)
    line = f"x*{slope}+{task['tests'][0]['expected'] - slope * a}"  # passes the visible tests, fails hidden ones
    h = int(task["hidden_tests"][0]["call"][2:-1])
    programs = [task["answer"], line, f"{task['answer']} if x != {h} else __import__('os')._exit(0)",
                f"{task['answer']} if x != {a} else next(i for i in iter(int, 1) if i)",  # hangs on a visible input
                f"{task['answer']} if x != {h} else 1 // 0", "x +", " ", "undefined_name"]
    tasks = [task] * len(programs)
    executions, verdicts = domain.score_batch(tasks, programs)
    assert executions == domain.reward_executions(tasks, programs)
    assert verdicts == domain.verify_batch(tasks, programs)
    assert [e["status"] for e in executions] == ["ok", "ok", "ok", "timeout", "ok", "syntax_error", "no_code", "fail"]
    assert verdicts == [True, False, False, True, False, False, False, False]
