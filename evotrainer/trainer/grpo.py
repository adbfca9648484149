"""One training phase: TRL's GRPOTrainer driven by a harness commit, every rollout logged, then held-out eval.

How the harness reaches TRL (all harness code runs in the sandbox worker, never in this process):

    harness.yaml        -> GRPOConfig (learning rate, group size, temperature, max completion length, loss type,
                           KL beta, clip epsilons, reward scaling, truncation masking) and reward/curriculum weights
    curriculum.py       -> how many tasks of each difficulty level the phase samples from the training pool
    prompt.py           -> the prompt of each sampled task
    rewards.py          -> one TRL reward function (the weighted sum of the harness's components)
    filters.py          -> :class:`HarnessGRPOTrainer` drops the rollouts and groups the filters reject from the
                           batch before the loss (TRL's core has no hook for this, so the trainer adds one)

The evaluator's verifier fills ``verified`` on every rollout (the harness never sees it), and the held-out
split is scored with the evaluator's canonical prompt after training, so accuracy is comparable across harness
versions. Outputs are written under temporary names and renamed when complete: a killed phase leaves nothing
that looks finished.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field

from evotrainer.contracts import EvalResult, PhaseResult, Rollout
from evotrainer.domains import get_domain
from evotrainer.harness import HarnessRepo, Knobs, read_knobs
from evotrainer.rollouts import group_stats, harness_view, level_history, read_rollouts, write_rollouts


class PhaseRequest(BaseModel):
    run_dir: str
    phase: int = Field(ge=1)
    harness_sha: str
    init_checkpoint: str = Field(description="model id or path the phase starts from")
    steps: int = Field(ge=1)
    prompts_per_step: int = Field(ge=1)
    seed: int = 0
    domain: str = "math"
    device: str = "auto"
    dtype: str = "auto"
    lora: bool = False
    lora_rank: int = 16
    eval_max_new_tokens: int = 16
    threads: int = 0
    sandbox_backend: str = "auto"
    sandbox_memory_mb: int = 2048
    sandbox_cpu_s: int = 300
    sandbox_call_timeout_s: float = 60
    pilot: bool = Field(False, description="a pilot: train from init_checkpoint, keep rollouts, save nothing")


Progress = Callable[[dict[str, Any]], None]


def _device(pref: str) -> str:
    import torch

    if pref == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return pref


def sample_tasks(pool: list[dict], weights: dict[str, float], n: int, rng: random.Random) -> list[dict]:
    """Draw ``n`` tasks, picking each task's level by ``weights`` and the task uniformly within the level."""
    by_level: dict[str, list[dict]] = defaultdict(list)
    for t in pool:
        by_level[t["difficulty"]].append(t)
    levels = [lv for lv in by_level if weights.get(lv, 0) > 0]
    if not levels:
        raise ValueError("curriculum gives zero weight to every level that has tasks")
    level_weights = [weights[lv] for lv in levels]
    out = []
    for _ in range(n):  # level and task drawn together: a longer phase starts with a shorter one's tasks
        level = rng.choices(levels, weights=level_weights)[0]
        out.append(rng.choice(by_level[level]))
    return out


