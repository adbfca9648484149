"""One training phase: TRL's GRPOTrainer driven by a harness commit, every rollout logged, then the dev and held-out
splits scored.

How the harness reaches TRL (all harness code runs in the sandbox worker, never in this process):

    harness.yaml        -> GRPOConfig (learning rate, group size, temperature, max completion length, loss type,
                           KL beta, clip epsilons, reward scaling, truncation masking) and reward/curriculum weights
    curriculum.py       -> how many tasks of each difficulty level the phase samples from the training pool
    prompt.py           -> the prompt of each sampled task (text, or chat messages for a chat-template policy)
    rewards.py          -> one TRL reward function (the weighted sum of the harness's components)
    filters.py          -> the GRPOTrainer subclass of ``hooks.py`` drops the rollouts and groups the filters
                           reject from the batch before the loss (TRL's core has no hook for this)

The request and result types are in ``wire.py``, the bridge to TRL in ``hooks.py``, loading and evaluation in
``model.py``. With several processes (``trainer.processes``, launched by ``launch.py``) every rank runs these
functions: rank 0 draws the tasks and prompts and broadcasts them, each rank trains its share of each batch, and
rank 0 alone logs the rollouts, evaluates and saves (the other ranks return None).
The evaluator's verifier fills ``verified`` on every rollout (the harness never sees it), and the dev and held-out
splits are scored with the evaluator's canonical prompt after training, so accuracy is comparable across harness
versions. Outputs are written under temporary names and renamed when complete: a killed phase leaves nothing
that looks finished.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from evotrainer.contracts import PhaseResult
from evotrainer.domains import get_domain
from evotrainer.harness.knobs import Knobs, read_knobs
from evotrainer.harness.repo import HarnessRepo
from evotrainer.rollouts import group_stats, level_history, read_rollouts, write_rollouts
from evotrainer.trainer.dashboards import phase_runs, trl_args
from evotrainer.trainer.generation import grpo_args
from evotrainer.trainer.hooks import HarnessHooks, lr_multiplier, make_trainer_class
from evotrainer.trainer.model import evaluate_as_configured, load_policy, resolve_device, uses_chat
from evotrainer.trainer.ranks import rank, world
from evotrainer.trainer.shapes import rollout_func, shape_of
from evotrainer.trainer.wire import PhaseRequest, PilotResult

Progress = Callable[[dict[str, Any]], None]
OPTIMIZER_STATE = "optimizer.pt"  # AdamW's moments, saved with a phase's checkpoint for the next phase
# What a phase keeps of TRL's per-step log (PhaseResult.trajectory): its name there -> TRL's key.
TRAJECTORY = {"reward": "reward", "entropy": "entropy", "grad_norm": "grad_norm", "kl": "kl",
              "learning_rate": "learning_rate", "completion_length": "completions/mean_length",
              "zero_std_groups": "frac_reward_zero_std"}


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


def policy_prompt(prompt: str | list[dict], chat: bool) -> str | list[dict]:
    """What prompt.py gave, as the policy reads it: messages for a chat-template policy (a string is one user
    message; TRL applies the template), plain text otherwise (the messages' contents, one per line)."""
    if chat:
        return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    return prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)


def check_budget(model, tokenizer, prompts: list, max_completion_length: int, chat: bool) -> int | None:
    """The room the phase's prompts leave in the model's context window (the window less the longest prompt's tokens:
    the largest completion budget that fits; None when the model states no window). Raise ValueError (one line) when
    the completion budget does not fit it."""
    window = getattr(model.config, "max_position_embeddings", None)
    if not window or not prompts:
        return None
    distinct = {json.dumps(p, sort_keys=True): p for p in prompts}.values()  # a phase draws each task many times
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) if chat else p
             for p in distinct]
    longest = max(len(ids) for ids in tokenizer(texts, add_special_tokens=not chat)["input_ids"])
    if longest + max_completion_length > window:
        raise ValueError(f"max_completion_length {max_completion_length} + the longest prompt ({longest} tokens) "
                         f"exceed the policy's context window of {window} tokens: lower max_completion_length in "
                         f"harness.yaml, or use a model with a longer window")
    return window - longest


