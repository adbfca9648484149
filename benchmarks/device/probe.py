"""Device call 1 (benchmarks/gpu_bundle.py): does every module a run imports load there, and what GPU, git and
sandbox backend does a run see? Prints one line per module (ok or FAIL and why), then ``BAD [...]``.

    PYTHONPATH=/tmp/dev/site:$PWD python3 benchmarks/device/probe.py
"""

import importlib
import shutil
import sys

MODULES = ["torch", "transformers", "trl", "peft", "accelerate", "datasets", "langgraph.graph",
           "langgraph.checkpoint.sqlite", "langchain_core.runnables.base", "chromadb", "opentelemetry.sdk", "uvicorn",
           "fastapi", "pydantic", "git", "gguf", "sentence_transformers", "google.protobuf", "evotrainer.run",
           "evotrainer.bench.runner", "evotrainer.trainer.service", "evotrainer.trainer.grpo", "evotrainer.skills",
           "evotrainer.policy.gguf", "agents", "sandbox", "matplotlib", "scipy", "pandas", "pyarrow"]


def main() -> int:
    print(sys.version)
    bad = []
    for name in MODULES:
        try:
            m = importlib.import_module(name)
            print("ok", name, getattr(m, "__version__", ""), getattr(m, "__file__", ""))
        except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the probe
            bad.append(name)
            print("FAIL", name, repr(e)[:300])
    import torch

    print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
    print("git", shutil.which("git"), "bwrap", shutil.which("bwrap"), "unshare", shutil.which("unshare"))
    import sandbox

    print("sandbox backend", sandbox.choose_backend())
    print("BAD", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
