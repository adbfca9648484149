"""Loading a policy and scoring it: the evaluator's held-out evaluation (greedy, or sampled pass@1 with k samples).

``load_policy`` loads any transformers checkpoint (a Hugging Face id or a local folder, or a LoRA adapter folder
over its base) with its tokenizer, in the dtype the device wants, and the LoRA config when asked. ``uses_chat``
and ``eval_prompt`` decide how the evaluator asks an instruct model (through its chat template). ``evaluate`` scores a model on evaluator tasks with the
domain's canonical prompt and verifier, so accuracy is comparable across harness versions. Used by the trainer
service (phases and ``POST /evaluate``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from evotrainer.contracts import EvalResult


def resolve_device(pref: str) -> str:
    import torch

    if pref == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return pref



class PolicyLoadError(RuntimeError):
    """The policy could not be loaded: a missing path, an unknown Hugging Face id, or no way to download it."""


def is_adapter(path: str) -> bool:
    """A LoRA checkpoint: a folder holding a PEFT adapter (``adapter_config.json``) over a named base model."""
    return (Path(path) / "adapter_config.json").is_file()


GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")  # what a tokenizer.json saved as it is names


def load_tokenizer(path: str):
    """The tokenizer saved at ``path``, as it was saved. A folder whose tokenizer names the generic class (the tiny
    policy's character-level tokenizer) loads with that class: ``AutoTokenizer`` would pick the class of the model's
    type instead (Qwen2's, for the tiny Qwen2-style model), rebuild the pipeline from the vocabulary, and drop every
    space and newline, so the policy would read and write text other than what it was warmed up on. Anything else
    (a Hugging Face id, a checkpoint of a real model) loads with ``AutoTokenizer``."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config = Path(path) / "tokenizer_config.json"
    if config.is_file() and (Path(path) / "tokenizer.json").is_file():
        try:
            named = json.loads(config.read_text()).get("tokenizer_class")
        except (OSError, ValueError):
            named = None
        if named in GENERIC_TOKENIZERS:
            return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def load_policy(path: str, device: str, dtype: str, lora: bool, lora_rank: int):
    """(model, tokenizer, peft_config) for ``path``: a full checkpoint, a Hugging Face id, or a LoRA adapter folder.

    An adapter folder (what a phase saves when LoRA is on) loads its base model and the adapter on top, trainable,
    so the next phase goes on training the same adapter (peft_config is then None: the model is already a
    PeftModel). A full checkpoint with ``lora`` gets a fresh adapter config for TRL to wrap the model with.
    """
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = torch.float32
    if dtype == "bfloat16" or (dtype == "auto" and device == "cuda"):
        torch_dtype = torch.bfloat16
    adapter = is_adapter(path)
    try:
        tokenizer = load_tokenizer(path)
        if adapter:
            from peft import PeftConfig, PeftModel

            base = PeftConfig.from_pretrained(path).base_model_name_or_path
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch_dtype), path,
                                              is_trainable=True)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except (OSError, ValueError) as err:  # transformers' way of saying "not found" / "cannot download"
        first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
        raise PolicyLoadError(f"could not load the policy {path!r}: {first}") from err
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    peft_config = None
    if lora and not adapter:
        from peft import LoraConfig

        peft_config = LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    return model, tokenizer, peft_config


def uses_chat(tokenizer, setting: str) -> bool:
    """Whether prompts go through the tokenizer's chat template (``policy.chat``: auto, on or off)."""
    if setting == "on" and not getattr(tokenizer, "chat_template", None):
        raise PolicyLoadError("policy.chat is on but the policy's tokenizer has no chat template")
    return setting == "on" or (setting == "auto" and bool(getattr(tokenizer, "chat_template", None)))


