"""Loading a policy and scoring it: the evaluator's greedy held-out evaluation.

``load_policy`` loads any transformers checkpoint (a Hugging Face id or a local folder) with its tokenizer, in the
dtype the device wants, and the LoRA config when asked. ``evaluate`` scores a model on evaluator tasks with the
domain's canonical prompt and verifier, so accuracy is comparable across harness versions. Used by the trainer
service (phases and ``POST /evaluate``).
"""

from __future__ import annotations

from collections import defaultdict

from evotrainer.contracts import EvalResult


def resolve_device(pref: str) -> str:
    import torch

    if pref == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return pref



class PolicyLoadError(RuntimeError):
    """The policy could not be loaded: a missing path, an unknown Hugging Face id, or no way to download it."""


def load_policy(path: str, device: str, dtype: str, lora: bool, lora_rank: int):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = torch.float32
    if dtype == "bfloat16" or (dtype == "auto" and device == "cuda"):
        torch_dtype = torch.bfloat16
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except (OSError, ValueError) as err:  # transformers' way of saying "not found" / "cannot download"
        first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
        raise PolicyLoadError(f"could not load the policy {path!r}: {first}") from err
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    return model, tokenizer, peft_config


def evaluate(model, tokenizer, domain, tasks: list[dict], max_new_tokens: int, device: str,
             batch_size: int = 128) -> EvalResult:
    """Greedy held-out evaluation with the evaluator's canonical prompt and verifier."""
    import torch

    model.eval()
    correct_by: dict[str, list[bool]] = defaultdict(list)
    items: dict[str, float] = {}
    truncated = 0
    eos = tokenizer.eos_token_id
    for i in range(0, len(tasks), batch_size):
        chunk = tasks[i : i + batch_size]
        enc = tokenizer([domain.canonical_prompt(t) for t in chunk], return_tensors="pt", padding=True).to(device)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
        gen = out[:, enc["input_ids"].shape[1]:]
        texts = tokenizer.batch_decode(gen, skip_special_tokens=True)
        for t, text, ids in zip(chunk, texts, gen.tolist()):
            ok = domain.verify(t, text)
            correct_by[t["difficulty"]].append(ok)
            items[t["id"]] = float(ok)
            truncated += eos not in ids
    allv = [v for vs in correct_by.values() for v in vs]
    return EvalResult(
        accuracy=sum(allv) / max(len(allv), 1), n=len(allv),
        by_difficulty={k: sum(v) / len(v) for k, v in sorted(correct_by.items())},
        truncated_rate=truncated / max(len(allv), 1), items=items,
    )

