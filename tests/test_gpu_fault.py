"""benchmarks/gpu_fault.py's defect (run on a GPU): the chat seed with a reward that credits only a bare integer.
It passes its own tests, as a user's flawed harness would, and its reward disagrees with the verifier exactly where
an instruct model answers in a sentence."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
