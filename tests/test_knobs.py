"""Every knob in harness.yaml changes the update; a value that could not act is refused.

Each case trains two generated batches from the same checkpoint, seed and tasks with one knob changed, and
compares the weights with the baseline's. Training is deterministic (the baseline twice gives the same weights), so
a difference is the knob's doing. Values that cannot act (clip epsilons with one update per batch, a reward scale
that the advantage's std divides out) fail validation with a message saying why. A phase boundary is not a
restart: the optimizer's moments carry into the next phase unless the config turns it off.
"""

from __future__ import annotations

import pytest
import torch

from evotrainer import config as C
from evotrainer.harness.knobs import Knobs, KnobsError, parse_knobs
from evotrainer.harness.repo import HarnessRepo
from evotrainer.rundir import RunDir
from tests.conftest import FAST

TWO_COMPONENTS = '''
def correct(sample):
    return 1.0 if sample["completion"].split("\\n", 1)[0].strip() == sample["task"]["answer"] else 0.0


def short(sample):
    return -0.1 * sample["completion_tokens"]


COMPONENTS = {"correct": correct, "short": short}
'''

# knob -> (what the baseline has, what the variant has); both sides must be valid knobs. The baseline is the seed
# with a short completion budget (so some completions are cut) and two reward components.
CASES = {
    "learning_rate": ({}, {"learning_rate": 3e-4}),
    "group_size": ({}, {"group_size": 4}),
    "temperature": ({}, {"temperature": 1.5}),
    "max_completion_length": ({}, {"max_completion_length": 6}),
    "loss_type": ({}, {"loss_type": "dr_grpo"}),
    "beta": ({}, {"beta": 0.5}),
    "epsilon": ({"updates_per_batch": 2, "learning_rate": 3e-3}, {"updates_per_batch": 2, "learning_rate": 3e-3,
                                                                 "epsilon": 0.001}),
    "epsilon_high": ({"updates_per_batch": 2, "learning_rate": 3e-3}, {"updates_per_batch": 2,
                                                                      "learning_rate": 3e-3, "epsilon_high": 0.001}),
    "scale_rewards": ({}, {"scale_rewards": "batch"}),
    "mask_truncated_completions": ({}, {"mask_truncated_completions": True}),
    "reward_weights": ({}, {"reward_weights": {"correct": 1.0, "short": 0.3}}),
    "curriculum_weights": ({}, {"curriculum_weights": {"1": 1.0, "2": 0.0, "3": 0.0, "4": 0.0}}),
    "lr_schedule": ({}, {"lr_schedule": "linear"}),
    "warmup_steps": ({}, {"warmup_steps": 60}),  # the run is at step 50 of 100: still warming up
    "max_grad_norm": ({}, {"max_grad_norm": 0.01}),
    "weight_decay": ({"learning_rate": 3e-3}, {"learning_rate": 3e-3, "weight_decay": 0.5}),
    "updates_per_batch": ({}, {"updates_per_batch": 2}),
    "oversample": ({}, {"oversample": 2}),
}


# knobs that act only in a multi-turn domain (a math phase refuses them): tests/test_tools_domain.py
MULTI_TURN = ("max_turns",)


def test_every_knob_has_a_case():
    assert sorted(CASES) == sorted(k for k in Knobs.model_fields if k not in MULTI_TURN)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, policy_cache) -> RunDir:
    import os

    os.environ["EVOTRAINER_CACHE"] = str(policy_cache)
    rd = RunDir(tmp_path_factory.mktemp("knobs") / "run")
    rd.init(C.apply_overrides(C.parse({}), FAST), log=lambda _: None)
    rd.ensure_policy(log=lambda _: None)
    return rd


def _harness(repo: HarnessRepo, name: str, changes: dict) -> str:
    import yaml

    knobs = yaml.safe_load(repo.show_file("main", "harness.yaml"))
    knobs.update({"max_completion_length": 4, "reward_weights": {"correct": 1.0, "short": 1.0}})
    knobs.update(changes)
    parse_knobs(yaml.safe_dump(knobs))  # a valid harness on both sides
    return repo.commit_candidate(f"candidates/knob-{name}", repo.sha("main"),
                                 {"harness.yaml": yaml.safe_dump(knobs), "rewards.py": TWO_COMPONENTS},
                                 f"knob {name}", "test", {})


