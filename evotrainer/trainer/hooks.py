"""The bridge between TRL's GRPOTrainer and the sandboxed harness: reward, filter hook and the rollout log.

``HarnessHooks`` is TRL's reward function (it asks the harness worker for reward components and totals them with
``scoring.total_reward``), decides which rollouts train (the harness filters, in the sandbox) and logs every
rollout with the evaluator's ``verified`` flag. ``make_trainer_class`` builds the GRPOTrainer subclass that applies
the filter decisions to the batch (TRL's core has no hook for this). Used by ``trainer/grpo.py``; tested in
``tests/test_trainer.py`` and, against replay, in ``tests/test_scoring.py``.
"""

from __future__ import annotations

import json
from typing import Any

from evotrainer.contracts import Rollout
from evotrainer.harness import Knobs
from evotrainer.rollouts import harness_view
from evotrainer.scoring import masked, total_reward, trains


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
            total = total_reward(comps, self.knobs)
            sample["reward_components"] = comps
            sample["reward"] = total
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
            cut = masked(s["truncated"], self.knobs)  # TRL masks these out of the loss
            self.rollouts.append(Rollout(
                phase=self.phase, step=s["step"], harness_sha=self.sha, group_id=s["group_id"],
                sample_idx=s["sample_idx"], task_id=s["task"]["id"], difficulty=s["task"]["difficulty"],
                prompt=s["prompt"], completion=s["completion"], completion_tokens=s["completion_tokens"],
                truncated=s["truncated"], reward=s["reward"], reward_components=s["reward_components"],
                verified=s["verified"], advantage=float(adv) if trains(keep, cut) else 0.0, kept=keep,
                extra={"masked_truncated": True} if cut else {},
            ))

