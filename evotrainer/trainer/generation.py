"""How a phase generates its rollouts: ``trainer.generation`` -> the GRPOConfig arguments TRL takes for it.

    hf     transformers' ``generate`` on the training model (the default; CPU or GPU)
    vllm   vLLM through TRL's own integration in colocate mode: the vLLM engine shares the training process and
           its GPU (``vllm_gpu_memory_utilization`` of its memory), and TRL syncs the weights into it every step

vLLM is CUDA-only and pins its own torch and transformers, so it is an optional extra (``pip install
'evotrainer[gpu]'``) and this path stays thin: the configuration is handed to TRL and nothing else changes. A
request for vLLM where it cannot run (not installed, no CUDA device) fails the phase with one line naming
``trainer.generation``; ``evotrainer init``/``run`` check it first (``check``).
Try it alone: ``python -m evotrainer.trainer.generation`` prints what each setting gives TRL.
"""

from __future__ import annotations

import importlib.util
from typing import Any


def grpo_args(generation: str, gpu_memory_utilization: float, device: str) -> dict[str, Any]:
    """GRPOConfig arguments for ``generation`` (hf or vllm) on ``device`` (the resolved one: cpu or cuda)."""
    if generation == "hf":
        return {"use_vllm": False}
    problem = check(generation, device)
    if problem:
        raise ValueError(problem)
    return {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": gpu_memory_utilization}


def check(generation: str, device: str = "cuda") -> str | None:
    """What stops ``generation`` from running here, as one line; None when it can."""
    if generation != "vllm":
        return None
    if device == "cpu":
        return "trainer.generation: vllm needs a CUDA device (policy.device is cpu here); use hf"
    if importlib.util.find_spec("vllm") is None:
        return ("trainer.generation: vllm is not installed in the trainer's environment (pip install "
                "'evotrainer[gpu]' on a CUDA machine), or use hf")
    return None


if __name__ == "__main__":
    print("hf   ->", grpo_args("hf", 0.3, "cpu"))
    print("vllm ->", check("vllm") or grpo_args("vllm", 0.3, "cuda"))