def _weights_after(rd: RunDir, sha: str, tag: str, **request) -> dict[str, torch.Tensor]:
    from evotrainer.config import SandboxConfig, TrainingConfig
    from evotrainer.trainer.grpo import _train
    from evotrainer.trainer.wire import PhaseRequest

    request = {"init_checkpoint": str(rd.root / "policy" / "base"), **request}
    req = PhaseRequest(run_dir=str(rd.root), phase=1, harness_sha=sha, steps=2, training=TrainingConfig(prompts_per_step=4),
                       seed=0, sandbox=SandboxConfig(backend="process"), step_offset=50, run_steps=100, **request)
    out = _train(req, lambda _: None, rd.scratch / f"knob-{tag}", task_seed=7)
    return {k: v.detach().clone() for k, v in out.model.state_dict().items()}


@pytest.fixture(scope="module")
def baselines(run_dir: RunDir) -> dict[str, dict[str, torch.Tensor]]:
    return {}


def _baseline(run_dir: RunDir, baselines: dict, changes: dict) -> dict[str, torch.Tensor]:
    key = repr(sorted(changes.items()))
    if key not in baselines:
        repo = HarnessRepo(run_dir.harness)
        baselines[key] = _weights_after(run_dir, _harness(repo, f"base-{len(baselines)}", changes), key)
    return baselines[key]


def test_training_is_deterministic_so_a_difference_is_the_knobs(run_dir, baselines):
    repo = HarnessRepo(run_dir.harness)
    again = _weights_after(run_dir, _harness(repo, "base-again", {}), "again")
    base = _baseline(run_dir, baselines, {})
    assert all(torch.equal(base[k], again[k]) for k in base)


@pytest.fixture(scope="module")
def start(run_dir: RunDir) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return {k: v.detach().clone() for k, v in AutoModelForCausalLM.from_pretrained(run_dir.policy_base).state_dict()
            .items()}


@pytest.fixture(scope="module")
def rounding(run_dir, baselines, start) -> float:
    """How far the weights end from the baseline's when only rounding changes: the learning rate times 1 + 1e-6."""
    lr = parse_knobs(HarnessRepo(run_dir.harness).show_file("main", "harness.yaml")).learning_rate
    nudged = _weights_after(run_dir, _harness(HarnessRepo(run_dir.harness), "rounding",
                                              {"learning_rate": lr * (1 + 1e-6)}), "rounding")
    return _apart(_baseline(run_dir, baselines, {}), nudged, start)


@pytest.mark.parametrize("knob", sorted(CASES))
def test_the_knob_changes_the_update(run_dir, baselines, start, rounding, knob):
    """Not by rounding: the weights move at least 0.1% of the baseline's own move away from where the baseline went,
    and 100 times further than a change that only moves rounding (measured here: 1.4% for weight_decay, the
    smallest, to 216% for learning_rate)."""
    base_changes, variant = CASES[knob]
    base = _baseline(run_dir, baselines, base_changes)
    changed = _weights_after(run_dir, _harness(HarnessRepo(run_dir.harness), knob, variant), knob)
    apart = _apart(base, changed, start)
    assert apart > max(1e-3, 100 * rounding), (f"{knob} did not change the update ({apart:.2e} of the baseline's "
                                               f"move; rounding alone moves {rounding:.2e})")


def test_a_change_of_rounding_alone_is_told_from_an_acting_knob(rounding):
    assert 0 < rounding < 1e-5  # it moves the weights, but by far less than the threshold of an acting knob


