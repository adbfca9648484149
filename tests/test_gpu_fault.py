"""benchmarks/gpu_fault.py's defects (run on a GPU). Math: the chat seed with a reward that credits only a bare
integer; it passes its own tests, as a user's flawed harness would, and its reward disagrees with the verifier exactly
where an instruct model answers in a sentence. Code: a catalogue code defect over the code chat seed, HumanEval held
out; its harness passes its own tests, and the script runs its three arms on a tiny chat policy (slow)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from evotrainer.domains import get_domain
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import seed_dir
from sandbox import run_selftest

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bare_integer_reward_passes_its_tests_and_misses_sentences_the_verifier_accepts(tmp_path: Path):
    script = _load(ROOT / "benchmarks" / "gpu_fault.py", "gpu_fault")
    faulty = script.faulty_harness(tmp_path / "faulty")
    read_knobs(faulty)
    result = run_selftest(faulty)
    assert result["n"] > 0 and not result["failed"], result["failed"]
    bad = _load(faulty / "rewards.py", "faulty_rewards").correct
    clean = _load(seed_dir("math", "math_chat") / "rewards.py", "clean_rewards").correct
    task = {"id": "t", "difficulty": "1", "expression": "37 - 5 + 8", "answer": "40"}
    domain = get_domain("math")
    for completion, bare in (("40", 1.0), ("The answer is 40.", 0.0), ("37 - 5 + 8 = 40", 0.0), ("41", 0.0)):
        sample = {"completion": completion, "task": task}
        assert bad(sample) == bare, completion
        assert clean(sample) == float(domain.verify(task, completion)), completion  # the oracle agrees with the verifier
    assert sorted(p.name for p in faulty.iterdir() if p.suffix == ".py") == \
        sorted(p.name for p in seed_dir("math", "math_chat").iterdir() if p.suffix == ".py")


# --- the code domain's device run (benchmarks/device/code_fault.sh: issue 41, item 6) ---------------------------------
def test_the_code_chat_harness_with_each_reward_defect_passes_its_own_tests_and_asks_in_chat(tmp_path: Path):
    """The code defect's overlay over the code chat seed: its own self-tests pass (the plain prompt's pin replaced by
    the chat seed's), its prompt is the chat seed's, its reward is the catalogue's."""
    from evotrainer.harness import faults

    script = _load(ROOT / "benchmarks" / "gpu_fault.py", "gpu_fault")
    for defect in [n for n in faults.names("code") if faults.family(n) == "reward"]:
        faulty = script.faulty_code_harness(tmp_path / defect, defect)
        result = run_selftest(faulty)
        assert result["n"] > 0 and not result["failed"], (defect, result["failed"])
        assert (faulty / "prompt.py").read_text() == (seed_dir("code", "code_chat") / "prompt.py").read_text()
        overlay = faults.materialize("code", defect, tmp_path / f"{defect}-plain")
        assert (faulty / "rewards.py").read_text() == (overlay / "rewards.py").read_text()


@pytest.mark.slow
def test_the_code_device_script_runs_its_three_arms_on_a_tiny_chat_policy_with_humaneval_held_out(tmp_path: Path):
    """benchmarks/gpu_fault.py --domain code on the CPU, one step a run: static and evotrainer on the faulty code chat
    harness and the oracle on the clean one, each scored on HumanEval problems, and the summary written."""
    from evotrainer.config import TinyPolicyConfig
    from evotrainer.policy.build import build_model, build_tokenizer
    from evotrainer.rundir import RunDir
    from tests.test_policy_paths import CHAT_TEMPLATE

    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    model = build_model(TinyPolicyConfig(hidden_size=32, num_layers=1, num_heads=2, max_length=4096), len(tokenizer), 0)
    policy = tmp_path / "chat-policy"
    model.save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    script = _load(ROOT / "benchmarks" / "gpu_fault.py", "gpu_fault_run")
    out = tmp_path / "out"
    assert script.main(["--out", str(out), "--model", str(policy), "--device", "cpu", "--domain", "code",
                        "--seeds", "0", "--phases", "1", "--steps", "1", "--prompts", "2", "--eval-tokens", "8",
                        "--set", "training.eval_size=10", "--set", "training.dev_size=40",
                        "--set", "backtest.probe_size=40", "--set", "training.train_pool_size=100"]) == 0
    summary = json.loads((out / "gpu_fault.json").read_text())
    assert summary["domain"] == "code" and summary["defect"] == "exit_status"
    assert set(summary["arms"]) == {"static", "evotrainer", "oracle"}
    held = RunDir(out / "static-seed0").eval_tasks()
    assert len(held) == 10 and {t["difficulty"] for t in held} == {"humaneval"}
