"""A training phase's speed on the device, and what the harness costs over plain TRL GRPOTrainer.

    python benchmarks/gpu_phase.py                       # CUDA, bf16: tiny, qwen2-0.5b-shape (and smollm2 if given)
    python benchmarks/gpu_phase.py --device cpu --models tiny --steps 4     # the same path on a CPU, in a minute
    python benchmarks/gpu_phase.py --smollm2 models/smollm2-135m           # add SmolLM2-135M (evotrainer policy import)
    python benchmarks/gpu_phase.py --device cpu --models "" --policy runs/demo/policy/base --completion-length 8 \
        --steps 500 [--learning-rate 3e-4] [--prompts 32]     # does a trained policy learn, with and without hooks?
    python benchmarks/gpu_phase.py --device cpu --models tiny --prompts 32 --completion-length 8 --steps 21 \
        --set policy.gradient_checkpointing=on        # what recomputing activations costs (auto: off on CPU)

For each model it trains the same phase twice, in this process and in this order:

    harness   the trainer service's phase (``trainer.grpo._train``): GRPOTrainer subclass with the harness hooks,
              reward, filters and rollout log served by a sandboxed harness worker (the math seed harness)
    plain     TRL's own ``GRPOTrainer`` on the same model, the same GRPOConfig (``trainer.grpo.grpo_config``, one
              definition) and the same prompts, with a plain reward function (the verifier) and nothing else

and prints per arm: median step time (TRL's own ``step_time``: generation + loss + update, first step dropped as
warm-up), steps/s, generated tokens/s, peak GPU memory, the mean training reward over the first and the last fifth
of the steps (the two arms should learn alike: the hooks must not change what plain GRPO does); and the
harness/plain step-time ratio (goal <= 1.05).
Models (nothing is downloaded):

    tiny               the demo's character-level Qwen2 (128 wide, 3 layers), random weights
    qwen2-0.5b-shape   Qwen2-0.5B's body (24 layers, 896 wide, 14 heads, 2 KV heads, MLP 4864), random weights,
                       with the character vocabulary (so the embedding is small: ~360M parameters, not 494M)
    smollm2            SmolLM2-135M-Instruct from a folder ``evotrainer policy import`` wrote (``--smollm2 PATH``)
    policy             any local model folder (``--policy PATH``), e.g. a run's ``policy/base``: the warmed-up tiny
                       policy, whose rewards say whether training learns at this batch size and learning rate

Random weights generate to the full completion budget (``--completion-length``, default 64), the worst case for
generation. The device machines lack TRL: carry its wheel and those of what it needs that the machine lacks
(datasets, and this repository's own dependencies the phase imports: gitpython, pydantic, pyyaml, pyarrow, pandas,
psutil), then run the first command above. Results go to stdout and ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QWEN2_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True)


def build(name: str, folder: Path) -> Path:
    """A local checkpoint folder for ``name`` (random weights, character tokenizer)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from evotrainer.config import TinyPolicyConfig
    from evotrainer.policy.build import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    if name == "tiny":
        model = build_model(TinyPolicyConfig(max_length=256), len(tokenizer), 0)
    else:
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1,
                                             bos_token_id=1, **QWEN2_05B))
    path = folder / name
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_run(folder: Path, model: str, args) -> tuple:
    """A run directory on ``model`` whose seed harness is the math one with the benchmark's completion budget."""
    import yaml

    from evotrainer.config import apply_overrides, parse
    from evotrainer.harness.repo import HarnessRepo, seed_dir
    from evotrainer.rundir import RunDir
    from evotrainer.trainer.wire import PhaseRequest

    chat = (Path(model) / "chat_template.jinja").exists()
    harness = folder / "harness-seed"
    shutil.rmtree(harness, ignore_errors=True)
    shutil.copytree(seed_dir("math", "math_chat" if chat else None), harness)
    knobs = yaml.safe_load((harness / "harness.yaml").read_text())
    knobs.update(max_completion_length=args.completion_length, group_size=args.group_size)
    if args.learning_rate is not None:
        knobs["learning_rate"] = args.learning_rate
    (harness / "harness.yaml").write_text(yaml.safe_dump(knobs))
    cfg = apply_overrides(parse({}), [
        f"policy.model={model}", f"policy.device={args.device}", f"harness={harness}", "training.eval_size=12",
        "training.dev_size=40", f"training.prompts_per_step={args.prompts}", "training.train_pool_size=2000",
        "sandbox.backend=process", *args.set])
    rd = RunDir(folder / "run")
    shutil.rmtree(rd.root, ignore_errors=True)
    rd.init(cfg, log=lambda *_: None)
    sha = HarnessRepo(rd.harness).sha("main")
    return rd, PhaseRequest.make(cfg, str(rd.root), 1, sha, model, args.steps)