def _apart(base: dict[str, torch.Tensor], other: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> float:
    """How far ``other`` ended from ``base``, as a share of how far ``base`` moved from ``start``."""
    def norm(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
        return sum(float(((a[k] - b[k]).double() ** 2).sum()) for k in start) ** 0.5

    moved = norm(base, start)
    assert moved > 0, "the baseline did not train"
    return norm(other, base) / moved


@pytest.mark.parametrize("text, says", [
    ("epsilon: 0.1", "act only with updates_per_batch > 1"),
    ("epsilon_high: 0.28", "act only with updates_per_batch > 1"),
])
def test_a_value_that_could_not_act_is_refused(text, says):
    from evotrainer.harness.repo import seed_dir

    seed = (seed_dir("math") / "harness.yaml").read_text()
    key = text.split(":")[0]
    lines = [text if line.startswith(f"{key}:") else line for line in seed.splitlines()]
    assert text in lines
    with pytest.raises(KnobsError, match=says):
        parse_knobs("\n".join(lines))


def test_the_optimizer_state_carries_into_the_next_phase(run_dir):
    """Phase 2 from phase 1's checkpoint: with the saved moments the update differs from a fresh optimizer's."""
    from evotrainer.config import SandboxConfig, TrainingConfig
    from evotrainer.trainer.grpo import OPTIMIZER_STATE, run_phase
    from evotrainer.trainer.wire import PhaseRequest

    repo = HarnessRepo(run_dir.harness)
    dense = _harness(repo, "optimizer", {})  # a length term gives every group reward spread, so gradients flow
    training = TrainingConfig(prompts_per_step=4, eval_max_new_tokens=4)
    common = dict(run_dir=str(run_dir.root), harness_sha=dense, steps=2, seed=0, sandbox=SandboxConfig(backend="process"))
    first = run_phase(PhaseRequest(phase=40, init_checkpoint=str(run_dir.root / "policy" / "base"), training=training,
                                   **common))
    assert (run_dir.checkpoint(40) / OPTIMIZER_STATE).is_file()
    carried = run_phase(PhaseRequest(phase=41, init_checkpoint=first.checkpoint_path, training=training, **common))
    fresh = run_phase(PhaseRequest(phase=42, init_checkpoint=first.checkpoint_path,
                                   training=training.model_copy(update={"carry_optimizer": False}),
                                   **common).model_copy(update={"phase": 42}))
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(carried.checkpoint_path).state_dict()
    b = AutoModelForCausalLM.from_pretrained(fresh.checkpoint_path).state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a)
    # constant schedule: no decay inside a phase, the harness's own rate throughout
    rate = parse_knobs(repo.show_file("main", "harness.yaml")).learning_rate
    assert carried.train["learning_rate"] == pytest.approx(rate)
    # the phase keeps its per-step log (what its means hide): one value per step, in order
    assert carried.trajectory["learning_rate"] == pytest.approx([rate, rate])
    assert len(carried.trajectory["entropy"]) == len(carried.trajectory["reward"]) == 2
    # the room the phase's prompts leave in the policy's window: the ceiling of the Engineer's budget moves
    from agents.roles import ceilings_of

    window = AutoModelForCausalLM.from_pretrained(carried.checkpoint_path).config.max_position_embeddings
    assert 0 < carried.train["budget_room"] < window
    assert ceilings_of([first, carried]) == {"max_completion_length": carried.train["budget_room"]}


def test_a_reward_weight_that_names_no_component_is_refused_in_training_and_replay():
    """Both call ``scoring.total_reward``: a weight for a component rewards.py does not define would weigh nothing
    (and would let the only real component's weight pass the rule above), so it fails in one line."""
    from evotrainer.harness.repo import seed_dir
    from evotrainer.judge.scoring import total_reward

    seed = (seed_dir("math") / "harness.yaml").read_text()
    knobs = parse_knobs(seed.replace("  correct: 1.0", "  correct: 2.0\n  corect: 1.0"))  # a typo beside it
    with pytest.raises(ValueError, match=r"^harness.yaml: reward_weights.corect names no reward component "
                                         r"\(rewards.py's COMPONENTS: correct\)"):
        total_reward({"correct": 1.0}, knobs)
    # the only component's weight divides out under group scaling; beside an unlisted second component it acts
    doubled = parse_knobs(seed.replace("  correct: 1.0", "  correct: 2.0"))
    with pytest.raises(ValueError, match=r"^harness.yaml: reward_weights.correct: the weight of the only reward "
                                         r"component cannot act"):
        total_reward({"correct": 1.0}, doubled)
    assert total_reward({"correct": 1.0, "short": 0.5}, doubled) == 2.5
    assert total_reward({"correct": 1.0, "short": -0.5}, parse_knobs(seed)) == 0.5  # an unweighted one counts once


def test_a_constant_factor_on_every_reward_is_no_knob_even_without_std_scaling():
    """Under ``scale_rewards: none`` the advantage keeps a constant factor, but AdamW's update divides it out (it
    acted only through gradient clipping): a reward scale is no knob, and the only component's weight is refused."""
    from evotrainer.harness.repo import seed_dir
    from evotrainer.judge.scoring import total_reward

    seed = (seed_dir("math") / "harness.yaml").read_text().replace("scale_rewards: group", "scale_rewards: none")
    with pytest.raises(KnobsError, match="reward_scale"):
        parse_knobs(seed + "reward_scale: 3.0\n")
    with pytest.raises(ValueError, match="the weight of the only reward component cannot act"):
        total_reward({"correct": 1.0}, parse_knobs(seed.replace("  correct: 1.0", "  correct: 3.0")))


def test_the_schedule_is_the_run_s_and_a_phase_boundary_does_not_restart_it():
    from evotrainer.trainer.hooks import lr_multiplier
    from evotrainer.trainer.wire import PhaseRequest

    def knobs(**changes) -> Knobs:
        from evotrainer.harness.repo import seed_dir

        text = (seed_dir("math") / "harness.yaml").read_text()
        for key, value in changes.items():
            text = "\n".join(f"{key}: {value}" if line.startswith(f"{key}:") else line for line in text.splitlines())
        return parse_knobs(text)

    assert {lr_multiplier(knobs(), s, 120) for s in (0, 60, 500)} == {1.0}  # constant by default
    warm = knobs(warmup_steps=10)
    assert [lr_multiplier(warm, s, 120) for s in (0, 4, 9, 10)] == [0.1, 0.5, 1.0, 1.0]
    for schedule in ("linear", "cosine"):
        k = knobs(lr_schedule=schedule)
        assert lr_multiplier(k, 0, 120) == 1.0 and lr_multiplier(k, 59.5, 120) == pytest.approx(0.55)
        assert lr_multiplier(k, 118, 120) > 0.1  # the last step that trains (119) is the first at a tenth
        assert lr_multiplier(k, 119, 120) == pytest.approx(0.1) == lr_multiplier(k, 500, 120)  # then held
    # three phases of 40: phase 2 starts where phase 1 ended (run step 40 follows 39), not at the top again
    cfg = C.apply_overrides(C.parse({}), ["phases=3", "training.steps_per_phase=40"])
    reqs = [PhaseRequest.make(cfg, "/r", p, "a" * 40, f"/ckpt/{p - 1}", 40, base_policy="/base") for p in (1, 2, 3)]
    assert [(r.step_offset, r.run_steps) for r in reqs] == [(0, 120), (40, 120), (80, 120)]
    k = knobs(lr_schedule="linear")
    end_of_1, start_of_2 = (lr_multiplier(k, reqs[p].step_offset + s, reqs[p].run_steps) for p, s in ((0, 39), (1, 0)))
    assert end_of_1 > start_of_2 > end_of_1 - 0.01


def test_the_kl_reference_is_the_run_s_starting_policy_unless_the_config_says_each_phase_s_start(run_dir, start):
    import shutil

    from transformers import AutoModelForCausalLM

    from evotrainer.trainer.wire import PhaseRequest

    base = str(run_dir.root / "policy" / "base")
    for which, expected in (("base", base), ("phase_start", "/ckpt/1")):
        cfg = C.apply_overrides(C.parse({}), [f"training.kl_reference={which}"])
        req = PhaseRequest.make(cfg, "/r", 2, "a" * 40, "/ckpt/1", 4, base_policy=base)
        assert req.reference_checkpoint == expected
    # and the reference reaches TRL's KL term: the same phase against another reference trains other weights
    other = run_dir.scratch / "other-reference"
    if not other.exists():
        model = AutoModelForCausalLM.from_pretrained(base)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.9)
        model.save_pretrained(other)
        shutil.copy(run_dir.root / "policy" / "base" / "tokenizer.json", other)
    sha = _harness(HarnessRepo(run_dir.harness), "kl-ref", {"beta": 0.5})
    near = _weights_after(run_dir, sha, "kl-base", reference_checkpoint=base)
    assert all(torch.equal(near[k], v) for k, v in _weights_after(run_dir, sha, "kl-base2").items())  # "" = init
    far = _weights_after(run_dir, sha, "kl-other", reference_checkpoint=str(other))
    assert _apart(near, far, start) > 1e-3


