"""Does an A/B trial's verdict hold at longer horizons? (a check for short-horizon bias)

Trains main and a candidate of a finished run from the checkpoint of one of its phases, exactly as the loop's
trial does (``PhaseRequest.make``: same seeds, tasks and batch; ``--seeds`` replicates per arm), for each of
several budgets, and prints the gate's paired decision (``evotrainer.judge.checks.trial_check``) at each. An edit
whose gain shrinks or turns negative as the budget grows is one a short trial promotes and a phase regrets.

    python benchmarks/trial_horizon.py RUN_DIR REF [--phase 1] [--horizons 20,60,180] [--seeds 2] [--probe N]
                                       [--shift K] [--dev]

REF is a branch or commit of the run's harness repo (e.g. candidates/phase-1-2); main is the harness that trained
``--phase`` (its tag ``phase-N``), so the comparison is the one the loop made after that phase. ``--shift K``
shifts the candidate arm's seeds by K replicates (REF = phase-N then measures main against itself: training's
randomness alone); ``--dev`` scores the whole dev split instead of the probe, as a phase and its counterfactual
are scored (the realized-effect comparison at ``--horizons`` = the phase's length).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("ref", help="the candidate: a branch or commit of the run's harness repo")
    ap.add_argument("--phase", type=int, default=1, help="the trial starts from this phase's checkpoint")
    ap.add_argument("--horizons", default="20,60,180", help="generated batches per arm, comma-separated")
    ap.add_argument("--seeds", type=int, default=2, help="replicates per arm")
    ap.add_argument("--probe", type=int, default=None, help="probe tasks of the dev split (default: the run's "
                    "backtest.probe_size)")
    ap.add_argument("--shift", type=int, default=0, help="the candidate arm's seeds start this many replicates later")
    ap.add_argument("--dev", action="store_true", help="score the whole dev split instead of the probe")
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from evotrainer.harness.repo import HarnessRepo
    from evotrainer.judge.checks import trial_check
    from evotrainer.rundir import RunDir
    from evotrainer.trainer.grpo import run_pilot
    from evotrainer.trainer.wire import PhaseRequest

    rd = RunDir(a.run_dir)
    cfg = rd.load_config()
    a.probe = a.probe or cfg.backtest.probe_size
    base = rd.ensure_policy(log=print)
    repo = HarnessRepo(rd.harness)
    main_sha = repo.commit(f"phase-{a.phase}").sha
    cand_sha = repo.commit(a.ref).sha
    init = str(rd.checkpoint(a.phase))

    def arm(sha: str, steps: int, shift: int = 0) -> list:
        req = PhaseRequest.make(cfg, str(rd.root), a.phase + 1, sha, init, steps, pilot=True, base_policy=base)
        update = {"probe_size": a.probe, "counterfactual": a.dev}
        return [run_pilot(req.model_copy(update={**update, "replicate": shift + r})).probe for r in range(a.seeds)]

    print(f"{a.ref} ({cand_sha[:8]}) against main@{main_sha[:8]} from phase {a.phase}'s checkpoint; "
          f"{cfg.training.prompts_per_step} prompts x {a.seeds} seed(s) per arm (candidate seeds shifted by "
          f"{a.shift}), scored on {'the whole dev split' if a.dev else f'{a.probe} probe tasks'}")
    for steps in [int(h) for h in a.horizons.split(",")]:
        t0 = time.time()
        mains, cands = arm(main_sha, steps), arm(cand_sha, steps, a.shift)
        check = trial_check(mains, cands)
        each = " / ".join(f"{r.accuracy:.3f}" for r in mains), " / ".join(f"{r.accuracy:.3f}" for r in cands)
        print(f"{steps:4d} batches: {'PROMOTE' if check.passed else 'reject '}  main {check.base:.3f} ({each[0]})  "
              f"candidate {check.candidate:.3f} ({each[1]})  {check.detail}  ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