def summarize(step_times: list[float], tokens: float, peak: float | None, rewards: list[float]) -> dict:
    times = step_times[1:] or step_times  # the first step pays compilation and allocator warm-up
    median = statistics.median(times)
    fifth = max(len(rewards) // 5, 1)
    return {"steps": len(step_times), "median_step_s": round(median, 4), "steps_per_s": round(1 / median, 3),
            "tokens_per_s": round(tokens / max(sum(step_times), 1e-9), 1),
            "peak_gpu_gib": None if peak is None else round(peak / 2**30, 2),
            "reward_first": round(statistics.mean(rewards[:fifth]), 4) if rewards else None,
            "reward_last": round(statistics.mean(rewards[-fifth:]), 4) if rewards else None}


def peak_memory(device: str):
    import torch

    if device != "cuda":
        return None
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def reset_memory(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def harness_arm(req, device: str, scratch: Path) -> dict:
    from evotrainer.trainer.grpo import _train

    reset_memory(device)
    trained = _train(req, lambda _: None, scratch, 1)
    out = summarize(trained.logs["step_time"], trained.hooks.tokens, peak_memory(device), trained.logs["reward"])
    out["parameters_m"] = round(sum(p.numel() for p in trained.model.parameters()) / 1e6, 1)
    del trained
    return out


def plain_arm(req, rd, device: str, scratch: Path) -> dict:
    """TRL's GRPOTrainer as a TRL user runs it: same config, same prompts, the verifier as its reward."""
    import json as _json
    import random

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from evotrainer.domains import get_domain
    from evotrainer.harness.knobs import read_knobs
    from evotrainer.harness.repo import HarnessRepo
    from evotrainer.trainer.grpo import grpo_config, policy_prompt, sample_tasks
    from evotrainer.trainer.model import load_policy, uses_chat

    reset_memory(device)
    domain = get_domain(req.domain, req.executor)
    with HarnessRepo(rd.harness).worktree(req.harness_sha) as harness_dir:
        knobs = read_knobs(harness_dir)
    model, tokenizer, peft_config = load_policy(req.init_checkpoint, device, req.policy.dtype, req.policy.lora, req.policy.lora_rank)
    chat = uses_chat(tokenizer, req.policy.chat)
    tasks = sample_tasks(rd.train_tasks(), knobs.curriculum_weights, req.steps * req.training.prompts_per_step,
                         random.Random(req.seed * 7919 + req.phase))
    prompt = domain.instruction if chat else domain.canonical_prompt
    dataset = Dataset.from_list([{"prompt": policy_prompt(prompt(t), chat), "task_json": _json.dumps(t)}
                                 for t in tasks])

    def correct(prompts, completions, task_json, **_):
        text = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        return [float(domain.verify(_json.loads(t), c)) for t, c in zip(task_json, text)]

    collected: dict[str, list[float]] = {}

    class Collect(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            for k, v in (logs or {}).items():
                if isinstance(v, (int, float)):
                    collected.setdefault(k, []).append(float(v))

    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[correct], train_dataset=dataset,
                          args=GRPOConfig(**grpo_config(req, knobs, device, scratch)), peft_config=peft_config,
                          callbacks=[Collect()])
    trainer.train()
    batch = req.training.prompts_per_step * knobs.group_size
    tokens = sum(collected.get("completions/mean_length", [])) * batch
    out = summarize(collected["step_time"], tokens, peak_memory(device), collected["reward"])
    del trainer, model
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--models", default="tiny,qwen2-0.5b-shape", help="comma-separated: tiny, qwen2-0.5b-shape")
    ap.add_argument("--smollm2", type=Path, help="a SmolLM2-135M folder from `evotrainer policy import` (added)")
    ap.add_argument("--policy", type=Path, help="any local model folder, e.g. a run's policy/base (added)")
    ap.add_argument("--learning-rate", type=float, default=None, help="instead of the seed harness's")
    ap.add_argument("--steps", type=int, default=12, help="GRPO steps per arm (the first is dropped as warm-up)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step")
    ap.add_argument("--group-size", type=int, default=8, help="completions per prompt")
    ap.add_argument("--completion-length", type=int, default=64, help="max completion tokens")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for both arms, e.g. policy.gradient_checkpointing=on")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args()

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: no CUDA device here (use --device cpu to run the same path on a CPU)")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    results = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
               "torch": torch.__version__, "settings": {k: str(v) for k, v in vars(args).items()}, "models": {}}
    with tempfile.TemporaryDirectory(prefix="evo-gpu-bench-") as tmp:
        folder = Path(tmp)
        models = {m: None for m in args.models.split(",") if m}
        if args.smollm2:
            models["smollm2"] = args.smollm2.resolve()
        if args.policy:
            models["policy"] = args.policy.resolve()
        for name, path in models.items():
            path = path or build(name, folder)
            rd, req = make_run(folder / f"run-{name}", str(path), args)
            t0 = time.time()
            row = {"harness": harness_arm(req, args.device, folder / "scratch-h"),
                   "plain": plain_arm(req, rd, args.device, folder / "scratch-p")}
            row["ratio"] = round(row["harness"]["median_step_s"] / row["plain"]["median_step_s"], 3)
            row["parameters_m"] = row["harness"].pop("parameters_m")  # counted on the trained model, not reloaded
            row["wall_s"] = round(time.time() - t0, 1)
            results["models"][name] = row
            print(f"{name} ({row['parameters_m']}M params): ratio harness/plain step time {row['ratio']}")
            for arm in ("harness", "plain"):
                r = row[arm]
                print(f"  {arm:8s} {r['median_step_s']:.3f} s/step  {r['steps_per_s']:.2f} steps/s  "
                      f"{r['tokens_per_s']:.0f} gen tokens/s  peak GPU {r['peak_gpu_gib']} GiB  training reward "
                      f"{r['reward_first']} (first fifth) -> {r['reward_last']} (last fifth)", flush=True)
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