def stop_ids(model, tokenizer) -> list[int]:
    """Token ids that end a completion (the tokenizer's eos and the generation config's): one missing = truncated."""
    ids = {tokenizer.eos_token_id}
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [eos])
    return sorted(i for i in ids if i is not None)


def phase_rollout_func(domain, knobs: Knobs, eos_ids: list[int]):
    """TRL's ``rollout_func`` for the domain's rollout shape (``trainer.shapes``): None for a single-turn domain
    (TRL generates), the multi-turn loop at the harness's turn cap (``max_turns``, else the domain's) otherwise.
    A turn cap set for a single-turn domain could not act: ValueError in one line."""
    if shape_of(domain) == "single_turn":
        if knobs.max_turns is not None:
            raise ValueError(f"harness.yaml sets max_turns, but the {domain.name} domain's rollouts are single-turn")
        return None
    return rollout_func(domain, knobs.max_turns or domain.eval_turn_cap, eos_ids)


def checkpointing(setting: str, device: str) -> bool:
    """Whether a phase recomputes activations in the backward pass (``policy.gradient_checkpointing``)."""
    return setting == "on" or (setting == "auto" and device == "cuda")


def grpo_config(req: PhaseRequest, knobs: Knobs, device: str, output_dir: Path) -> dict[str, Any]:
    """The GRPOConfig arguments of a phase: harness knobs, the request's settings, dashboards and generation backend.

    One definition, used by every phase and pilot and by ``benchmarks/gpu_phase.py``'s plain-TRL baseline, so the
    baseline trains with exactly the phase's configuration. With several processes (``launch.py``) each generated
    batch is split among them: every process generates and trains its share.
    """
    batch = req.training.prompts_per_step * knobs.oversample * knobs.group_size
    if batch % world():
        raise ValueError(f"trainer.processes ({world()}) must divide the generated batch: prompts_per_step x "
                         f"oversample x group_size = {req.training.prompts_per_step} x {knobs.oversample} x "
                         f"{knobs.group_size} = {batch}")
    return dict(
        output_dir=str(output_dir),
        learning_rate=knobs.learning_rate,
        num_generations=knobs.group_size,
        per_device_train_batch_size=batch // world(),
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=knobs.updates_per_batch,
        max_steps=req.steps * knobs.updates_per_batch,
        max_grad_norm=knobs.max_grad_norm,
        weight_decay=knobs.weight_decay,
        lr_scheduler_type="constant",  # replaced by the run-level schedule (hooks.lr_multiplier)
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
        **trl_args(req),  # dashboards (training.report_to): report_to, run_name, project
        **grpo_args(req.trainer.generation, req.trainer.vllm_gpu_memory_utilization, device),  # hf or vLLM (colocate)
        seed=sampling_seed(req),
        bf16=device == "cuda" and req.policy.dtype != "float32",
        gradient_checkpointing=checkpointing(req.policy.gradient_checkpointing, device),
        use_cpu=device == "cpu",
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
    )


def _atomic_dir(final: Path) -> Path:
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp


@dataclass
class Trained:
    """What ``_train`` leaves: the trained policy, the rollout log (``hooks``), TRL's logged scalars."""

    model: Any
    tokenizer: Any
    hooks: HarnessHooks
    logs: dict[str, list[float]]
    device: str
    domain: Any
    rd: Any
    optimizer_state: dict | None  # AdamW's state (with LoRA, the adapter's)
    chat: str  # policy.chat: how the evaluator prompts this policy
    attempts: list[dict]  # what harness code tried in the sandbox while training (every rank's), each {kind, what, ...}
    room: int | None  # the largest completion budget the phase's prompts leave room for (check_budget)