def make_trainer_class():
    """Build the GRPOTrainer subclass (inside a function: importing TRL takes ~20 s on a small CPU)."""
    import torch
    from trl import GRPOTrainer

    class _HarnessGRPOTrainer(GRPOTrainer):
        """GRPOTrainer plus the harness's group filter and a per-rollout log.

        ``_generate_and_score_completions`` is TRL's batch-making step (generate, score, compute advantages).
        After it, the harness filters decide which rollouts train; the rejected rows are removed from every
        per-sample tensor, so they add neither gradient nor dilution to the loss. When nothing is kept, the step
        makes no update at all: the loss has no graph, no parameter gets a gradient, and the optimizer skips
        parameters without one (no momentum, no weight decay). Such a step is counted as skipped. This relies on
        one optimizer step per generated batch (steps_per_generation = 1, no gradient accumulation).
        """

        def __init__(self, *args, harness_hooks, **kwargs):
            super().__init__(*args, **kwargs)
            if self.args.steps_per_generation != 1 or self.args.gradient_accumulation_steps != 1:
                raise ValueError("the harness filter hook needs one optimizer step per generated batch")
            self.hooks = harness_hooks
            self._skip_update = False

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if self._skip_update:  # every rollout of this batch was filtered out
                return torch.zeros((), device=inputs["advantages"].device, requires_grad=True)
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            batch = self.hooks.take_batch()
            n = output["advantages"].shape[0]
            if len(batch) != n:
                raise RuntimeError(f"rollout buffer out of step with the batch ({len(batch)} vs {n})")
            advantages = output["advantages"].detach().cpu().tolist()
            kept = self.hooks.decide(batch, advantages, self.num_generations, self.state.global_step + 1)
            keep_idx = [i for i, k in enumerate(kept) if k]
            self._skip_update = not keep_idx
            if not keep_idx:
                output["advantages"] = torch.zeros_like(output["advantages"])
                output["completion_mask"] = torch.zeros_like(output["completion_mask"])
                self.hooks.skipped_batches += 1
            elif len(keep_idx) < n:
                idx = torch.tensor(keep_idx, device=output["advantages"].device)
                for key, value in list(output.items()):
                    if torch.is_tensor(value) and value.dim() >= 1 and value.shape[0] == n:
                        output[key] = value.index_select(0, idx.to(value.device))
                mask = output["completion_mask"]
                if "tool_mask" in output:
                    mask = mask * output["tool_mask"]
                output["num_items_in_batch"] = mask.sum()
            self.hooks.log(batch, kept, advantages)
            return output

    return _HarnessGRPOTrainer


class HarnessHooks:
    """The bridge between TRL's callbacks and the sandboxed harness worker, plus the rollout log."""

    def __init__(self, worker, knobs: Knobs, domain, phase: int, sha: str, eos_ids: list[int]):
        self.worker = worker
        self.knobs = knobs
        self.domain = domain
        self.phase = phase
        self.sha = sha
        self.eos_ids = set(eos_ids)
        self.pending: list[dict] = []
        self.rollouts: list[Rollout] = []
        self.skipped_batches = 0
        self.tokens = 0
        self.__name__ = "harness_reward"  # TRL names reward functions by __name__

    # TRL reward function --------------------------------------------------------------------------------------
    def __call__(self, prompts, completions, completion_ids, task_json, **_: Any) -> list[float]:
        tasks = [json.loads(t) for t in task_json]
        samples = []
        for prompt, completion, ids, task in zip(prompts, completions, completion_ids, tasks):
            truncated = not ids or ids[-1] not in self.eos_ids
            samples.append({"prompt": prompt, "completion": completion, "task": task, "truncated": truncated,
                            "completion_tokens": len(ids)})
        components = self.worker.score(samples)
        totals = []
        for sample, comps in zip(samples, components):
            total = self.knobs.reward_scale * sum(self.knobs.reward_weights.get(k, 1.0) * v for k, v in comps.items())
            sample["reward_components"] = comps
            sample["reward"] = float(total)
            sample["verified"] = self.domain.verify(sample["task"], sample["completion"])  # evaluator, not harness
            totals.append(float(total))
        self.pending.extend(samples)
        return totals

    def take_batch(self) -> list[dict]:
        batch, self.pending = self.pending, []
        return batch

    # filters --------------------------------------------------------------------------------------------------
    def decide(self, batch: list[dict], advantages: list[float], group_size: int, step: int) -> list[bool]:
        groups = []
        for g in range(0, len(batch), group_size):
            gid = f"p{self.phase}-s{step}-g{g // group_size}"
            members = batch[g : g + group_size]
            for i, s in enumerate(members):
                s.update(group_id=gid, sample_idx=i, step=step, phase=self.phase, advantage=advantages[g + i])
            groups.append([harness_view(s, s["task"]) for s in members])
        flags = self.worker.filter(groups)
        return [bool(f) for grp in flags for f in grp]

    def log(self, batch: list[dict], kept: list[bool], advantages: list[float]) -> None:
        for s, keep, adv in zip(batch, kept, advantages):
            self.tokens += s["completion_tokens"]
            masked = self.knobs.mask_truncated_completions and s["truncated"]  # TRL masks these out of the loss
            self.rollouts.append(Rollout(
                phase=self.phase, step=s["step"], harness_sha=self.sha, group_id=s["group_id"],
                sample_idx=s["sample_idx"], task_id=s["task"]["id"], difficulty=s["task"]["difficulty"],
                prompt=s["prompt"], completion=s["completion"], completion_tokens=s["completion_tokens"],
                truncated=s["truncated"], reward=s["reward"], reward_components=s["reward_components"],
                verified=s["verified"], advantage=float(adv) if keep and not masked else 0.0, kept=keep,
                extra={"masked_truncated": True} if masked else {},
            ))


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
            correct_by[t["difficulty"]].append(domain.verify(t, text))
            truncated += eos not in ids
    allv = [v for vs in correct_by.values() for v in vs]
    return EvalResult(
        accuracy=sum(allv) / max(len(allv), 1), n=len(allv),
        by_difficulty={k: sum(v) / len(v) for k, v in sorted(correct_by.items())},
        truncated_rate=truncated / max(len(allv), 1),
    )


