"""How often does the gate promote an edit that cannot help? (goal: at most 5% of rounds per run)

A round is what one Engineer round's race decides for an entrant that cannot help: the replay checks on the
round's retained rollouts (here: main's first arm's), then the confirmation, by the loop's own rule
(``evotrainer.judge.checks.confirm``: seed by seed, attempts made while training, a trial in which neither arm
changed 1% of its probe answers since the start is uninformative, superiority at ``phase_level``, the futility stop),
two arms trained from the same checkpoint and scored on the probe of the dev split. A race of several such entrants
promotes no more often than one: its survivor is confirmed at seeds the screen did not use, so one confirmation per
round is what the rate is about. The nulls:

    --null seeds            main against itself: both arms train main's harness; the candidate arm's seeds are
                            shifted, so the arms differ only by training's randomness (no edit: no replay)
    --null noise            a pure-noise reward tie-break (1e-3 x a hash of the completion, scaled in its code): it
                            changes every update and carries nothing about correctness
    --null placebo-reward   a tiny tie-breaking reward component (a hash of the completion in [0, 1), weighted 0.001 in
                            harness.yaml), declared to move dead_group_ratio down, which it does by construction:
                            no group's rewards are all equal any more
    --null placebo-filter   a group filter that drops nothing that trains (a group whose rewards are all equal: every
                            advantage 0), declared to move kept_dead_ratio down, which it does by construction

    --edit 'KEY: VALUE'     power instead: main against an edit of harness.yaml (e.g. 'learning_rate: 2.0e-4'); the
                            mean paired gain over the rounds estimates what the edit is worth at the trial's length,
                            and the share of rounds promoted is the gate's power at that worth
    --main 'KEY: VALUE'     with --edit: main's harness.yaml carries this value first (committed on a branch of the
                            run's harness repo, the run's main untouched), so the edit under test restores a setting
                            from a weakened main, e.g. --main 'learning_rate: 5.0e-5' --edit 'learning_rate: 1.0e-4'

Rounds differ by phase number, so each draws other tasks and seeds; ``--first K`` starts at round K + 1, so more
rounds on the same run directory add new draws. The start's probe answers (what an arm must have changed) are those
of the checkpoint both arms train from, scored once. Prints each round (the replay's verdict, the confirmation's
check), then the rate with its 95% Wilson interval, the confirmation's rate alone, the uninformative rounds, and the
null's gain. Pre-registered criterion of the placebo nulls: docs/preregistration/placebo-aa.md.

    python benchmarks/false_promotion.py [--rounds 40] [--first 0] [--steps 20] [--seeds 2] [--probe N]
        [--null seeds|noise|placebo-reward|placebo-filter | [--main 'KEY: VALUE'] --edit 'KEY: VALUE']
        [--run-dir DIR] [--init CHECKPOINT]
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
PLACEBO_REWARD = '''

def tie_break(sample):
    """A placebo: a number in [0, 1) drawn from the completion's text alone, nothing about its correctness."""
    import hashlib

    return int(hashlib.sha256(sample["completion"].encode()).hexdigest()[:8], 16) / 16 ** 8


COMPONENTS = {"correct": correct, "tie_break": tie_break}
'''
PLACEBO_FILTER = '''

def keep_group(group: list[dict]) -> bool:
    """A placebo: drops a group only when its rewards are all equal, so that none of its rollouts would train (every
    GRPO advantage 0; the loss has no KL term)."""
    rewards = [r["reward"] for r in group]
    return max(rewards) - min(rewards) > 1e-9
