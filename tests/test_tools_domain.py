"""The tool-use domain and the multi-turn rollout shape: the environment is the task's (every rollout of a group
meets the same one), the environment mask leaves exactly the tool's output out of the loss, the turn cap stops a
rollout that keeps calling, and a short phase with the tiny policy trains and records its turns.

The policy here is a real (untrained) tiny model whose next character a logits processor dictates, so each test
chooses what the policy writes and checks what the loop and the environment make of it.
"""

from __future__ import annotations

import pytest

from evotrainer.domains import DOMAINS, get_domain
from evotrainer.domains.base import SPLITS
from evotrainer.domains.tools import ToolsDomain
from evotrainer.trainer.shapes import run_turns, shape_of, stop_token_ids

SIZES = {"held_out": 40, "dev": 40, "rl": 80, "warmup": 80}


def test_tools_is_a_registered_multi_turn_domain():
    assert "tools" in DOMAINS and shape_of(get_domain("tools")) == "multi_turn"
    assert shape_of(get_domain("math")) == "single_turn"


def test_a_task_s_environment_is_derived_from_the_task_alone():
    d = ToolsDomain()
    a, b = d.splits(3, SIZES), d.splits(3, SIZES)
    assert a == b
    task = a["dev"][-1]
    replies = [[d.environment(task).step(f"get({k})") for k in (*task["keys"], "zzz")] for _ in range(2)]
    assert replies[0] == replies[1] and replies[0][-1] == "=error;"
    assert "table" not in d.harness_task(task)  # harness code never sees the table
    prompts = {name: {d.canonical_prompt(t) for t in tasks} for name, tasks in a.items()}
    for i, x in enumerate(SPLITS):
        for y in SPLITS[i + 1:]:
            assert not prompts[x] & prompts[y], (x, y)


def test_the_reference_is_verified_and_no_null_probe_is():
    d = ToolsDomain()
    for task in d.splits(0, SIZES)["dev"]:
        assert d.verify(task, d.reference_completion(task))
        assert not [name for name, text in d.null_probes(task).items() if d.verify(task, text)]


class _Dictate:
    """A logits processor that makes the policy write ``say(text so far)`` next (None: end-of-sequence)."""

    def __init__(self, tokenizer, say):
        self.tok, self.say = tokenizer, say

    def __call__(self, input_ids, scores):
        for row, ids in enumerate(input_ids.tolist()):
            nxt = self.say(self.tok.decode(ids, skip_special_tokens=True))
            tid = self.tok.eos_token_id if nxt is None else self.tok.convert_tokens_to_ids(nxt)
            scores[row] = float("-inf")
            scores[row, tid] = 0.0
        return scores


def _policy():
    from evotrainer.config import TinyPolicyConfig
    from evotrainer.policy.build import build_model, build_tokenizer

    tok = build_tokenizer()
    return build_model(TinyPolicyConfig(hidden_size=16, num_layers=1, num_heads=2), len(tok), 0), tok


def _run(d, tasks, say, budget=40, cap=4):
    from transformers import LogitsProcessorList

    model, tok = _policy()
    eos = [tok.eos_token_id]
    prompts = [tok(d.canonical_prompt(t))["input_ids"] for t in tasks]
    sampling = dict(do_sample=False, logits_processor=LogitsProcessorList([_Dictate(tok, say)]))
    return tok, run_turns(model, tok, prompts, [d.environment(t) for t in tasks], budget, cap, eos,
                          stop_token_ids(tok, d, eos), sampling)


