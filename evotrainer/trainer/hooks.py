"""The bridge between TRL's GRPOTrainer and the sandboxed harness: reward, filter hook and the rollout log.

``HarnessHooks`` is TRL's reward function (it asks the harness worker for reward components and totals them with
``scoring.total_reward``), decides which rollouts train (the harness filters, in the sandbox; dynamic sampling;
advantages recomputed among the kept) and logs every rollout with the evaluator's ``verified`` flag.
``make_trainer_class`` builds the GRPOTrainer subclass that applies those decisions to the batch (TRL's core has
no hook for this), carries the optimizer's moments across phases and follows the run-level schedule
(``lr_multiplier``). Used by ``trainer/grpo.py``; tested in
``tests/test_trainer.py`` (against replay too: test_replay_reproduces_what_training_logged) and, with two processes,
in ``tests/test_launch.py``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from evotrainer.contracts import Rollout
from evotrainer.harness.knobs import Knobs
from evotrainer.judge.scoring import batch_advantages, capacity_cut, masked, total_reward, trains
from evotrainer.rollouts import as_text, harness_view


def lr_multiplier(knobs: Knobs, run_step: int, run_steps: int) -> float:
    """The learning-rate factor at ``run_step`` (generated batches since the run began, over all phases).

    Warm-up is linear over the first ``warmup_steps``; ``linear`` and ``cosine`` decay to a tenth of the rate at
    the run's planned last step (``run_steps - 1``: steps count from 0) and stay there; ``constant`` keeps it. A
    phase boundary is not a restart: the schedule is the run's.
    """
    if run_step < knobs.warmup_steps:
        return (run_step + 1) / knobs.warmup_steps
    progress = min(1.0, (run_step - knobs.warmup_steps) / max(run_steps - 1 - knobs.warmup_steps, 1))
    if knobs.lr_schedule == "linear":
        return 1.0 - 0.9 * progress
    if knobs.lr_schedule == "cosine":
        return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))
    return 1.0


def make_trainer_class():
    """Build the GRPOTrainer subclass (inside a function: importing TRL takes ~20 s on a small CPU)."""
    import torch
    from trl import GRPOTrainer

    class _HarnessGRPOTrainer(GRPOTrainer):
        """GRPOTrainer plus the harness's filters, dynamic sampling, a run-level schedule and a per-rollout log.

        ``_generate_and_score_completions`` is TRL's batch-making step (generate, score, compute advantages).
        After it, the harness filters decide which rollouts train (``HarnessHooks.decide``, on the whole batch
        even when several processes share it), the kept rows get their advantages recomputed among themselves
        (``scoring.batch_advantages``), and the rejected rows are removed from every per-sample tensor, so they add
        neither gradient nor dilution to the loss (with several processes, a process that kept fewer rows than
        another keeps masked stand-ins up to its count: equal weights per kept row, the loss's scale aside). When nothing
        is kept, the step makes no update at all: the loss has no graph, no parameter gets a gradient, and the
        optimizer skips parameters without one (no momentum, no weight decay). Such a step is counted as skipped.
        A generated batch may train ``updates_per_batch`` times (TRL's ``num_iterations``); gradient accumulation
        and ``steps_per_generation`` stay 1.

        The optimizer starts from ``optimizer_state`` (the last phase's moments; its hyperparameters are the
        current knobs') and the learning rate follows ``schedule(optimizer_step)``.
        """

        def __init__(self, *args, harness_hooks, schedule, optimizer_state=None, **kwargs):
            super().__init__(*args, **kwargs)
            if self.args.steps_per_generation != 1 or self.args.gradient_accumulation_steps != 1:
                raise ValueError("the harness filter hook needs steps_per_generation = 1 and no accumulation")
            self.hooks = harness_hooks
            self._schedule = schedule
            self._optimizer_state = optimizer_state
            self._skip_update = False

        def create_optimizer(self, model=None):
            optimizer = super().create_optimizer(model)
            if self._optimizer_state is not None:
                current = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
                optimizer.load_state_dict(torch.load(self._optimizer_state, map_location="cpu", weights_only=True))
                for group, knobs in zip(optimizer.param_groups, current):  # moments carry, knobs are today's
                    group.pop("initial_lr", None)
                    group.update(knobs)
            return optimizer

        def create_scheduler(self, num_training_steps, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, self._schedule)
            return self.lr_scheduler

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            # every rollout of the generated batch (on every process: the decision is global) was filtered out.
            # A process that kept nothing of its own share while others kept some still runs the loss (its mask is
            # all zeros: a zero gradient), or the others would wait for its gradients forever
            if self._skip_update:
                return torch.zeros((), device=inputs["advantages"].device, requires_grad=True)
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

        def _decide(self, batch: list[dict], local: list[float], step: int) -> tuple[list[bool], list[float]]:
            """(kept, advantage) for this process's share of the generated batch. With several processes the
            filters judge the whole batch once, on the main process (groups, dynamic sampling's capacity and batch
            scaling are about the whole batch), which logs every rollout; the others take their share."""
            acc = self.accelerator
            if acc.num_processes == 1:
                kept, advantages = self.hooks.decide(batch, local, self.num_generations, step)
                self.hooks.log(batch, kept, advantages)
                return kept, advantages
            from accelerate.utils import broadcast_object_list, gather_object

            everyone = gather_object(batch)  # in process order, as TRL's own gather of the rewards
            raw = acc.gather(torch.tensor(local, device=acc.device)).cpu().tolist()
            decision = [None]
            if acc.is_main_process:
                decision = [self.hooks.decide(everyone, raw, self.num_generations, step)]
                self.hooks.log(everyone, *decision[0])
            broadcast_object_list(decision)
            kept, advantages = decision[0]
            share = slice(acc.process_index * len(batch), (acc.process_index + 1) * len(batch))
            return kept[share], advantages[share]

        def _generate_and_score_completions(self, inputs):
            self.current_inputs = inputs  # the batch's dataset rows: a multi-turn rollout_func reads their tasks
            output = super()._generate_and_score_completions(inputs)
            batch = self.hooks.take_batch()
            n = output["advantages"].shape[0]
            if len(batch) != n:
                raise RuntimeError(f"rollout buffer out of step with the batch ({len(batch)} vs {n})")
            raw = output["advantages"].detach().cpu().tolist()
            step = self.state.global_step // self.num_iterations + 1  # generated batches so far, this one included
            kept, advantages = self._decide(batch, raw, step)
            output["advantages"] = torch.tensor(advantages, dtype=output["advantages"].dtype,
                                                device=output["advantages"].device)
            keep_idx = [i for i, k in enumerate(kept) if k]
            # every process trains as many rows as the one that kept most (TRL gathers per-row figures, which must
            # be the same size everywhere): the rest are masked stand-ins from the rows it dropped, so every kept
            # row weighs the same and only the loss's overall scale differs from one process. One process: none.
            most = int(self.accelerator.gather(torch.tensor([len(keep_idx)], device=self.accelerator.device)).max())
            self._skip_update = most == 0
            if self._skip_update:
                self.hooks.skipped_batches += 1
                output["completion_mask"] = torch.zeros_like(output["completion_mask"])
            elif len(keep_idx) < n:
                pad = [i for i, k in enumerate(kept) if not k][: most - len(keep_idx)]
                idx = torch.tensor(keep_idx + pad, device=output["advantages"].device)
                for key, value in list(output.items()):
                    if torch.is_tensor(value) and value.dim() >= 1 and value.shape[0] == n:
                        output[key] = value.index_select(0, idx.to(value.device))
                if pad:
                    output["completion_mask"][len(keep_idx):] = 0
                    output["advantages"][len(keep_idx):] = 0
            mask = output["completion_mask"]
            if "tool_mask" in output:
                mask = mask * output["tool_mask"]
            # the loss normaliser counts the tokens that train on every process, as TRL's own does (gathered on
            # every rank, whatever it kept: a collective call that one rank skipped would hang the others)
            output["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
            return output

    return _HarnessGRPOTrainer


def turn_fields(turns: dict[str, Any], n: int) -> dict[str, Any]:
    """Completion ``n``'s turn figures from what TRL hands a reward function (a multi-turn ``rollout_func``'s
    per-completion fields, ``evotrainer.trainer.shapes``); a single-turn rollout's when there are none."""
    if "turns" not in turns:
        return {"turns": 1, "tool_calls": 0, "tool_errors": 0, "hit_turn_cap": False}
    return {"turns": int(turns["turns"][n]), "tool_calls": int(turns["tool_calls"][n]),
            "tool_errors": int(turns["tool_errors"][n]), "hit_turn_cap": bool(turns["hit_turn_cap"][n])}


def rollout_extra(sample: dict[str, Any], cut: bool) -> dict[str, Any]:
    """A rollout's ``extra``: whether its truncation was masked, the reward-side execution of its code (what harness
    code saw as ``sample["execution"]``: replay shows it again) and whether the grader failed on it."""
    extra: dict[str, Any] = {"masked_truncated": True} if cut else {}
    if sample.get("execution") is not None:
        extra["execution"] = sample["execution"]
    if sample.get("grader_error"):
        extra["grader_error"] = True
    return extra


class HarnessHooks:
    """The bridge between TRL's callbacks and the sandboxed harness worker, plus the rollout log."""

    def __init__(self, worker, knobs: Knobs, domain, phase: int, sha: str, eos_ids: list[int], step_shift: int = 0):
        self.worker = worker
        self.step_shift = step_shift  # added to the step harness code sees (and the log records): see trial_window
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
    def __call__(self, prompts, completions, completion_ids, task_json, **turns: Any) -> list[float]:
        tasks = [json.loads(t) for t in task_json]  # whole: the verifier's; harness code gets harness_task's view
        samples = []
        for n, (prompt, completion, ids, task) in enumerate(zip(prompts, completions, completion_ids, tasks)):
            truncated = not ids or ids[-1] not in self.eos_ids
            t = turn_fields(turns, n)
            samples.append({"prompt": as_text(prompt), "completion": as_text(completion),
                            "task": self.domain.harness_task(task), "truncated": truncated,
                            "completion_tokens": len(ids), "turns": t["turns"], "tool_calls": t["tool_calls"],
                            "tool_errors": t["tool_errors"], "hit_turn_cap": t["hit_turn_cap"]})
        texts = [s["completion"] for s in samples]
        # the visible tests' executions (harness code cannot run code) and the evaluator's verdicts (code: the hidden
        # tests), one executor batch for both
        executions, verdicts = self.domain.score_batch(tasks, texts)
        for sample, execution in zip(samples, executions or []):
            sample["execution"] = execution
        components = self.worker.score(samples)
        totals = []
        for sample, verdict, comps in zip(samples, verdicts, components):
            total = total_reward(comps, self.knobs)
            sample["reward_components"] = comps
            sample["reward"] = total
            sample["verified"] = bool(verdict)
            sample["grader_error"] = verdict is None  # never a wrong answer: counted apart in extra
            totals.append(float(total))
        self.pending.extend(samples)
        return totals

    def take_batch(self) -> list[dict]:
        batch, self.pending = self.pending, []
        return batch

    # filters --------------------------------------------------------------------------------------------------
    def decide(self, batch: list[dict], advantages: list[float], group_size: int, step: int
               ) -> tuple[list[bool], list[float]]:
        """(kept flag, advantage to train with) per rollout of one generated batch (``scoring``'s rules)."""
        groups = []
        step += self.step_shift
        for g in range(0, len(batch), group_size):
            gid = f"p{self.phase}-s{step}-g{g // group_size}"
            members = batch[g : g + group_size]
            for i, s in enumerate(members):
                s.update(group_id=gid, sample_idx=i, step=step, phase=self.phase, advantage=advantages[g + i])
            groups.append([harness_view(s, s["task"]) for s in members])
        flags = [[bool(f) for f in grp] for grp in self.worker.filter(groups)]
        room = capacity_cut([any(grp) for grp in flags], self.knobs.oversample)
        kept = [f and fits for grp, fits in zip(flags, room) for f in grp]
        return kept, batch_advantages([s["reward"] for s in batch], group_size, self.knobs.scale_rewards, kept)

    def log(self, batch: list[dict], kept: list[bool], advantages: list[float]) -> None:
        for s, keep, adv in zip(batch, kept, advantages):
            self.tokens += s["completion_tokens"]
            cut = masked(s["truncated"], self.knobs)  # TRL masks these out of the loss
            self.rollouts.append(Rollout(
                phase=self.phase, step=s["step"], harness_sha=self.sha, group_id=s["group_id"],
                sample_idx=s["sample_idx"], task_id=s["task"]["id"], difficulty=s["task"]["difficulty"],
                prompt=s["prompt"], completion=s["completion"], completion_tokens=s["completion_tokens"],
                truncated=s["truncated"], reward=s["reward"], reward_components=s["reward_components"],
                verified=s["verified"], advantage=float(adv) if trains(keep, cut) else 0.0, kept=keep,
                turns=s["turns"], tool_calls=s["tool_calls"], tool_errors=s["tool_errors"],
                hit_turn_cap=s["hit_turn_cap"], extra=rollout_extra(s, cut),
            ))