'''


def placebo(repo, main_sha: str, null: str):
    """The null's edit committed on ``candidates/null-<null>`` from main, as the Candidate the replay judges (its
    declared variable, target metric and direction)."""
    from evotrainer.contracts import Candidate

    rewards, filters = repo.show_file(main_sha, "rewards.py"), repo.show_file(main_sha, "filters.py")
    knobs = repo.show_file(main_sha, "harness.yaml")
    one = 'COMPONENTS = {"correct": correct}'
    if null == "placebo-filter":
        edits = {"filters.py": filters.split("\ndef keep_group")[0].rstrip() + "\n" + PLACEBO_FILTER}
        variable, target = "filters.keep_group", "kept_dead_ratio"
    elif null == "placebo-reward":
        edits = {"rewards.py": rewards.replace(one, PLACEBO_REWARD.strip()),
                 "harness.yaml": knobs.replace("  correct: 1.0", "  correct: 1.0\n  tie_break: 0.001")}
        variable, target = "rewards.tie_break", "dead_group_ratio"
    else:
        edits, variable, target = {"rewards.py": rewards.replace(one, NOISE.strip())}, "rewards.tie_break", \
            "dead_group_ratio"
    if any(text == {"filters.py": filters, "rewards.py": rewards, "harness.yaml": knobs}[f] for f, text in
           edits.items()):
        sys.exit(f"--null {null}: main's harness does not have the seed's shape this edit is written for")
    cand = Candidate(branch=f"candidates/null-{null}", base_sha=main_sha, diagnosis_id="null", intervention=null,
                     hypothesis=f"if {variable} changes, {target} falls, because the edit is built to move it",
                     variable=variable, target_metric=target, direction="down", expected=f"{target} down",
                     rollback="revert", files=sorted(edits))
    cand.sha = repo.commit_candidate(cand.branch, main_sha, edits, f"{variable}: the {null} null", "", {})
    return cand


def start_answers(rd, cfg, base: str, probe: int) -> dict[str, str]:
    """The answers of the checkpoint both arms train from on the probe (what a trial's arms must have changed)."""
    from evotrainer.domains import get_domain
    from evotrainer.trainer.model import evaluate_as_configured, load_policy, resolve_device

    device = resolve_device(cfg.policy.device)
    model, tokenizer, _ = load_policy(base, device, cfg.policy.dtype, False, 0)
    model.to(device)
    return evaluate_as_configured(model, tokenizer, get_domain(cfg.domain, cfg.executor), rd.probe_tasks(probe), device,
                                  cfg.training, cfg.policy, answers=True).answers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--first", type=int, default=0, help="rounds already made (new rounds start after them)")
    ap.add_argument("--steps", type=int, default=20, help="generated batches per trial arm")
    ap.add_argument("--seeds", type=int, default=2, help="replicates per arm")
    ap.add_argument("--probe", type=int, default=None, help="probe tasks of the dev split (default: the run's "
                    "backtest.probe_size)")
    ap.add_argument("--null", choices=["seeds", "noise", "placebo-reward", "placebo-filter"], default="seeds")
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
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from evotrainer import config as C
    from evotrainer.harness.repo import HarnessRepo
    from evotrainer.judge.checks import TRIAL, TRIAL_ANSWERS, confirm, phase_level, run_backtest
    from evotrainer.metrics import wilson
    from evotrainer.rollouts import read_rollouts, spread_batches
    from evotrainer.rundir import RunDir
    from evotrainer.trainer.grpo import run_pilot
    from evotrainer.trainer.wire import PhaseRequest

    rd = RunDir(a.run_dir or Path(tempfile.mkdtemp(prefix="false-promotion-")) / "run")
    if not rd.exists():
        rd.init(C.parse({}), log=print)
    base = str(a.init.resolve()) if a.init else rd.ensure_policy(log=print)
    print(f"both arms train from {base}", flush=True)
    cfg = rd.load_config()
    a.probe = a.probe or cfg.backtest.probe_size
    level = phase_level(cfg.evolution, cfg.backtest)
    repo = HarnessRepo(rd.harness)
    main_sha = repo.sha("main")
    cand = placebo(repo, main_sha, a.null) if a.null != "seeds" and not a.edit else None

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
    cand_sha = cand.sha if cand else main_sha
    if a.edit:
        cand_sha = set_knob(main_sha, a.edit, "edit", "the edit under test")
    shift = a.seeds if a.null == "seeds" and not a.edit else 0  # main against itself: the candidate's other seeds
    t0 = time.time()
    start = start_answers(rd, cfg, base, a.probe)
    print(f"the start's answers on {len(start)} probe tasks: {time.time() - t0:.0f} s", flush=True)

    def pilot(sha: str, phase: int, replicate: int):
        return run_pilot(PhaseRequest(run_dir=str(rd.root), phase=phase, harness_sha=sha, pilot=True,
                                      replicate=replicate, init_checkpoint=base, steps=a.steps,
                                      training=cfg.training, probe_size=a.probe, sandbox=cfg.sandbox))

    promoted = confirmed = uninformative = 0
    gains, margins = [], []
    tasks = {t["id"]: t for t in rd.harness_tasks()} if cand else {}
    for r in range(a.first, a.first + a.rounds):
        phase = 100 + r
        check, main, _ = confirm(lambda k: (pilot(main_sha, phase, k), pilot(cand_sha, phase, k + shift)),
                                 range(a.seeds), level, start)
        replay = "no edit: no replay"
        passed_replay = True
        if cand is not None:  # the replay checks, on this round's retained rollouts: main's first arm's
            rows = spread_batches(read_rollouts(Path(main[0].rollout_path)), cfg.backtest.replay_batches)
            report = run_backtest(repo, cand, rows, tasks, main_sha=main_sha, settings=cfg.backtest,
                                  sandbox=cfg.sandbox, hide=rd.hidden_from_harness(), domain=cfg.domain,
                                  executor=cfg.executor)
            target = next((c for c in report.checks if c.name == f"target:{cand.target_metric}"), None)
            passed_replay = report.verdict == "promote"
            replay = (f"replay passed ({target.name} {target.base} -> {target.candidate})" if passed_replay and target
                      else f"replay rejected it: {'; '.join(report.reasons)[:300]}")
        confirmed += check.passed
        uninformative += check.name == TRIAL_ANSWERS and not check.passed
        promoted += check.passed and passed_replay
        if check.name == TRIAL:
            gains.append(check.candidate - check.base)
            margins.append(check.threshold - check.base)  # the gain this trial needed: its interval's lower side
        print(f"round {r + 1:2d}: {'PROMOTED' if check.passed and passed_replay else 'nothing promoted'}  "
              f"{replay}; {check.name}: {check.detail}", flush=True)
    low, high = wilson(promoted, a.rounds)
    what = (f"main={a.main!r} " if a.main else "") + (f"edit={a.edit!r}" if a.edit else f"null={a.null}")
    goal = (f"the gate's power at the edit's worth; goal >= {POWER_GOAL:.0%} at +3 points" if a.edit
            else f"goal <= {cfg.backtest.false_promotion_rate:.0%}")
    print(f"\n{what}: {promoted} of {a.rounds} rounds promoted ({promoted / a.rounds:.1%}, 95% Wilson interval "
          f"{low:.1%} to {high:.1%}; {goal}); the confirmation alone passed {confirmed}, {uninformative} were "
          f"uninformative; each confirmation at level {level:.2%}, {a.steps} batches x {a.seeds} seed(s) per arm, "
          f"{a.probe} probe tasks; {time.time() - t0:.0f} s")
    if len(gains) > 1:
        print(f"the {'edit' if a.edit else 'null'}'s gain: mean {statistics.mean(gains):+.4f}, sd "
              f"{statistics.stdev(gains):.4f} (se {statistics.stdev(gains) / len(gains) ** 0.5:.4f}); the gate's "
              f"margin: mean {statistics.mean(margins):.4f} (an edit whose probe gain is that large is promoted "
              "about half the time)")


if __name__ == "__main__":
    main()