def eval_prompt(tokenizer, domain, task: dict, chat: bool) -> str:
    """The evaluator's prompt of a held-out task: the canonical text, or the domain's instruction as one user
    message through the chat template. Fixed by the evaluator, never by the harness, so scores stay comparable."""
    if not chat:
        return domain.canonical_prompt(task)
    return tokenizer.apply_chat_template([{"role": "user", "content": domain.instruction(task)}],
                                         add_generation_prompt=True, tokenize=False)


def evaluate_as_configured(model, tokenizer, domain, tasks: list[dict], device: str, training, policy,
                           answers: bool = False) -> EvalResult:
    """:func:`evaluate` with the run's settings (``training.eval_*``, ``policy.chat``): the one way a phase, a trial's
    probe and ``POST /evaluate`` score a checkpoint, so they cannot disagree on how."""
    return evaluate(model, tokenizer, domain, tasks, training.eval_max_new_tokens, device,
                    batch_size=training.eval_batch_size, samples=training.eval_samples, chat=policy.chat,
                    answers=answers)


def answer_fingerprint(domain, texts: list[str]) -> str:
    """A short fingerprint (8 hex digits) of the answers ``texts`` (one task's completions) give: the domain's
    extracted answer of each, or its whole stripped text when the domain finds none in its format ("40." and "41."
    differ). Two checkpoints that give a task the same answers have the same fingerprint; a collision between two
    different answers has odds of 1 in 4 billion (``EvalResult.answers``)."""
    import hashlib

    said = []
    for text in texts:
        answer = domain.extract_answer(text)
        said.append(f"answer:{answer}" if answer is not None else f"text:{text.strip()}")
    return hashlib.blake2b("\x1f".join(said).encode(), digest_size=4).hexdigest()


def evaluate(model, tokenizer, domain, tasks: list[dict], max_new_tokens: int, device: str,
             batch_size: int = 128, samples: int = 0, seed: int = 0, chat: str = "auto",
             answers: bool = False) -> EvalResult:
    """Held-out evaluation with the evaluator's canonical prompt and verifier.

    ``samples`` = 0: one greedy completion per task, item score 0 or 1. ``samples`` = k > 0: sampled pass@1, k
    completions per task at temperature 1 (no top-k/top-p), item score = the share the verifier accepts; the
    sampling is seeded by ``seed`` (the caller's random state is left as it was), so two checkpoints scored on the
    same tasks draw from the same random stream. ``batch_size`` counts completions per generate call. ``chat``
    is ``policy.chat`` (see ``uses_chat``). The same completions are also scored by the domain's tolerant verdict
    (``Domain.verify_tolerant``, the ``tolerant_*`` fields): no second generation, and it only reports. With
    ``answers``, each task's answers are kept as a short fingerprint (:func:`answer_fingerprint`,
    ``EvalResult.answers``): the dev split's and the trials' probe, whose answers a trial compares with the start's.
    """
    import torch

    as_chat = uses_chat(tokenizer, chat)
    # the chat template already starts the text with its special tokens: the tokenizer must not add them again
    encode = dict(add_special_tokens=False) if as_chat else {}

    model.eval()
    k = max(samples, 1)
    per_call = max(1, batch_size // k)
    scores_by: dict[str, list[float]] = defaultdict(list)
    tolerant_by: dict[str, list[float]] = defaultdict(list)
    items: dict[str, float] = {}
    tolerant: dict[str, float] = {}
    given: dict[str, str] = {}  # task id -> answer fingerprint, with ``answers``
    ended: list[int] = []  # tokens (end-of-sequence included) of each completion that ended within the budget
    eos = tokenizer.eos_token_id
    sampling = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=k) if samples \
        else dict(do_sample=False)
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if str(device).startswith("cuda") else []):
        torch.manual_seed(seed)
        for i in range(0, len(tasks), per_call):
            chunk = tasks[i : i + per_call]
            texts, rows = _generate(model, tokenizer, domain, chunk, as_chat, encode, device, max_new_tokens,
                                    eos, sampling, k)
            repeated = [t for t in chunk for _ in range(k)]  # one verifier batch per chunk (code: one executor call)
            verdicts = domain.verify_batch(repeated, texts)
            lenients = domain.verify_tolerant_batch(repeated, texts, verdicts)
            for j, t in enumerate(chunk):
                own = texts[j * k : (j + 1) * k]
                score = sum(bool(v) for v in verdicts[j * k : (j + 1) * k]) / k  # a grader error (None) scores 0
                lenient = sum(bool(v) for v in lenients[j * k : (j + 1) * k]) / k
                ended += [ids.index(eos) + 1 for ids in rows[j * k : (j + 1) * k] if eos in ids]
                scores_by[t["difficulty"]].append(score)
                tolerant_by[t["difficulty"]].append(lenient)
                items[t["id"]], tolerant[t["id"]] = score, lenient
                if answers:
                    given[t["id"]] = answer_fingerprint(domain, own)
    allv = [v for vs in scores_by.values() for v in vs]
    allt = [v for vs in tolerant_by.values() for v in vs]
    mean = lambda by: {d: sum(v) / len(v) for d, v in sorted(by.items())}  # noqa: E731 (per difficulty)
    return EvalResult(
        accuracy=sum(allv) / max(len(allv), 1), n=len(allv), by_difficulty=mean(scores_by),
        truncated_rate=(len(allv) * k - len(ended)) / max(len(allv) * k, 1), items=items,  # the rest were cut
        ended_length=ended_length(ended, max_new_tokens),
        tolerant_accuracy=sum(allt) / max(len(allt), 1), tolerant_by_difficulty=mean(tolerant_by),
        tolerant_items=tolerant, answers=given,
    )