def _train(req: PhaseRequest, progress: Progress, scratch: Path, task_seed: int) -> Trained:
    """Train ``req.steps`` generated batches at the request's harness sha (on this rank, when several train)."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig

    from evotrainer.rundir import RunDir
    from sandbox import HarnessWorker

    if req.training.threads:
        torch.set_num_threads(req.training.threads)
    device = resolve_device(req.policy.device)
    rd = RunDir(req.run_dir)
    domain = get_domain(req.domain, req.executor)  # the executor's limits: the rewards' executions, the evaluation
    repo = HarnessRepo(rd.harness)
    progress({"stage": "setup", "step": 0, "total": req.steps})
    if world() > 1:
        scratch = scratch / f"rank{rank()}"
    box = req.sandbox
    with repo.worktree(req.harness_sha) as harness_dir, HarnessWorker(
        harness_dir, limits=box.limits, backend=box.backend, image=box.image, hide=rd.hidden_from_harness()
    ) as worker:
        knobs = read_knobs(harness_dir)
        history = {}
        if req.phase > 1 and rd.rollout_file(req.phase - 1).exists():
            history = level_history(read_rollouts(rd.rollout_file(req.phase - 1)))
        tasks, raw_prompts = None, None
        if rank() == 0:
            weights = worker.curriculum(domain.levels, knobs.curriculum_weights, history)
            prompts_per_batch = req.training.prompts_per_step * knobs.oversample  # dynamic sampling generates more, trains P
            tasks = sample_tasks(rd.train_tasks(), weights, req.steps * prompts_per_batch, random.Random(task_seed))
            raw_prompts = worker.prompts([domain.harness_task(t) for t in tasks])
        if world() > 1:  # rank 0's draw is every rank's: harness code may not be deterministic across processes
            from accelerate import PartialState
            from accelerate.utils import broadcast_object_list

            PartialState(cpu=device == "cpu")  # the process group (TRL's arguments find it made)
            shared = [tasks, raw_prompts]
            broadcast_object_list(shared)
            tasks, raw_prompts = shared
        model, tokenizer, peft_config = load_policy(req.init_checkpoint, device, req.policy.dtype, req.policy.lora, req.policy.lora_rank)
        chat = uses_chat(tokenizer, req.policy.chat)
        prompts = [policy_prompt(p, chat) for p in raw_prompts]
        dataset = Dataset.from_list([
            {"prompt": p, "task_json": json.dumps(t), "task_id": t["id"]} for p, t in zip(prompts, tasks)
        ])
        room = check_budget(model, tokenizer, prompts, knobs.max_completion_length, chat)
        if knobs.beta > 0 and req.reference_checkpoint and not req.policy.lora:
            model.config._name_or_path = req.reference_checkpoint  # TRL builds the KL reference from this path
        # with LoRA the reference is the base model with the adapter switched off, or, from a phase's start
        # (kl_reference: phase_start), a frozen copy of the adapter the phase starts from ("ref", which TRL makes)
        drop_ref = bool(req.policy.lora and req.reference_checkpoint and req.reference_checkpoint != req.init_checkpoint)
        optimizer_state = Path(req.init_checkpoint) / OPTIMIZER_STATE
        if not (req.training.carry_optimizer and optimizer_state.is_file()):
            optimizer_state = None
        shutil.rmtree(scratch, ignore_errors=True)
        args = GRPOConfig(**grpo_config(req, knobs, device, scratch))
        hooks = HarnessHooks(worker, knobs, domain, req.phase, req.harness_sha, stop_ids(model, tokenizer),
                             step_shift=trial_window(req, task_seed))
        train_logs: dict[str, list[float]] = defaultdict(list)

        class _Progress(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kw):
                for k, v in (logs or {}).items():
                    if isinstance(v, (int, float)) and math.isfinite(v):
                        train_logs[k].append(float(v))

            def on_step_end(self, args, state, control, **kw):
                progress({"stage": "train", "step": state.global_step // knobs.updates_per_batch, "total": req.steps})

        trainer = make_trainer_class()(
            model=model, processing_class=tokenizer, reward_funcs=[hooks], args=args, train_dataset=dataset,
            rollout_func=phase_rollout_func(domain, knobs, stop_ids(model, tokenizer)),
            peft_config=peft_config, callbacks=[_Progress()], harness_hooks=hooks, optimizer_state=optimizer_state,
            schedule=lambda k: lr_multiplier(knobs, req.step_offset + k // knobs.updates_per_batch, req.run_steps),
        )
        peft_model = trainer.accelerator.unwrap_model(trainer.model)
        if drop_ref and "ref" in getattr(peft_model, "peft_config", {}):
            peft_model.delete_adapter("ref")  # TRL then computes the reference with the adapter switched off
        with phase_runs(req) if rank() == 0 else contextlib.nullcontext():  # dashboards: one run per phase
            trainer.train()
        model = trainer.model  # with LoRA a PeftModel: saved as its adapter, which the next phase trains on
        moments = trainer.optimizer.state_dict()
        attempts = list(worker.attempts)
        if world() > 1:
            from accelerate.utils import gather_object

            attempts = gather_object(attempts)
    shutil.rmtree(scratch, ignore_errors=True)
    if world() > 1:
        with contextlib.suppress(OSError):  # the last rank out removes the phase's folder of rank folders
            scratch.parent.rmdir()
    return Trained(model, tokenizer, hooks, train_logs, device, domain, rd, moments, req.policy.chat, attempts, room)


def run_phase(req: PhaseRequest, progress: Progress = lambda _: None) -> PhaseResult | None:
    """Train one phase at ``req.harness_sha`` and return its PhaseResult (also written to result.json); None on
    the other ranks when several processes train it."""
    from evotrainer.rundir import RunDir

    t0 = time.time()
    ckpt = RunDir(req.run_dir).checkpoint(req.phase)
    done = ckpt / "result.json"
    if done.exists():  # finished before (e.g. the run was killed while polling): never train a phase twice
        result = PhaseResult.model_validate_json(done.read_text())
        if result.harness_sha == req.harness_sha:
            return result
    scratch = RunDir(req.run_dir).scratch / f"phase-{req.phase:04d}"
    out = _train(req, progress, scratch, task_seed(req))
    if rank() != 0:  # several processes trained it: rank 0 logs, evaluates and saves
        return None
    hooks, logs, rd = out.hooks, out.logs, out.rd

    progress({"stage": "eval", "step": req.steps, "total": req.steps})
    held_out, dev = (evaluate_as_configured(out.model, out.tokenizer, out.domain, tasks, out.device, req.training,
                                            req.policy, answers=answers)  # the dev answers a later trial starts from
                     for tasks, answers in ((rd.eval_tasks(), False), (rd.dev_tasks(), True)))
    rollout_path = rd.rollout_file(req.phase)
    write_rollouts(hooks.rollouts, rollout_path)
    stats = group_stats([r.model_dump() for r in hooks.rollouts])
    tmp = _atomic_dir(ckpt)
    out.model.save_pretrained(tmp)
    out.tokenizer.save_pretrained(tmp)
    if out.optimizer_state is not None:
        import torch

        torch.save(out.optimizer_state, tmp / OPTIMIZER_STATE)

    def mean(key: str) -> float | None:
        values = logs.get(key) or []
        return sum(values) / len(values) if values else None

    train = {
        "reward_mean": stats["reward_mean"], "dead_group_ratio": stats["dead_group_ratio"],
        "kept_fraction": stats["kept_fraction"], "truncation_rate": stats["truncation_rate"],
        "verified_rate": stats["verified_rate"], "completion_length": stats["completion_tokens_mean"],
        "entropy": mean("entropy"), "kl": mean("kl"), "loss": mean("loss"), "grad_norm": mean("grad_norm"),
        "clip_ratio": mean("clip_ratio/region_mean"), "learning_rate": mean("learning_rate"),
        "budget_room": out.room,  # a budget move never asks for more (agents.knob_moves: ctx["ceilings"])
    }
    result = PhaseResult(
        phase=req.phase, harness_sha=req.harness_sha, steps=req.steps,
        train={k: v for k, v in train.items() if v is not None},
        trajectory={name: [round(v, 6) for v in logs[key]] for name, key in TRAJECTORY.items() if logs.get(key)},
        eval=held_out, dev=dev, rollout_path=str(rollout_path), checkpoint_path=str(ckpt),
        wall_time_s=round(time.time() - t0, 2), tokens=hooks.tokens, completions=len(hooks.rollouts),
        skipped_batches=hooks.skipped_batches, sandbox_attempts=out.attempts,
    )
    (tmp / "result.json").write_text(result.model_dump_json(indent=1))
    shutil.rmtree(ckpt, ignore_errors=True)
    tmp.rename(ckpt)
    progress({"stage": "done", "step": req.steps, "total": req.steps})
    return result


def _mix(*parts: object) -> int:
    """A seed in numpy's range [0, 2**32) drawn from the parts by a hash: two jobs share a seed only when all their
    parts agree (a sum such as seed + phase made seed s at phase p + 1 replay seed s + 1 at phase p)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "big")


