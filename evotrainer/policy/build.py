"""The policy's starting checkpoint: a tiny local model for the demo, or any Hugging Face model.

``policy.model: tiny`` builds a character-level tokenizer (a standard ``tokenizer.json``, loadable with
``AutoTokenizer``) and a small Qwen2-style model from scratch, then gives it a short supervised warm-up on the
warm-up split (disjoint from the RL pool, dev and held-out splits) until a probe of unseen warm-up tasks reaches
``warmup_target_accuracy``, so RL starts from a partly competent policy on tasks it has never seen. Nothing is
downloaded. The result is cached by a hash of its settings and warm-up split under
``$EVOTRAINER_CACHE`` (default ``~/.cache/evotrainer``) and copied into ``RUN_DIR/policy/base``.

Any other ``policy.model`` is a Hugging Face id or a local path: the trainer service loads it with transformers,
exactly as a user of TRL would. A value that names a local path must hold a checkpoint (``config.json``); it is
made absolute at ``evotrainer init``, so the run works from any directory. A mistyped path fails at start with one
line instead of reaching the hub as an id.

Build a run's tiny policy by hand with
``python -c "from evotrainer.rundir import RunDir; print(RunDir('runs/demo').ensure_policy())"``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import string
import time
from pathlib import Path

from evotrainer.config import Config, ConfigError, TinyPolicyConfig

SPECIAL = ["<pad>", "<eos>", "<unk>"]
CHARS = [c for c in string.printable if c not in "\x0b\x0c\r\t"]


def cache_root() -> Path:
    return Path(os.environ.get("EVOTRAINER_CACHE", Path.home() / ".cache" / "evotrainer"))


def build_tokenizer():
    """Character-level fast tokenizer: one token per printable character, plus pad/eos/unk."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + CHARS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def build_model(cfg: TinyPolicyConfig, vocab_size: int, seed: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.hidden_size * 3,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=max(1, cfg.num_heads // 2),
        max_position_embeddings=cfg.max_length,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
    )
    return Qwen2ForCausalLM(config)


def greedy_answers(model, tokenizer, prompts: list[str], max_new_tokens: int = 8) -> list[str]:
    """Each prompt's greedy completion, its first line stripped."""
    import torch

    model.eval()
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(
            **enc, max_new_tokens=max_new_tokens, do_sample=False,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    model.train()
    return [t.split("\n", 1)[0].strip() for t in texts]


Example = tuple[str, str, str | None]  # prompt, right answer, the domain's near miss (None: it has none)


def warmup_label(answer: str, miss: str | None, slip: float, rng: random.Random) -> str:
    """What one presentation of an example teaches: the near miss with probability ``slip`` (when there is one),
    else the right answer. At ``slip`` 0 it draws nothing, so a policy built before the knob is rebuilt identically."""
    return miss if slip and miss is not None and rng.random() < slip else answer


def warm_up(model, tokenizer, examples: list[Example], cfg: TinyPolicyConfig, seed: int, log=print,
            tick=lambda step, total: None, respond=greedy_answers) -> dict:
    """Supervised warm-up on (prompt, answer, near miss) until a held-back probe reaches the target accuracy.

    Each time an example is presented, its label is the near miss with probability ``cfg.warmup_slip`` (when it has
    one), else the right answer: the policy learns a common slip beside the right answer, so its samples hold the
    right answer more often than its greedy choice does, and RL has something to sharpen. The probe's prompts never
    occur in what the warm-up trains on (the pool repeats easy sums), so its accuracy is that on unseen tasks; it
    counts a greedy answer as competent when it is the right answer or the near miss (with ``warmup_slip`` 0 the
    near miss is never taught, and competent is right). ``respond(model, tokenizer, prompts)`` gives the probe's
    greedy answers (a multi-turn domain's: whole transcripts against each task's environment).
    """
    import torch

    rng = random.Random(seed)
    probe = examples[:200]
    probed = {prompt for prompt, _, _ in probe}
    train = [e for e in examples[200:] if e[0] not in probed]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warmup_lr)
    # linear ramp over 50 steps, then cosine decay to a tenth: the late, small steps steady the probe accuracy
    total = max(cfg.warmup_steps, 51)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(s, total) / total))))
    eos = tokenizer.eos_token_id
    model.train()
    t0 = time.time()

    def score() -> tuple[float, float]:  # a greedy answer is its first line stripped: so are the labels it meets
        said = respond(model, tokenizer, [p for p, _, _ in probe])
        right = sum(g == a.strip() for g, (_, a, _) in zip(said, probe))
        slipped = sum(cfg.warmup_slip > 0 and m is not None and g == m.strip() != a.strip()
                      for g, (_, a, m) in zip(said, probe))
        return (right + slipped) / len(probe), right / len(probe)

    competent, right = score()
    step = 0
    for step in range(1, cfg.warmup_steps + 1):
        batch = rng.sample(train, min(cfg.warmup_batch_size, len(train)))
        ids, starts = [], []
        for prompt, answer, miss in batch:
            label = warmup_label(answer, miss, cfg.warmup_slip, rng)
            p = tokenizer(prompt)["input_ids"]
            ids.append(p + tokenizer(label)["input_ids"] + [eos])
            starts.append(len(p))
        width = max(map(len, ids))
        x = torch.zeros(len(ids), width, dtype=torch.long)
        mask = torch.zeros_like(x)
        labels = torch.full_like(x, -100)
        for i, (seq, s) in enumerate(zip(ids, starts)):
            x[i, : len(seq)] = torch.tensor(seq)
            mask[i, : len(seq)] = 1
            labels[i, s : len(seq)] = torch.tensor(seq[s:])
        loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        tick(step, cfg.warmup_steps)
        if step % 50 == 0:
            competent, right = score()
            if step % 200 == 0:
                log(f"warm-up step {step}: loss {loss.item():.3f}, probe accuracy {right:.1%}"
                    + (f" (right or the near miss: {competent:.1%})" if cfg.warmup_slip else ""))
            if competent >= cfg.warmup_target_accuracy:
                break
    model.eval()
    return {"steps": step, "probe_accuracy": right, "probe_competent": competent, "seconds": round(time.time() - t0, 1)}