def _generate(model, tokenizer, domain, chunk: list[dict], as_chat: bool, encode: dict, device: str,
              max_new_tokens: int, eos: int, sampling: dict, k: int) -> tuple[list[str], list[list[int]]]:
    """The completions (text and token ids, k per task in task order) of one chunk of evaluator tasks, in the
    domain's rollout shape: one generation, or the multi-turn loop against each task's environment at the
    evaluator's turn cap and budget (``eval_turn_cap``; the larger of ``max_new_tokens`` and
    ``transcript_budget`` bounds the whole transcript)."""
    import torch

    from evotrainer.trainer.shapes import run_turns, shape_of, stop_token_ids

    prompts = [eval_prompt(tokenizer, domain, t, as_chat) for t in chunk]
    if shape_of(domain) == "multi_turn":
        sampling = {key: v for key, v in sampling.items() if key != "num_return_sequences"}
        ids = [tokenizer(p, **encode)["input_ids"] for p in prompts for _ in range(k)]
        envs = [domain.environment(t) for t in chunk for _ in range(k)]
        budget = max(max_new_tokens, domain.transcript_budget)  # a transcript is longer than an answer
        turns = run_turns(model, tokenizer, ids, envs, budget, domain.eval_turn_cap, [eos],
                          stop_token_ids(tokenizer, domain, [eos]), sampling)
        rows = [t.completion_ids for t in turns]
        return tokenizer.batch_decode(rows, skip_special_tokens=True), rows
    enc = tokenizer(prompts, return_tensors="pt", padding=True, **encode).to(device)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=eos, **sampling)
    gen = out[:, enc["input_ids"].shape[1]:]  # k rows per task, in task order
    return tokenizer.batch_decode(gen, skip_special_tokens=True), gen.tolist()


def ended_length(lengths: list[int], budget: int) -> dict[str, float]:
    """Quantiles (p50, p90, p99, max) of the lengths of the completions that ended within ``budget`` tokens, how
    many ended (n), and the budget: what the policy writes when the budget does not cut it
    (``EvalResult.ended_length``)."""
    if not lengths:
        return {"n": 0, "budget": budget}
    xs = sorted(lengths)
    at = lambda q: float(xs[min(len(xs) - 1, int(q * len(xs)))])  # noqa: E731 (the value a share q stays under)
    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": float(xs[-1]), "n": len(xs), "budget": budget}