def task_seed(req: PhaseRequest) -> int:
    """The seed of a job's task draws and sampling. A phase has its own; a counterfactual phase (a pilot scored on
    the dev split) draws the real phase's at replicate 0, so the old main meets exactly what the edit met, and
    another draw per replicate (training's randomness, measured); the arms of an A/B trial draw their own. A rerun
    (``training.rerun``) draws anew everywhere."""
    run = (req.seed, req.phase, req.training.rerun)
    if not req.pilot or (req.counterfactual and req.replicate == 0):
        return _mix("tasks", *run)
    return _mix("tasks", *run, "counterfactual" if req.counterfactual else "trial", req.replicate)


def trial_window(req: PhaseRequest, seed: int) -> int:
    """Where a pilot's steps sit in the phase, as harness code sees them: a pilot shorter than a phase shows its
    batches as steps ``k + 1 .. k + steps`` with ``k`` drawn from the job's seed over the whole phase (both arms of a
    trial share it), so a filter that keys on ``step`` meets in a trial the steps a phase has, and cannot behave for
    a trial's first 20 steps and differently after. A phase (and a counterfactual phase) shows its own steps: 0."""
    room = req.training.steps_per_phase - req.steps
    return random.Random(_mix("window", seed)).randrange(room + 1) if req.pilot and room > 0 else 0


