"""How often does the A/B trial promote an edit that cannot help? (goal: at most 5% of trials)

Each trial is the gate's own decision (``evotrainer.judge.checks.trial_check``) on two arms trained from the same
checkpoint, scored on the probe split:

    --null seeds   main against itself: both arms train main's harness; the candidate arm's seeds are shifted, so
                   the arms differ only by training's randomness (what any edit without a real effect looks like
                   to the trial: the trajectory changes, the expected accuracy does not)
    --null noise   main against a pure-noise reward tie-break (1e-3 x a hash of the completion): it changes every
                   update, cannot carry information about correctness

Trials differ by phase number, so each one draws other tasks and seeds. Prints each trial and the rate.
``--first K`` starts at trial K + 1, so more trials on the same run directory add new draws to the ones made.

    python benchmarks/false_promotion.py [--trials 20] [--first 0] [--steps 20] [--seeds 2] [--probe 300]
        [--null seeds] [--run-dir DIR]
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

NOISE = '''

def tie_break(sample):
    import hashlib

    return int(hashlib.sha256(sample["completion"].encode()).hexdigest()[:8], 16) / 16 ** 8 * 1e-3


COMPONENTS = {"correct": correct, "tie_break": tie_break}
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--first", type=int, default=0, help="trials already made (new trials start after them)")
    ap.add_argument("--steps", type=int, default=20, help="generated batches per trial arm")
    ap.add_argument("--seeds", type=int, default=2, help="replicates per arm")
    ap.add_argument("--probe", type=int, default=300, help="probe tasks")
    ap.add_argument("--null", choices=["seeds", "noise"], default="seeds")
    ap.add_argument("--run-dir", type=Path, default=None, help="reuse a run directory (default: a fresh one)")
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from evotrainer import config as C
    from evotrainer.config import SandboxConfig
    from evotrainer.harness.repo import HarnessRepo
    from evotrainer.judge.checks import trial_check
    from evotrainer.rundir import RunDir
    from evotrainer.trainer.grpo import run_pilot
    from evotrainer.trainer.wire import PhaseRequest

    rd = RunDir(a.run_dir or Path(tempfile.mkdtemp(prefix="false-promotion-")) / "run")
    if not rd.exists():
        rd.init(C.parse({}), log=print)
    base = rd.ensure_policy(log=print)
    training = rd.load_config().training  # the run's batch, as its phases and trials use it
    repo = HarnessRepo(rd.harness)
    main_sha = repo.sha("main")
    cand_sha = main_sha
    if a.null == "noise":
        rewards = repo.show_file("main", "rewards.py").replace('COMPONENTS = {"correct": correct}', NOISE.strip())
        cand_sha = repo.commit_candidate("candidates/null-noise", main_sha, {"rewards.py": rewards}, "noise", "", {})
    shift = a.seeds if a.null == "seeds" else 0

    def arm(sha: str, phase: int, offset: int) -> list:
        return [run_pilot(PhaseRequest(run_dir=str(rd.root), phase=phase, harness_sha=sha, pilot=True,
                                       replicate=offset + r, init_checkpoint=base, steps=a.steps,
                                       training=training, probe_size=a.probe, sandbox=SandboxConfig())).probe
                for r in range(a.seeds)]

    promoted = 0
    gains, margins = [], []
    t0 = time.time()
    for t in range(a.first, a.first + a.trials):
        phase = 100 + t
        check = trial_check(arm(main_sha, phase, 0), arm(cand_sha, phase, shift))
        promoted += check.passed
        gains.append(check.candidate - check.base)
        margins.append(check.threshold - check.base)  # the gain this trial needed to promote: its interval's lower side
        print(f"trial {t + 1:2d}: {'PROMOTED' if check.passed else 'rejected'}  {check.detail}", flush=True)
    rate = promoted / a.trials
    print(f"\nnull={a.null}: {promoted} of {a.trials} trials promoted ({rate:.0%}); goal <= 5%; "
          f"{a.steps} batches x {a.seeds} seed(s) per arm, {a.probe} probe tasks; {time.time() - t0:.0f} s")
    if len(gains) > 1:
        print(f"the null's gain: mean {statistics.mean(gains):+.4f}, sd {statistics.stdev(gains):.4f}; the gate's "
              f"margin: mean {statistics.mean(margins):.4f} (an edit whose probe gain is that large is promoted "
              "about half the time)")


if __name__ == "__main__":
    main()
