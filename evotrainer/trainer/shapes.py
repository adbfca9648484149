"""Rollout shapes: what one rollout of a domain is, as one typed output (:class:`Turns`).

``single_turn`` (math) is the trivial shape: the prompt, one generated completion, every completion token trained;
TRL's own generation makes it. ``multi_turn`` (a domain with an ``environment(task)``: tools) alternates policy
turns and environment replies until the policy answers (a turn ending in end-of-sequence) or the turn cap is hit:
a policy turn ends at one of its stop tokens (end-of-sequence, or the domain's ``turn_end`` text, the close of a
tool call); the environment's reply is appended to the completion and marked 0 in the environment mask, so tool
output never trains (TRL multiplies the loss mask by it: ``env_mask``, which it calls ``tool_mask``).

Why TRL's ``rollout_func`` and not its ``environment_factory``: the factory renders tool schemas through a chat
template (Qwen2.5's system prompt alone is longer than the tiny policy's 64-token window), needs a tokenizer whose
template TRL can parse tool calls from (``<tool_call>{json}</tool_call>``: 60 characters per call for a
character-level policy) and ends a turn only at end-of-sequence. :func:`rollout_func` runs the same loop over the
domain's compact text protocol with any tokenizer, and returns the environment mask TRL applies. The same loop
scores held-out tasks (``trainer.model.evaluate``), at the evaluator's turn cap (``Domain.eval_turn_cap``).
Alone::

    python -c "from evotrainer.trainer.shapes import SHAPES; print(SHAPES)"
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SHAPES = ("single_turn", "multi_turn")


def shape_of(domain) -> str:
    """The rollout shape of ``domain`` (``Domain.shape``; single_turn when it names none)."""
    shape = getattr(domain, "shape", "single_turn")
    if shape not in SHAPES:
        raise ValueError(f"domain {domain.name!r} has rollout shape {shape!r} (known: {', '.join(SHAPES)})")
    return shape


@dataclass
class Turns:
    """One rollout: its token ids, the environment mask over the completion (1 = the policy's token, trains;
    0 = the environment's), and what happened. A single-turn rollout is one turn, no calls, a mask of ones."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    turns: int = 0  # policy turns
    calls: list[dict] = field(default_factory=list)  # each tool call: {name, arguments, result, error}
    hit_turn_cap: bool = False  # the last policy turn still called a tool when the cap stopped it
    ended: bool = False  # the policy ended it (end-of-sequence)

    @property
    def tool_calls(self) -> int:
        return len(self.calls)

    @property
    def tool_errors(self) -> int:
        return sum(bool(c["error"]) for c in self.calls)

    def fields(self) -> dict[str, Any]:
        """The rollout's turn figures, as the rollout store and the harness view hold them."""
        return {"turns": self.turns, "tool_calls": self.tool_calls, "tool_errors": self.tool_errors,
                "hit_turn_cap": self.hit_turn_cap}


def stop_token_ids(tokenizer, domain, eos_ids: list[int]) -> list[int]:
    """End-of-sequence and the domain's end-of-turn token; ValueError when the tokenizer splits ``turn_end``."""
    ids = tokenizer(domain.turn_end, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"the {domain.name} domain ends a turn at {domain.turn_end!r}, which this tokenizer "
                         f"writes as {len(ids)} tokens (the multi-turn shape needs one)")
    return sorted(set(eos_ids) | set(ids))


def run_turns(model, tokenizer, prompt_ids: list[list[int]], envs: list, budget: int, turn_cap: int,
              eos_ids: list[int], stop_ids: list[int], sampling: dict) -> list[Turns]:
    """Multi-turn rollouts of a batch: every active rollout generates its next turn together (one ``generate`` per
    turn), the environment answers each turn that ends in a tool call, until each rollout ends, its completion
    reaches ``budget`` tokens (policy and environment tokens together) or it has had ``turn_cap`` turns."""
    import torch

    out = [Turns(prompt_ids=list(p)) for p in prompt_ids]
    active = list(range(len(out)))
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id
    while active:
        seqs = [out[i].prompt_ids + out[i].completion_ids for i in active]
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, s in enumerate(seqs):  # left-padded
            ids[row, width - len(s):] = torch.tensor(s)
            mask[row, width - len(s):] = 1
        room = max(budget - len(out[i].completion_ids) for i in active)
        with torch.no_grad():
            gen = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=room,
                                 pad_token_id=pad, eos_token_id=stop_ids, **sampling)[:, width:].tolist()
        still = []
        for row, i in enumerate(active):
            r, new = out[i], gen[row]
            cut = next((k + 1 for k, t in enumerate(new) if t in stop_ids), len(new))
            new = new[: min(cut, budget - len(r.completion_ids))]
            r.completion_ids += new
            r.env_mask += [1] * len(new)
            r.turns += 1
            if new and new[-1] in eos_ids:
                r.ended = True
                continue
            if not new or new[-1] not in stop_ids:
                continue  # the budget cut the turn
            reply = envs[i].step(tokenizer.decode(new, skip_special_tokens=True))
            if reply is None:
                continue  # a turn that ends like a call but calls nothing: the rollout ends there
            r.calls = envs[i].calls
            reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
            if len(r.completion_ids) + len(reply_ids) >= budget:
                continue  # no room left to answer after the tool's reply
            r.completion_ids += reply_ids
            r.env_mask += [0] * len(reply_ids)
            if r.turns >= turn_cap:
                r.hit_turn_cap = True
                continue
            still.append(i)
        active = still
    return out


def rollout_func(domain, turn_cap: int, eos_ids: list[int]):
    """TRL's ``rollout_func`` for a multi-turn domain: each prompt's task comes from the trainer's current batch
    (``trainer.current_inputs``: the dataset rows, whose ``task_json`` holds the whole task; the environment is the
    evaluator's, built from it), one completion per prompt (TRL's sampler has already repeated each prompt
    ``num_generations`` times). Returns the token ids, ``env_mask`` and, per completion, the turn figures and the
    calls (as JSON) that TRL hands the reward function."""

    def generate(prompts: list, trainer) -> dict[str, Any]:
        rows = trainer.current_inputs
        if len(rows) != len(prompts):
            raise RuntimeError(f"rollout_func got {len(prompts)} prompts for {len(rows)} dataset rows")
        tok = trainer.processing_class
        stops = stop_token_ids(tok, domain, eos_ids)
        model = trainer.accelerator.unwrap_model(trainer.model)
        sampling = dict(do_sample=True, temperature=trainer.temperature, top_k=0, top_p=1.0)
        prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        envs = [domain.environment(json.loads(r["task_json"])) for r in rows]
        turns = run_turns(model, tok, prompt_ids, envs, trainer.max_completion_length, turn_cap, eos_ids, stops,
                          sampling)
        out: dict[str, Any] = {"prompt_ids": [t.prompt_ids for t in turns],
                               "completion_ids": [t.completion_ids or [tok.pad_token_id] for t in turns],
                               "logprobs": None, "env_mask": [t.env_mask or [0] for t in turns]}
        for key in ("turns", "tool_calls", "tool_errors", "hit_turn_cap"):
            out[key] = [t.fields()[key] for t in turns]
        out["calls_json"] = [json.dumps(t.calls) for t in turns]
        return out

    return generate