def sampling_seed(req: PhaseRequest) -> int:
    """TRL's seed of a job (initialisation of its sampling and shuffling): per seed, phase, replicate and rerun."""
    return _mix("sampling", req.seed, req.phase, req.replicate, req.training.rerun)


def run_pilot(req: PhaseRequest, progress: Progress = lambda _: None) -> PilotResult | None:
    """A few training steps at a harness sha from a checkpoint: rollouts and a probe-split score, nothing saved.

    Main and a candidate piloted with the same request fields see the same tasks and seeds (they depend on the
    phase and the replicate, not on the sha), so the two arms of an A/B trial differ only by what the candidate
    changed. The probe is drawn from the dev split; a counterfactual phase (``counterfactual``: the old main trained
    like the phase that first trained a promoted edit) scores the whole dev split. No pilot reads the held-out split.
    """
    from evotrainer.rundir import RunDir

    t0 = time.time()
    rd = RunDir(req.run_dir)
    name = f"phase-{req.phase:04d}-{req.harness_sha[:10]}-r{req.replicate}"
    out = rd.scratch / "pilots" / f"{name}.parquet"
    trained = _train(req, progress, rd.scratch / f"pilot-{name}", task_seed(req))
    if rank() != 0:
        return None
    write_rollouts(trained.hooks.rollouts, out)
    probe = None
    if req.probe_size or req.counterfactual:
        progress({"stage": "probe", "step": req.steps, "total": req.steps})
        tasks = rd.dev_tasks() if req.counterfactual else rd.probe_tasks(req.probe_size)
        probe = evaluate_as_configured(trained.model, trained.tokenizer, trained.domain, tasks, trained.device,
                                       req.training, req.policy, answers=True)
    return PilotResult(harness_sha=req.harness_sha, steps=req.steps, replicate=req.replicate, rollout_path=str(out),
                       completions=len(trained.hooks.rollouts), stats=group_stats([r.model_dump() for r in trained.hooks.rollouts]), probe=probe,
                       wall_time_s=round(time.time() - t0, 2), sandbox_attempts=trained.attempts)