def _atomic_dir(final: Path) -> Path:
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp


class PilotResult(BaseModel):
    harness_sha: str
    steps: int
    rollout_path: str
    stats: dict[str, float]
    wall_time_s: float


def _train(req: PhaseRequest, progress: Progress, scratch: Path, task_seed: int):
    """Train ``req.steps`` GRPO steps at the request's harness sha; return (model, tokenizer, hooks, logs)."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig

    from evotrainer.rundir import RunDir
    from evotrainer.sandbox import HarnessWorker, SandboxLimits

    if req.threads:
        torch.set_num_threads(req.threads)
    device = _device(req.device)
    rd = RunDir(req.run_dir)
    domain = get_domain(req.domain)
    repo = HarnessRepo(rd.harness)
    progress({"stage": "setup", "step": 0, "total": req.steps})
    limits = SandboxLimits(memory_mb=req.sandbox_memory_mb, cpu_s=req.sandbox_cpu_s,
                           call_timeout_s=req.sandbox_call_timeout_s)
    with repo.worktree(req.harness_sha) as harness_dir, HarnessWorker(
        harness_dir, limits=limits, backend=req.sandbox_backend, hide=rd.hidden_from_harness()
    ) as worker:
        knobs = read_knobs(harness_dir)
        history = {}
        if req.phase > 1 and rd.rollout_file(req.phase - 1).exists():
            history = level_history(read_rollouts(rd.rollout_file(req.phase - 1)))
        weights = worker.curriculum(domain.levels, knobs.curriculum_weights, history)
        tasks = sample_tasks(rd.train_tasks(), weights, req.steps * req.prompts_per_step, random.Random(task_seed))
        prompts = worker.prompts(tasks)
        dataset = Dataset.from_list([
            {"prompt": p, "task_json": json.dumps(t), "task_id": t["id"]} for p, t in zip(prompts, tasks)
        ])
        model, tokenizer, peft_config = load_policy(req.init_checkpoint, device, req.dtype, req.lora, req.lora_rank)
        shutil.rmtree(scratch, ignore_errors=True)
        args = GRPOConfig(
            output_dir=str(scratch),
            learning_rate=knobs.learning_rate,
            num_generations=knobs.group_size,
            per_device_train_batch_size=req.prompts_per_step * knobs.group_size,
            gradient_accumulation_steps=1,
            steps_per_generation=1,
            max_steps=req.steps,
            temperature=knobs.temperature,
            max_completion_length=knobs.max_completion_length,
            loss_type=knobs.loss_type,
            beta=knobs.beta,
            epsilon=knobs.epsilon,
            epsilon_high=knobs.epsilon_high,
            scale_rewards=knobs.scale_rewards,
            mask_truncated_completions=knobs.mask_truncated_completions,
            shuffle_dataset=False,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=req.seed + req.phase,
            bf16=device == "cuda" and req.dtype != "float32",
            use_cpu=device == "cpu",
            disable_tqdm=True,
            log_completions=False,
            dataloader_num_workers=0,
        )
        hooks = HarnessHooks(worker, knobs, domain, req.phase, req.harness_sha, [tokenizer.eos_token_id])
        train_logs: dict[str, list[float]] = defaultdict(list)

        class _Progress(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kw):
                for k, v in (logs or {}).items():
                    if isinstance(v, (int, float)) and math.isfinite(v):
                        train_logs[k].append(float(v))

            def on_step_end(self, args, state, control, **kw):
                progress({"stage": "train", "step": state.global_step, "total": req.steps})

        trainer = make_trainer_class()(
            model=model, processing_class=tokenizer, reward_funcs=[hooks], args=args, train_dataset=dataset,
            peft_config=peft_config, callbacks=[_Progress()], harness_hooks=hooks,
        )
        trainer.train()
        model = trainer.model
        if req.lora:
            model = model.merge_and_unload()
    shutil.rmtree(scratch, ignore_errors=True)
    return model, tokenizer, hooks, train_logs, device, domain, rd


def run_phase(req: PhaseRequest, progress: Progress = lambda _: None) -> PhaseResult:
    """Train one phase at ``req.harness_sha`` and return its PhaseResult (also written to result.json)."""
    from evotrainer.rundir import RunDir

    t0 = time.time()
    ckpt = RunDir(req.run_dir).checkpoint(req.phase)
    done = ckpt / "result.json"
    if done.exists():  # finished before (e.g. the run was killed while polling): never train a phase twice
        result = PhaseResult.model_validate_json(done.read_text())
        if result.harness_sha == req.harness_sha:
            return result
    scratch = RunDir(req.run_dir).scratch / f"phase-{req.phase:04d}"
    model, tokenizer, hooks, logs, device, domain, rd = _train(req, progress, scratch, req.seed * 7919 + req.phase)

    progress({"stage": "eval", "step": req.steps, "total": req.steps})
    result_eval = evaluate(model, tokenizer, domain, rd.eval_tasks(), req.eval_max_new_tokens, device)
    rollout_path = rd.rollout_file(req.phase)
    write_rollouts(hooks.rollouts, rollout_path)
    stats = group_stats([r.model_dump() for r in hooks.rollouts])
    tmp = _atomic_dir(ckpt)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)

    def mean(key: str) -> float | None:
        values = logs.get(key) or []
        return sum(values) / len(values) if values else None

    train = {
        "reward_mean": stats["reward_mean"], "dead_group_ratio": stats["dead_group_ratio"],
        "kept_fraction": stats["kept_fraction"], "truncation_rate": stats["truncation_rate"],
        "verified_rate": stats["verified_rate"], "completion_length": stats["completion_tokens_mean"],
        "entropy": mean("entropy"), "kl": mean("kl"), "loss": mean("loss"),
    }
    result = PhaseResult(
        phase=req.phase, harness_sha=req.harness_sha, steps=req.steps,
        train={k: v for k, v in train.items() if v is not None},
        eval=result_eval, rollout_path=str(rollout_path), checkpoint_path=str(ckpt),
        wall_time_s=round(time.time() - t0, 2), tokens=hooks.tokens, skipped_batches=hooks.skipped_batches,
    )
    (tmp / "result.json").write_text(result.model_dump_json(indent=1))
    shutil.rmtree(ckpt, ignore_errors=True)
    tmp.rename(ckpt)
    progress({"stage": "done", "step": req.steps, "total": req.steps})
    return result


def run_pilot(req: PhaseRequest, progress: Progress = lambda _: None) -> PilotResult:
    """A few training steps at a harness sha from the current checkpoint: rollouts only, nothing saved.

    Main and a candidate piloted with the same request fields see the same tasks (the task seed does not
    depend on the sha), so their rollouts differ only by what the candidate changed.
    """
    from evotrainer.rundir import RunDir

    t0 = time.time()
    rd = RunDir(req.run_dir)
    out = rd.scratch / "pilots" / f"phase-{req.phase:04d}-{req.harness_sha[:10]}.parquet"
    scratch = rd.scratch / f"pilot-{req.phase:04d}-{req.harness_sha[:10]}"
    _, _, hooks, _, _, _, _ = _train(req, progress, scratch, req.seed * 7919 + req.phase + 104729)
    write_rollouts(hooks.rollouts, out)
    return PilotResult(harness_sha=req.harness_sha, steps=req.steps, rollout_path=str(out),
                       stats=group_stats([r.model_dump() for r in hooks.rollouts]),
                       wall_time_s=round(time.time() - t0, 2))