def test_the_environment_mask_covers_exactly_the_tool_output():
    d = ToolsDomain()
    tasks = [t for t in d.splits(0, SIZES)["dev"] if len(t["keys"]) == 2][:3]
    by_prompt = {d.canonical_prompt(t): d.reference_completion(t) for t in tasks}

    def say(text):  # the reference transcript; the environment writes its results itself
        prompt = next(p for p in by_prompt if text.startswith(p))
        done, ref = text[len(prompt):], by_prompt[prompt]
        return ref[len(done)] if len(done) < len(ref) else None

    tok, turns = _run(d, tasks, say)
    for task, t in zip(tasks, turns):
        policy = tok.decode([i for i, m in zip(t.completion_ids, t.env_mask) if m], skip_special_tokens=True)
        env = tok.decode([i for i, m in zip(t.completion_ids, t.env_mask) if not m])
        assert env == "".join(f"={task['table'][k]};" for k in task["keys"])
        assert policy == "".join(f"get({k})" for k in task["keys"]) + task["answer"]
        assert (t.turns, t.tool_calls, t.tool_errors, t.hit_turn_cap, t.ended) == (3, 2, 0, False, True)
        assert d.verify(task, tok.decode(t.completion_ids, skip_special_tokens=True))


def test_the_turn_cap_stops_a_rollout_that_keeps_calling():
    d = ToolsDomain()
    tasks = d.splits(0, SIZES)["dev"][:2]

    def say(text):  # get(xyz) for ever: a key no table has
        turn = text.rsplit(";", 1)[-1].split("=", 1)[-1]
        return "get(xyz)"[len(turn)]

    _, turns = _run(d, tasks, say, budget=60, cap=3)
    for t in turns:
        assert (t.turns, t.tool_calls, t.tool_errors, t.hit_turn_cap, t.ended) == (3, 3, 3, True, False)


def test_the_turn_cap_knob_sets_training_s_cap_and_a_single_turn_domain_refuses_it():
    from evotrainer.harness.knobs import read_knobs
    from evotrainer.trainer.grpo import phase_rollout_func
    from tests.conftest import ROOT

    knobs = read_knobs(ROOT / "harness_repo" / "tools")
    assert knobs.max_turns == 4 and phase_rollout_func(get_domain("tools"), knobs, [1]) is not None
    assert phase_rollout_func(get_domain("math"), knobs.model_copy(update={"max_turns": None}), [1]) is None
    with pytest.raises(ValueError, match="single-turn"):
        phase_rollout_func(get_domain("math"), knobs, [1])


@pytest.mark.slow
def test_a_short_tools_phase_trains_and_records_its_turns(tmp_path, policy_cache, monkeypatch):
    from evotrainer import config as C
    from evotrainer.config import SandboxConfig, TrainingConfig
    from evotrainer.harness.repo import HarnessRepo
    from evotrainer.rollouts import read_rollouts
    from evotrainer.rundir import RunDir
    from evotrainer.trainer.grpo import run_phase
    from evotrainer.trainer.wire import PhaseRequest

    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    rd = RunDir(tmp_path / "run")
    rd.init(C.apply_overrides(C.parse({}), ["domain=tools", "policy.tiny.warmup_steps=60",
                                            "policy.tiny.warmup_target_accuracy=1.0", "training.eval_size=10",
                                            "training.dev_size=40", "training.train_pool_size=100"]), log=lambda _: None)
    base = rd.ensure_policy(log=lambda _: None)
    req = PhaseRequest(run_dir=str(rd.root), phase=1, harness_sha=HarnessRepo(rd.harness).sha("main"),
                       init_checkpoint=base, steps=2, seed=0, domain="tools",
                       training=TrainingConfig(prompts_per_step=2, eval_size=10, dev_size=40),
                       sandbox=SandboxConfig(backend="process"))
    result = run_phase(req)
    rows = read_rollouts(rd.rollout_file(1))
    assert result.steps == 2 and len(rows) == 2 * 2 * 8
    assert all(1 <= r["turns"] <= 4 and r["tool_calls"] <= r["turns"] for r in rows)
    assert all(r["hit_turn_cap"] == (r["turns"] == 4 and r["tool_calls"] == 4) or not r["hit_turn_cap"] for r in rows)
