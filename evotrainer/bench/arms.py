"""The bench's arms: what each one changes, how its runs are named, and which runs of a bench sit side by side.

An arm is a list of config overrides on the bench's common config (``ARMS``); static's reruns are
``static_rerun`` (rerun 1) and ``static_rerun<k>``. Each arm-seed is a run directory ``BENCH/<arm>-seed<N>``;
:func:`arms_beside` finds the other arms of a run's seed, for the run's report. The fault bench's arms
(``FAULT_ARMS``) are ordinary arms on a defect's faulty seed (``BENCH/<defect>/<arm>-seed<N>``) or on the clean seed,
shared by every defect (``BENCH/clean/<arm>-seed<N>``). Alone:
``python -c "from evotrainer.bench.arms import expand_arms; print(expand_arms(['static_rerun'], 3))"``.
"""

from __future__ import annotations

import json
from pathlib import Path

from evotrainer.config import ConfigError


def _rerun(k: int) -> list[str]:
    return ["evolution.mode=static", f"training.rerun={k}"]  # static trained again with other training randomness


ARMS = {
    "static": ["evolution.mode=static"],
    "static_rerun": _rerun(1),
    "reference": ["evolution.mode=static", "harness=math_reference"],
    "keep_discard": ["evolution.mode=keep_discard"],
    "evotrainer": ["evolution.mode=evolve"],
}


RERUN = "static_rerun"  # static trained again: rerun 1 is this arm, rerun k >= 2 is static_rerun<k>

# Claims are read on bench seeds; defaults (batch, learning rate, warm-up, levels) are chosen on calibration seeds
# (benchmarks/learnability.py, benchmarks/calibrate_levels.py). The two never meet, or a default would be tuned to
# the noise of the seeds that then judge it.
BENCH_SEEDS = (0, 1, 2)
CALIBRATION_SEEDS = (100, 101, 102)


def parse_seeds(text: str | None, calibration: bool = False) -> list[int]:
    """``--seeds`` ("0,1,2") as a list, or when not given the seeds of the bench's kind: ``BENCH_SEEDS``, or
    ``CALIBRATION_SEEDS`` under ``--calibration``. ValueError on a seed that is not an integer."""
    if text is None:
        return list(CALIBRATION_SEEDS if calibration else BENCH_SEEDS)
    return [int(s) for s in text.split(",") if s.strip()]


def check_seeds(seeds: list[int], calibration: bool = False) -> None:
    """A bench runs on bench seeds, or (``calibration``) only on calibration seeds; ConfigError, one line, else."""
    if not seeds:
        raise ConfigError("--seeds: no seed given")
    if calibration and (other := [s for s in seeds if s not in CALIBRATION_SEEDS]):
        raise ConfigError(f"--seeds: {other} are no calibration seeds ({', '.join(map(str, CALIBRATION_SEEDS))}); "
                          "a calibration bench chooses defaults on those alone")
    if not calibration and (cal := [s for s in seeds if s in CALIBRATION_SEEDS]):
        raise ConfigError(f"--seeds: {cal} are calibration seeds (defaults are chosen on "
                          f"{', '.join(map(str, CALIBRATION_SEEDS))}): a bench that judges them is not independent "
                          "of its defaults; use other seeds, or --calibration to choose a default on them")


def rerun_arm(k: int) -> str:
    """The arm that trains static again with ``training.rerun: k`` (k >= 1)."""
    return RERUN if k == 1 else f"{RERUN}{k}"


def rerun_number(arm: str) -> int | None:
    """k for the arm that trains static with ``training.rerun: k`` (1 for static_rerun); None for any other name."""
    if arm == RERUN:
        return 1
    k = arm[len(RERUN):]
    return int(k) if arm.startswith(RERUN) and k.isdigit() and int(k) >= 2 and arm == rerun_arm(int(k)) else None


