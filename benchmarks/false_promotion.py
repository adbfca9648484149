"""How often does a round of A/B trials promote an edit that cannot help? (goal: at most 5% of rounds)

Each trial is the gate's own decision (``evotrainer.judge.checks.trial_check``, at the level the loop uses:
``phase_level``: the run's ``backtest.false_promotion_rate`` over the most trials a phase can run) on two arms
trained from the same checkpoint, scored on the probe of the dev split:

    --null seeds   main against itself: both arms train main's harness; the candidate arm's seeds are shifted, so
                   the arms differ only by training's randomness (what any edit without a real effect looks like
                   to the trial: the trajectory changes, the expected accuracy does not)
    --null noise   main against a pure-noise reward tie-break (1e-3 x a hash of the completion): it changes every
                   update, cannot carry information about correctness

    --edit 'KEY: VALUE'   power instead: main against an edit of harness.yaml (e.g. 'learning_rate: 2.0e-4'); the
                   mean paired gain over the rounds estimates what the edit is worth at the trial's length, and the
                   share of trials promoted is the gate's power at that worth ("an edit worth +X dev points is
                   promoted Y% of the time")
    --main 'KEY: VALUE'   with --edit: main's harness.yaml carries this value first (committed on a branch of the
                   run's harness repo, the run's main untouched), so the edit under test restores a setting from a
                   weakened main, e.g. --main 'learning_rate: 5.0e-5' --edit 'learning_rate: 1.0e-4': an edit of
                   known direction whose size the rounds measure

A round is what one phase's backtest does: main's arm trained once, then ``--per-round K`` candidates (each another
shift of the seeds, or the same noise edit at other seeds), each judged against it; the round promotes when any
trial passes. Rounds differ by phase number, so each one draws other tasks and seeds. Prints each trial, each
round, and the rates. ``--first K`` starts at round K + 1, so more rounds on the same run directory add new draws.

    python benchmarks/false_promotion.py [--rounds 40] [--per-round 3] [--first 0] [--steps 20] [--seeds 2]
        [--probe N] [--null seeds | [--main 'KEY: VALUE'] --edit 'KEY: VALUE'] [--run-dir DIR] [--init CHECKPOINT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POWER_GOAL = 0.80  # issue 26: an edit worth +3 dev points is promoted at least this often

NOISE = '''

def tie_break(sample):
    import hashlib

    return int(hashlib.sha256(sample["completion"].encode()).hexdigest()[:8], 16) / 16 ** 8 * 1e-3


COMPONENTS = {"correct": correct, "tie_break": tie_break}
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--per-round", type=int, default=None, help="candidate trials per round (main's arm is shared; "
                    "default 3 under --null seeds, else 1: a noise or knob edit trains at main's seeds, as in the "
                    "loop, so more of it in one round would repeat one trial)")
    ap.add_argument("--first", type=int, default=0, help="rounds already made (new rounds start after them)")
    ap.add_argument("--steps", type=int, default=20, help="generated batches per trial arm")
    ap.add_argument("--seeds", type=int, default=2, help="replicates per arm")
    ap.add_argument("--probe", type=int, default=None, help="probe tasks of the dev split (default: the run's "
                    "backtest.probe_size)")
    ap.add_argument("--null", choices=["seeds", "noise"], default="seeds")
    ap.add_argument("--edit", default=None, help="'KEY: VALUE' of harness.yaml: measure power, not the null")
    ap.add_argument("--main", default=None, help="'KEY: VALUE' of harness.yaml set in main's arm first (with --edit)")
    ap.add_argument("--run-dir", type=Path, default=None, help="reuse a run directory (default: a fresh one)")
    ap.add_argument("--init", type=Path, default=None, help="the checkpoint both arms train from (default: the run's "
                    "starting policy). The loop's trials start from a phase's checkpoint, e.g. RUN/checkpoints/"
                    "phase-0001 after `evotrainer run RUN --phases 1`")
    a = ap.parse_args()
    if a.main and not a.edit:
        sys.exit("--main needs --edit: it sets what the edit under test changes back")
    if a.init and not (a.init / "config.json").is_file():
        sys.exit(f"--init {a.init}: not a checkpoint folder (no config.json); a phase's is RUN/checkpoints/phase-0001")
    seeds_null = a.null == "seeds" and not a.edit
    if a.per_round is None:
        a.per_round = 3 if seeds_null else 1
    elif a.per_round > 1 and not seeds_null:
        sys.exit("--per-round > 1 needs --null seeds: a noise or knob edit at main's seeds repeats one trial")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from evotrainer import config as C
    from evotrainer.config import SandboxConfig
    from evotrainer.harness.repo import HarnessRepo
    from evotrainer.judge.checks import phase_level, trial_check
    from evotrainer.rundir import RunDir
    from evotrainer.trainer.grpo import run_pilot
    from evotrainer.trainer.wire import PhaseRequest

    rd = RunDir(a.run_dir or Path(tempfile.mkdtemp(prefix="false-promotion-")) / "run")
    if not rd.exists():
        rd.init(C.parse({}), log=print)
    base = str(a.init.resolve()) if a.init else rd.ensure_policy(log=print)
    print(f"both arms train from {base}", flush=True)
    cfg = rd.load_config()
    training = cfg.training  # the run's batch, as its phases and trials use it
    a.probe = a.probe or cfg.backtest.probe_size
    level = phase_level(cfg.evolution, cfg.backtest)
    repo = HarnessRepo(rd.harness)
    main_sha = repo.sha("main")
    cand_sha = main_sha
    if a.null == "noise":
        rewards = repo.show_file("main", "rewards.py").replace('COMPONENTS = {"correct": correct}', NOISE.strip())
        cand_sha = repo.commit_candidate("candidates/null-noise", main_sha, {"rewards.py": rewards}, "noise", "", {})

    def set_knob(sha: str, edit: str, role: str, why: str) -> str:
        """A commit on top of ``sha`` (branch candidates/power-ROLE-KEY) whose harness.yaml carries ``edit`` ('KEY:
        VALUE', a top-level key); ``role`` is the flag that asked for it, main or edit."""
        key = edit.split(":", 1)[0].strip()
        knobs = repo.show_file(sha, "harness.yaml")
        lines = [f"{edit}  # {why}" if line.startswith(f"{key}:") else line for line in knobs.splitlines()]
        if lines == knobs.splitlines():
            sys.exit(f"--{role}: harness.yaml has no top-level key {key!r}")
        return repo.commit_candidate(f"candidates/power-{role}-{key}", sha, {"harness.yaml": "\n".join(lines) + "\n"},
                                     edit, "", {})

    if a.main:
        main_sha = set_knob(main_sha, a.main, "main", "main's arm under --main")
    if a.edit:
        cand_sha = set_knob(main_sha, a.edit, "edit", "the edit under test")
    shift = a.seeds if seeds_null else 0

    def arm(sha: str, phase: int, offset: int) -> list:
        return [run_pilot(PhaseRequest(run_dir=str(rd.root), phase=phase, harness_sha=sha, pilot=True,
                                       replicate=offset + r, init_checkpoint=base, steps=a.steps,
                                       training=training, probe_size=a.probe, sandbox=SandboxConfig())).probe
                for r in range(a.seeds)]

    rounds_promoted = trials = trials_promoted = 0
    gains, margins = [], []
    t0 = time.time()
    for r in range(a.first, a.first + a.rounds):
        phase = 100 + r
        main = arm(main_sha, phase, 0)
        passed = 0
        for k in range(1, a.per_round + 1):  # each candidate of the round at other seeds than main's and each other's
            check = trial_check(main, arm(cand_sha, phase, shift * k), level=level)
            trials, trials_promoted, passed = trials + 1, trials_promoted + check.passed, passed + check.passed
            gains.append(check.candidate - check.base)
            margins.append(check.threshold - check.base)  # the gain this trial needed: its interval's lower side
            print(f"round {r + 1:2d} trial {k}: {'PROMOTED' if check.passed else 'rejected'}  {check.detail}",
                  flush=True)
        rounds_promoted += passed > 0
        print(f"round {r + 1:2d}: {'PROMOTED' if passed else 'nothing promoted'}", flush=True)
    rate = rounds_promoted / a.rounds
    what = (f"main={a.main!r} " if a.main else "") + (f"edit={a.edit!r}" if a.edit else f"null={a.null}")
    goal = (f"the gate's power at the edit's worth; goal >= {POWER_GOAL:.0%} at +3 points" if a.edit
            else f"goal <= {cfg.backtest.false_promotion_rate:.0%}")
    print(f"\n{what}: {rounds_promoted} of {a.rounds} rounds promoted ({rate:.1%}; {goal}); {trials_promoted} of "
          f"{trials} trials; each trial at level "
          f"{level:.2%}; {a.per_round} trial(s) per round, {a.steps} batches x {a.seeds} seed(s) per arm, {a.probe} "
          f"probe tasks; {time.time() - t0:.0f} s")
    if len(gains) > 1:
        print(f"the {'edit' if a.edit else 'null'}'s gain: mean {statistics.mean(gains):+.4f}, sd "
              f"{statistics.stdev(gains):.4f} (se {statistics.stdev(gains) / len(gains) ** 0.5:.4f}); the gate's "
              f"margin: mean {statistics.mean(margins):.4f} (an edit whose probe gain is that large is promoted "
              "about half the time)")


if __name__ == "__main__":
    main()