def _cache_key(cfg: Config, warmup_tasks: list[dict], near_miss=lambda task: None) -> str:
    """The cached policy's name: its settings, seed and what its warm-up teaches (tasks and near misses)."""
    taught = [(t, near_miss(t)) if cfg.policy.tiny.warmup_slip else t for t in warmup_tasks]
    blob = json.dumps(
        {"tiny": cfg.policy.tiny.model_dump(), "seed": cfg.seed, "domain": cfg.domain,
         "tasks": hashlib.sha256(json.dumps(taught, sort_keys=True).encode()).hexdigest(), "v": 4},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def resolve_model(model: str) -> str:
    """``policy.model`` as the trainer should load it: an absolute checkpoint folder, a Hugging Face id, or tiny.

    Raises ConfigError when the value names a local path that is missing or holds no checkpoint.
    """
    if model == "tiny":
        return model
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"policy.model: {model}: this folder holds no config.json (not a transformers "
                              f"checkpoint)")
        return str(path.resolve())
    if path.exists() or model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise ConfigError(f"policy.model: {model}: no such folder (give a local checkpoint folder, a Hugging Face "
                          f"id such as Qwen/Qwen2.5-0.5B-Instruct, or tiny)")
    return model


def transcripts(domain, tasks: list[dict], budget: int = 48):
    """``respond`` for the warm-up of a multi-turn domain: each prompt's greedy transcript, its tool calls answered
    by the environment of the task whose canonical prompt it is (``trainer.shapes.run_turns``)."""
    by_prompt = {domain.canonical_prompt(t): t for t in tasks}

    def respond(model, tokenizer, prompts: list[str]) -> list[str]:
        from evotrainer.trainer.shapes import run_turns, stop_token_ids

        eos = [tokenizer.eos_token_id]
        model.eval()
        turns = run_turns(model, tokenizer, [tokenizer(p)["input_ids"] for p in prompts],
                          [domain.environment(by_prompt[p]) for p in prompts], budget, domain.eval_turn_cap, eos,
                          stop_token_ids(tokenizer, domain, eos), dict(do_sample=False))
        model.train()
        return [tokenizer.decode(t.completion_ids, skip_special_tokens=True).strip() for t in turns]

    return respond


def ensure_base_policy(cfg: Config, run_dir: Path, warmup_tasks: list[dict], canonical_prompt, log=print,
                       progress=None, near_miss=lambda task: None, domain=None) -> str:
    """Return what the first phase starts from: a model id/path, or ``RUN_DIR/policy/base`` for the tiny policy.

    ``near_miss(task)`` is the domain's common wrong answer to a task (``Domain.near_miss``), taught in a share
    ``policy.tiny.warmup_slip`` of the warm-up's presentations.

    ``domain`` (the run's ``Domain``), when its rollouts are multi-turn (``trainer.shapes``), makes the warm-up teach
    its reference transcripts and probe them against the tasks' environments; otherwise the warm-up teaches answers.

    ``progress(label, total)``, when given, is a context manager yielding ``update(step=, total=)`` (a bar).
    """
    if cfg.policy.model != "tiny":
        return resolve_model(cfg.policy.model)
    target = run_dir / "policy" / "base"
    if (target / "config.json").exists():
        return str(target)
    cached = cache_root() / "policies" / _cache_key(cfg, warmup_tasks, near_miss)
    if not (cached / "config.json").exists():
        import torch

        if cfg.training.threads:
            torch.set_num_threads(cfg.training.threads)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the save's shard bar would interleave with the run's own output
        log("building the tiny policy (character-level Qwen2) and warming it up on the warm-up split")
        tokenizer = build_tokenizer()
        model = build_model(cfg.policy.tiny, len(tokenizer), cfg.seed)
        rng = random.Random(cfg.seed)
        tasks = list(warmup_tasks)
        rng.shuffle(tasks)
        turns = domain is not None and getattr(domain, "shape", "single_turn") == "multi_turn"
        examples = [(canonical_prompt(t), domain.reference_completion(t) if turns else t["answer"], near_miss(t))
                    for t in tasks]
        respond = transcripts(domain, tasks) if turns else greedy_answers
        bar = progress("warming up the tiny policy", cfg.policy.tiny.warmup_steps) if progress else \
            contextlib.nullcontext(lambda **_: None)
        with bar as update:
            stats = warm_up(model, tokenizer, examples, cfg.policy.tiny, cfg.seed, log=log,
                            tick=lambda step, total: update(step=step, total=total), respond=respond)
        tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        n_params = sum(p.numel() for p in model.parameters())
        (tmp / "warmup.json").write_text(json.dumps({**stats, "parameters": n_params}, indent=1))
        tmp.rename(cached) if not cached.exists() else shutil.rmtree(tmp)
        log(f"tiny policy ready: {n_params / 1e6:.2f}M parameters, {stats['steps']} warm-up steps, "
            f"probe accuracy {stats['probe_accuracy']:.1%}"
            + (f", right or the near miss {stats['probe_competent']:.1%}" if cfg.policy.tiny.warmup_slip else "")
            + f" ({stats['seconds']} s)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name("base.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(cached, tmp)
    tmp.rename(target)
    return str(target)