def arm_overrides(arm: str) -> list[str]:
    """The config overrides that make an arm; ValueError for a name that is no arm."""
    if arm in ARMS:
        return ARMS[arm]
    if k := rerun_number(arm):
        return _rerun(k)
    raise ValueError(f"no arm {arm!r}")


def is_arm(name: str) -> bool:
    """A name ``--arms`` accepts: one of ``ARMS`` or static_rerun<k>."""
    return name in ARMS or rerun_number(name) is not None


def arm_order(arm: str) -> tuple[int, int]:
    """Arms in ``ARMS`` order, reruns by number from static_rerun on."""
    k = rerun_number(arm)
    return (list(ARMS).index(RERUN), k) if k else (list(ARMS).index(arm), 0)


def expand_arms(arms: list[str], reruns: int = 1) -> list[str]:
    """The arms to run, in arm order: ``arms`` with static_rerun2 .. static_rerun<reruns> added when static_rerun
    is among them (``--reruns``). An unknown name or a rerun count below 1 raises ConfigError."""
    unknown = [a for a in arms if not is_arm(a)]
    if unknown:
        raise ConfigError(f"--arms: unknown arm(s) {unknown} (allowed: {', '.join(ARMS)}, and "
                                     f"{RERUN}2, {RERUN}3, ... for more static reruns)")
    if reruns < 1:
        raise ConfigError(f"--reruns: {reruns} (at least 1, static_rerun itself)")
    extra = [rerun_arm(k) for k in range(2, reruns + 1)] if RERUN in arms else []
    return sorted(dict.fromkeys([*arms, *extra]), key=arm_order)


def static_runs(arms) -> list[str]:
    """The arms that train the seed harness unchanged, static and its reruns: per seed, the replicates that show
    training's run-to-run noise."""
    return [a for a in arms if a == "static" or rerun_number(a)]


def run_dir_name(arm: str, seed: int) -> str:
    """The folder of one arm-seed run inside a bench folder."""
    return f"{arm}-seed{seed}"


# The fault bench (``evotrainer bench --faults``, ``evotrainer/bench/faults.py``): arm -> (the ordinary arm it trains
# as, whether on the defect's faulty seed, overrides of its own). The clean-seed arms are the same for every defect of
# a seed: one run per seed in BENCH/clean/, which every defect's comparison reads (oracle is exactly the ordinary
# bench's static). The reference arms are a second clean seed (harness_repo/math_reference), asked for by --arms.
FAULT_ARMS: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "static": ("static", True, ()),                 # the faulty seed, never edited
    "evotrainer": ("evotrainer", True, ()),         # the full loop from the faulty seed
    "keep_discard": ("keep_discard", True, ()),     # the scalar loop from the faulty seed
    "static_matched": ("static", True, ()),         # static for as many completions as evotrainer spent (MATCHED)
    "oracle": ("static", False, ()),                # the defect removed: the clean seed, never edited
    "clean_evotrainer": ("evotrainer", False, ()),  # the full loop from the clean seed: the no-harm control
    "oracle_matched": ("static", False, ()),        # oracle for as many completions as clean_evotrainer spent
    "reference_oracle": ("reference", False, ()),   # the second clean seed, math_reference, never edited
    "reference_evotrainer": ("evotrainer", False, ("harness=math_reference",)),  # the loop from it: no harm there
    "reference_matched": ("reference", False, ()),  # reference_oracle for as many completions as reference_evotrainer
}
# A matched arm trains its static arm's harness, after the evolving arm of its seed, for as many generated completions
# as that run spent (its phases and its judging: trials, races, counterfactuals), in more steps per phase: equal
# compute, paired like every arm. Opt-in (--arms), as is the second clean seed.
MATCHED = {"static_matched": ("static", "evotrainer"), "oracle_matched": ("oracle", "clean_evotrainer"),
           "reference_matched": ("reference_oracle", "reference_evotrainer")}
