"""What a real model needs besides the tiny policy, checked fast on small local models (the slow end-to-end run on
SmolLM2-135M is ``test_real_model.py``): chat prompts from the harness to TRL and to the evaluator, the verifier's
instruct-model answers, LoRA checkpoints saved as adapters and trained on again, the generation backend's mapping
to TRL, and the multi-process loss normaliser.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evotrainer.domains.math import MathDomain
from evotrainer.harness.repo import seed_dir
from evotrainer.rollouts import as_text
from evotrainer.trainer.generation import check, grpo_args
from evotrainer.trainer.grpo import policy_prompt
from sandbox import HarnessError, HarnessWorker
from tests.conftest import cli

TASK = {"id": "t", "difficulty": "2", "question": "", "expression": "12 + 7", "answer": "19"}
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.mark.parametrize("completion, answer", [
    ("19", "19"), ("12 + 7 = 19", "19"), ("12 + 7 = 19.\nBecause", "19"), ("The answer is: 19.", "19"),
    ("12 + 7 = 9", "9"), ("19 apples", None), ("= 19 20", None), ("", None), ("\n19", None),
])
def test_the_verifier_reads_an_instruct_models_first_line(completion: str, answer: str | None):
    domain = MathDomain()
    assert domain.extract_answer(completion) == answer
    assert domain.verify(TASK, completion) == (answer == "19")


def test_prompts_reach_the_policy_as_messages_or_text():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 1 + 1?"}]
    assert policy_prompt("1+1=", chat=True) == [{"role": "user", "content": "1+1="}]
    assert policy_prompt(messages, chat=True) == messages
    assert policy_prompt(messages, chat=False) == "Be brief.\nWhat is 1 + 1?"
    assert policy_prompt("1+1=", chat=False) == "1+1="
    # what rewards, filters and the rollout log see: text
    assert as_text(messages) == "system: Be brief.\nuser: What is 1 + 1?"
    assert as_text([{"role": "assistant", "content": "2"}]) == "2"


def _harness_with_prompt(tmp_path: Path, source: str) -> Path:
    dest = tmp_path / "harness"
    shutil.copytree(seed_dir("math", "math_chat"), dest)
    (dest / "prompt.py").write_text(source)
    return dest


def test_the_sandbox_passes_chat_messages_and_names_a_malformed_one(tmp_path: Path):
    with HarnessWorker(seed_dir("math", "math_chat"), backend="process") as worker:
        assert worker.prompts([TASK]) == [[{"role": "user", "content": "What is 12 + 7? Reply with only the number."}]]
    bad = _harness_with_prompt(tmp_path, "def make_prompt(task):\n    return [{'role': 'wizard', 'content': 'x'}]\n")
    with HarnessWorker(bad, backend="process") as worker, pytest.raises(HarnessError) as err:
        worker.prompts([TASK])
    assert "make_prompt returned list, expected str or a list of {role: system|user|assistant" in str(err.value)


def _tiny(tmp_path: Path, chat: bool) -> Path:
    """A small random char-level policy saved as a checkpoint folder (with a chat template when ``chat``)."""
    from evotrainer.config import TinyPolicyConfig
    from evotrainer.policy.build import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    if chat:
        tokenizer.chat_template = CHAT_TEMPLATE
    model = build_model(TinyPolicyConfig(hidden_size=32, num_layers=1, num_heads=2, max_length=96), len(tokenizer), 0)
    path = tmp_path / ("chat" if chat else "plain")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_the_evaluator_asks_a_chat_policy_through_its_template(tmp_path: Path):
    from evotrainer.trainer.model import PolicyLoadError, eval_prompt, load_policy, uses_chat

    domain = MathDomain()
    model, tokenizer, _ = load_policy(str(_tiny(tmp_path, chat=True)), "cpu", "float32", False, 8)
    assert uses_chat(tokenizer, "auto") and not uses_chat(tokenizer, "off")
    assert eval_prompt(tokenizer, domain, TASK, True) == \
        "<user>What is 12 + 7? Reply with only the number.\n<assistant>"
    assert eval_prompt(tokenizer, domain, TASK, False) == "12+7="
    _, plain, _ = load_policy(str(_tiny(tmp_path, chat=False)), "cpu", "float32", False, 8)
    assert not uses_chat(plain, "auto")
    with pytest.raises(PolicyLoadError, match="policy.chat is on but the policy's tokenizer has no chat template"):
        uses_chat(plain, "on")


def test_a_lora_checkpoint_is_an_adapter_that_loads_trainable_over_its_base(tmp_path: Path):
    import torch
    from peft import PeftModel, get_peft_model

    from evotrainer.trainer.model import is_adapter, load_policy

    base = _tiny(tmp_path, chat=False)
    model, tokenizer, peft_config = load_policy(str(base), "cpu", "float32", True, 4)
    assert peft_config is not None and peft_config.r == 4
    wrapped = get_peft_model(model, peft_config)  # what TRL does with the config
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.add_(0.01)  # a trained adapter: not the identity
    ckpt = tmp_path / "phase-0001"
    wrapped.save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    assert is_adapter(str(ckpt)) and not (ckpt / "model.safetensors").exists()

    again, _, config_again = load_policy(str(ckpt), "cpu", "float32", True, 4)
    assert isinstance(again, PeftModel) and config_again is None  # the next phase trains this adapter on
    trainable = {n for n, p in again.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    x = torch.tensor([[5, 6, 7]])
    assert torch.allclose(again(x).logits, wrapped(x).logits, atol=1e-5)


def test_generation_maps_to_trls_vllm_colocate_or_says_why_it_cannot(monkeypatch):
    from evotrainer.trainer import generation

    assert grpo_args("hf", 0.3, "cpu") == {"use_vllm": False}
    assert check("vllm", "cpu") == "trainer.generation: vllm needs a CUDA device (policy.device is cpu here); use hf"
    with pytest.raises(ValueError, match="trainer.generation: vllm"):
        grpo_args("vllm", 0.3, "cpu")
    if check("vllm", "cuda") is None:  # vLLM installed (a CUDA machine with the gpu extra)
        assert grpo_args("vllm", 0.5, "cuda") == {"use_vllm": True, "vllm_mode": "colocate",
                                                  "vllm_gpu_memory_utilization": 0.5}
    else:
        assert "vllm is not installed" in check("vllm", "cuda")
        # where vLLM can run (checked above), the mapping is TRL's colocate mode with the configured memory share
        monkeypatch.setattr(generation, "check", lambda *_: None)
        assert grpo_args("vllm", 0.5, "cuda") == {"use_vllm": True, "vllm_mode": "colocate",
                                                  "vllm_gpu_memory_utilization": 0.5}


def test_init_refuses_vllm_it_cannot_run_in_one_line(tmp_path: Path, cli_env):
    run = tmp_path / "run"
    proc = cli(["init", str(run), "--set", "trainer.generation=vllm", "--set", "policy.device=cpu"], cli_env,
               check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 2 and "error: trainer.generation: vllm needs a CUDA device" in out
    assert not run.exists()


@pytest.mark.skipif(__import__("torch").cuda.device_count() >= 8, reason="a machine with 8 GPUs can run this")
def test_init_refuses_more_processes_than_gpus_in_one_line(tmp_path: Path, cli_env):
    run = tmp_path / "run"
    proc = cli(["init", str(run), "--set", "trainer.processes=8", "--set", "policy.device=cuda"], cli_env,
               check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 2 and "error: trainer.processes is 8 but this machine has" in out, out
    assert not run.exists()


def test_the_config_reaches_the_trainer_request():
    from evotrainer.config import apply_overrides, parse
    from evotrainer.trainer.wire import EvalRequest, PhaseRequest

    cfg = apply_overrides(parse({}), ["policy.chat=off", "trainer.generation=vllm", "policy.lora=true",
                                      "trainer.vllm_gpu_memory_utilization=0.6", "trainer.processes=2",
                                      "trainer.accelerate_args=[--gpu_ids, '0,1']"])
    req = PhaseRequest.make(cfg, "runs/x", 1, "0" * 40, "ckpt", 5)
    assert (req.policy.chat, req.trainer.generation, req.trainer.vllm_gpu_memory_utilization) == ("off", "vllm", 0.6)
    assert (req.trainer.processes, req.trainer.accelerate_args) == (2, ["--gpu_ids", "0,1"])
    assert req.training.carry_optimizer  # a LoRA adapter's moments carry like full weights'
    assert EvalRequest.make(cfg, "runs/x", "ckpt").policy.chat == "off"


def test_a_completion_budget_beyond_the_context_window_is_one_readable_error(tmp_path: Path):
    from evotrainer.trainer.grpo import check_budget
    from evotrainer.trainer.model import load_policy

    model, tokenizer, _ = load_policy(str(_tiny(tmp_path, chat=True)), "cpu", "float32", False, 8)
    prompt = [{"role": "user", "content": "What is 12 + 7? Reply with only the number."}]
    room = check_budget(model, tokenizer, [prompt, prompt], 24, chat=True)  # fits the 96-position window
    text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    assert room == 96 - len(tokenizer(text, add_special_tokens=False)["input_ids"])  # what a budget may fill
    with pytest.raises(ValueError, match=r"max_completion_length 90 \+ the longest prompt \(\d+ tokens\) exceed "
                                         r"the policy's context window of 96 tokens"):
        check_budget(model, tokenizer, [prompt], 90, chat=True)