def test_with_lora_the_kl_reference_is_the_base_unless_the_config_says_each_phase_s_start(run_dir):
    """From a LoRA checkpoint (phase 2 on) TRL makes a frozen copy of the adapter ("ref") and takes it as the KL
    reference; with ``kl_reference: base`` the reference is the base model (the adapter switched off), so the same
    phase trains the adapter otherwise than against its phase-start copy."""
    from peft import get_peft_model

    from evotrainer.trainer.model import load_policy

    base = str(run_dir.root / "policy" / "base")
    ckpt = run_dir.scratch / "lora-phase-1"
    if not ckpt.exists():
        model, tokenizer, peft_config = load_policy(base, "cpu", "float32", True, 4)
        wrapped = get_peft_model(model, peft_config)
        with torch.no_grad():
            for name, p in wrapped.named_parameters():
                if "lora_B" in name:
                    p.add_(0.05)  # a trained adapter: the policy is not the base
        wrapped.save_pretrained(ckpt)
        tokenizer.save_pretrained(ckpt)
    sha = _harness(HarnessRepo(run_dir.harness), "kl-lora", {"beta": 0.5})

    def adapter(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v for k, v in state.items() if "lora_" in k and ".default." in k}

    start = adapter(load_policy(str(ckpt), "cpu", "float32", True, 4)[0].state_dict())
    lora = dict(init_checkpoint=str(ckpt), policy=C.PolicyConfig(lora=True, lora_rank=4))
    to_start = _weights_after(run_dir, sha, "lora-start", reference_checkpoint=str(ckpt), **lora)
    to_base = _weights_after(run_dir, sha, "lora-base", reference_checkpoint=base, **lora)
    assert any(".ref." in k for k in to_start) and not any(".ref." in k for k in to_base)
    assert _apart(adapter(to_start), adapter(to_base), start) > 1e-3