DEFAULT_FAULT_ARMS = ("static", "evotrainer", "keep_discard", "oracle", "clean_evotrainer")
CLEAN = "clean"  # the folder of a fault bench's clean-seed runs


def expand_fault_arms(arms: list[str]) -> list[str]:
    """The fault bench's arms to run, in ``FAULT_ARMS`` order; ConfigError (one line) for an unknown name or none, or a
    matched arm without the two arms it is matched from."""
    unknown = [a for a in arms if a not in FAULT_ARMS]
    if unknown or not arms:
        raise ConfigError(f"--arms: {f'unknown arm(s) {unknown}' if unknown else 'no arm given'} for a fault bench "
                          f"(allowed: {', '.join(FAULT_ARMS)})")
    for arm in arms:
        if arm in MATCHED and (need := [a for a in MATCHED[arm] if a not in arms]):
            raise ConfigError(f"--arms: {arm} is matched to {MATCHED[arm][1]}'s completions at {MATCHED[arm][0]}'s "
                              f"rate per step: add {', '.join(need)}")
    return sorted(dict.fromkeys(arms), key=list(FAULT_ARMS).index)


def fault_run_dir(fault: str | None, arm: str, seed: int) -> str:
    """The folder of one run inside a fault bench: ``<fault>/<arm>-seed<N>`` on the faulty seed, ``clean/<arm>-seed<N>``
    on the clean one (the same folder for every defect)."""
    return f"{fault if FAULT_ARMS[arm][1] else CLEAN}/{run_dir_name(arm, seed)}"


def in_fault_bench(root: Path) -> bool:
    """A run folder laid out as a fault bench's: in ``clean/`` or in a defect's folder (catalogued or generated), beside
    ``clean/``."""
    from evotrainer.harness.faults import known

    return (root.parent.parent / CLEAN).is_dir() and (root.parent.name == CLEAN or known(root.parent.name))


def arms_beside(root: Path) -> dict[str, Path]:
    """The arms of the bench that the run at ``root`` belongs to, with the same seed (itself included), in arm
    order; empty when it is not a bench run (its folder is not ``<arm>-seed<N>`` beside other arms). In a fault
    bench, a defect's run sits beside that defect's arms and the clean seed's oracle; a clean-seed run beside the
    other clean-seed arm."""
    root = Path(root)
    arm, _, seed = root.name.rpartition("-seed")
    if not seed.isdigit():
        return {}
    if arm in FAULT_ARMS and in_fault_bench(root):  # a defect's arms, and the clean seed's oracle beside them
        clean = root.parent.name == CLEAN
        here = [a for a, (_, faulty, _) in FAULT_ARMS.items() if faulty != clean]
        folders = {root.parent: here} if clean else {root.parent: here, root.parent.parent / CLEAN: ["oracle"]}
        order = list(FAULT_ARMS).index
    elif is_arm(arm):
        folders, order = {root.parent: None}, arm_order
    else:
        return {}
    found = {}
    for folder, names in folders.items():
        for path in folder.glob(f"*-seed{seed}"):
            other = path.name[:-len(f"-seed{seed}")]
            if (other in names if names is not None else is_arm(other)) and (path / "config.yaml").is_file():
                found[other] = path
    return {a: found[a] for a in sorted(found, key=order)} if len(found) > 1 else {}


def summary_beside(root: Path) -> dict | None:
    """For the report of a run in a fault bench: its defect's arms (or the clean seed's) from ``faults.json``, shaped
    as ``bench.json`` (``{"arms": ...}``); None outside a fault bench or before the bench has finished."""
    root = Path(root)
    path = root.parent.parent / "faults.json"
    if not in_fault_bench(root) or not path.is_file():
        return None
    data = json.loads(path.read_text())
    entry = data.get("clean") if root.parent.name == CLEAN else data.get("defects", {}).get(root.parent.name)
    return {"arms": entry["arms"]} if entry else None
