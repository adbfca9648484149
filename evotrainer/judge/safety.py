"""Safety checks: every harness file of a candidate judged, and every attempt it made a verdict.

The backtest (``evotrainer/judge/checks.py`` ``judge``) adds these to its checks, one call, right after the
candidate's own self-tests. Each is an ``evotrainer.contracts.Check``; any failed one rejects the candidate:

    harness_tree          regular files only, none oversize (``harness/files.py``)
    variable              the diff changes the one variable the candidate declares, nothing else (``variables.py``)
    prompts               the candidate's prompt.py on the retained tasks: a non-empty string within the budget
    prompt_leak           a task's answer does not appear in its prompt where main's prompt lacks it (beyond the
                          rate at which other tasks' answers appear there by chance)
    tests_kept            every test main has is still there, unchanged (unless the declared variable is that test, or
                          the evaluator contradicts it and the candidate has its rewrite: ``judge/arbitrate.py``)
    main_tests            main's tests/ pass against the candidate's code (but those failing on main too, and those the
                          evaluator contradicts)
    diagnostics_kept      every diagnostic registered on main is still registered, its alert thresholds not loosened
    curriculum_coverage   every level main samples is still sampled
    deterministic_replay  rewards and filters answer the same when replayed again in a fresh sandbox, in
                          training-sized batches (random, stateful or replay-detecting code differs)
    sandbox_attempts      in none of the candidate's sandboxes did harness code try what it must never do
                          (network, environment, forbidden paths, processes, signals, native code, limits, a
                          forged response), named with the file and line

Harness code runs only in the sandbox: the backtest's own worker on the candidate (a full replay, the prompts) and
one more on the candidate's code with main's tests (replays in training-sized batches, then main's tests); the
attempts are those of every sandbox of the candidate (``sandbox.attempts_log``: its self-tests' too). No check
raises: one that cannot be computed fails with the reason. Try it alone:
``python -m pytest -q tests/test_hostile.py -k "leak or bomb"``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from evotrainer.config import BacktestConfig, SandboxConfig
from evotrainer.contracts import Candidate, Check
from evotrainer.harness.knobs import KnobsError, read_knobs
from evotrainer.harness.repo import HarnessRepo
from evotrainer.judge import variables
from evotrainer.judge.arbitrate import Arbiter, harness_tests
from evotrainer.judge.replay import replay
from evotrainer.rollouts import as_text
from sandbox import HarnessError, HarnessWorker, attempts_log

SAFETY_CHECKS = ("harness_tree", "variable", "prompts", "prompt_leak", "tests_kept", "main_tests", "diagnostics_kept",
                 "curriculum_coverage", "deterministic_replay", "sandbox_attempts")
PROMPT_MIN_BUDGET = 2048  # characters a prompt may always have
PROMPT_BUDGET_FACTOR = 8  # ... or this many times main's longest prompt on the same tasks
MAX_PROMPT_TASKS = 2000
DETERMINISM_BATCHES = 12  # training batches replayed again, spread over the retained rollouts
_CHANCE_SHIFTS = 5


def safety_checks(repo: HarnessRepo, candidate: Candidate, base: Any, cand_dir: Path, cand_worker: HarnessWorker,
                  *, settings: BacktestConfig, sandbox: SandboxConfig, hide: list[str],
                  arbiter: Arbiter) -> list[Check]:
    """The checks above for ``candidate`` against main (``base``: an ``evotrainer.judge.checks.Baseline``).
    ``arbiter``: the evaluator's rulings on main's tests (``judge.arbitrate``): a test of main's it contradicts may
    be rewritten as its ruling says, or fail against the candidate's code, beyond the declared variable."""
    checks = [_safe("harness_tree", lambda: _tree(repo, candidate)),
              _safe("variable", lambda: _variable(repo, base.sha, candidate, arbiter))]
    tmp = Path(tempfile.mkdtemp(prefix="evo-safety-"))
    try:
        hybrid_dir = _with_tests_of(cand_dir, Path(base.dir), tmp / "hybrid")
        limits = sandbox.limits.model_copy(update={"call_timeout_s": settings.test_timeout_s})
        with HarnessWorker(hybrid_dir, limits=limits, backend=sandbox.backend, image=sandbox.image,
                           hide=hide) as hybrid:
            checks += _run(candidate, base, cand_dir, cand_worker, hybrid_dir, hybrid, arbiter)
        # every sandbox of the candidate: its self-tests', the backtest's worker, the one with main's tests
        checks.append(attempts_check(attempts_log(cand_dir) + cand_worker.attempts + hybrid.attempts))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return checks


def _safe(name: str, compute: Callable[[], Check | list[Check]]) -> list[Check] | Check:
    """``compute()``, or one failed check named ``name`` saying why it could not be computed."""
    try:
        return compute()
    except HarnessError as err:
        return Check(name=name, passed=False, detail=str(err)[:500])
    except Exception as err:  # noqa: BLE001 - a candidate must never crash the gate
        return Check(name=name, passed=False, detail=f"could not be computed: {type(err).__name__}: {err}"[:500])


def _run(candidate: Candidate, base: Any, cand_dir: Path, wc: HarnessWorker, hybrid_dir: Path,
         hybrid: HarnessWorker, arbiter: Arbiter) -> list[Check]:
    checks: list[Check] = []
    tasks = _tasks(base.rollouts, base.tasks)
    checks += _list(_safe("prompts", lambda: _prompts([as_text(p) for p in base.worker.prompts(tasks)],
                                                             [as_text(p) for p in wc.prompts(tasks)], tasks)))
    try:
        read_knobs(cand_dir)
    except KnobsError:
        knobs_ok = False  # the backtest's knobs_valid check says why; nothing can be replayed
    else:
        knobs_ok = True
    if knobs_ok:
        try:
            again = replay(wc, cand_dir, base.rollouts, base.tasks)
        except (HarnessError, ValueError, KeyError) as err:  # the backtest's own replay would fail the same way
            checks.append(Check(name="replay", passed=False, detail=str(err)[:500]))
        else:
            checks.append(_safe("diagnostics_kept", lambda: _diagnostics(base.replay["registry"], again["registry"],
                                                                          candidate.variable)))
            checks.append(_safe("curriculum_coverage", lambda: _coverage(base.replay["mix"], again["mix"])))
            checks.append(_safe("deterministic_replay", lambda: _deterministic(again["rows"], base, hybrid_dir,
                                                                                hybrid)))
    checks += _list(_safe("main_tests", lambda: _main_tests(candidate, base, cand_dir, hybrid, arbiter)))
    return checks


def _list(value: Check | list[Check]) -> list[Check]:
    return value if isinstance(value, list) else [value]


# --- the tree and the variable --------------------------------------------------------------------------------
def _tree(repo: HarnessRepo, candidate: Candidate) -> Check:
    problems = repo.tree_problems(candidate.sha)
    return Check(name="harness_tree", passed=not problems, detail="; ".join(problems)[:500])


def _variable(repo: HarnessRepo, main_sha: str, candidate: Candidate, arbiter: Arbiter) -> Check:
    names = variables.changed(repo, repo.merge_base(main_sha, candidate.sha) or main_sha, candidate.sha)
    names = {n for n in names if not ("::" in n and arbiter.excuses(n))}  # rewritten as the evaluator ruled
    declared = candidate.variable.strip()
    if not names:
        return Check(name="variable", passed=False, detail="the edit changes nothing")
    if not declared:
        inferred = variables.infer(names)
        return Check(name="variable", passed=bool(inferred), detail=f"none declared; the edit changes {inferred}"
                     if inferred else f"none declared, and the edit changes several: {', '.join(sorted(names))}"[:500])
    extra = variables.uncovered(declared, names)
    return Check(name="variable", passed=not extra, detail=(f"declares {declared} but also changes "
                                                              f"{', '.join(extra)}" if extra else "")[:500])


# --- prompts ----------------------------------------------------------------------------------------------------
def _tasks(rollouts: list[dict], tasks: dict[str, dict]) -> list[dict]:
    ids = list(dict.fromkeys(r["task_id"] for r in rollouts if r["task_id"] in tasks))
    step = max(1, len(ids) // MAX_PROMPT_TASKS)
    return [tasks[i] for i in ids[::step][:MAX_PROMPT_TASKS]]


def _mentions(text: str, answer: str) -> bool:
    return bool(answer) and re.search(rf"(?<![0-9A-Za-z]){re.escape(answer)}(?![0-9A-Za-z])", text) is not None


def _prompts(main: list[str], cand: list[str], tasks: list[dict]) -> list[Check]:
    budget = max(PROMPT_MIN_BUDGET, PROMPT_BUDGET_FACTOR * max((len(p) for p in main), default=0))
    empty = sum(not p.strip() for p in cand)
    long = sum(len(p) > budget for p in cand)
    bad = ([f"{empty} of {len(cand)} prompts are empty"] if empty else []) + \
          ([f"{long} of {len(cand)} prompts are over the budget of {budget} characters"] if long else [])
    checks = [Check(name="prompts", candidate=float(len(cand)), passed=not bad,
                    detail="; ".join(bad) or f"{len(cand)} prompts of the retained tasks are well-formed")]
    answers = [str(t.get("answer", "")).strip() for t in tasks]
    n = len(tasks)

    def new(i: int, answer: str) -> bool:
        return _mentions(cand[i], answer) and not _mentions(main[i], answer)

    leaks = [i for i in range(n) if new(i, answers[i])]
    shifts = range(1, min(_CHANCE_SHIFTS, n - 1) + 1)
    chance = sum(new(i, answers[(i + s) % n]) for s in shifts for i in range(n)
                 if answers[(i + s) % n] != answers[i]) / max(len(shifts), 1)
    leaked = len(leaks) >= max(2, 0.02 * n) and len(leaks) > 3 * chance + 1
    example = f" (task {tasks[leaks[0]].get('id')}: {cand[leaks[0]][:80]!r})" if leaks else ""
    checks.append(Check(name="prompt_leak", base=round(chance, 2), candidate=float(len(leaks)), passed=not leaked,
                        detail=(f"the task's answer appears in {len(leaks)} of {n} prompts where main's prompt lacks "
                                f"it (other tasks' answers: {chance:.1f} by chance){example}")[:500]))
    return checks


# --- tests ------------------------------------------------------------------------------------------------------
def _with_tests_of(code_dir: Path, tests_from: Path, dest: Path) -> Path:
    """A copy of ``code_dir`` whose tests/ are those of ``tests_from``."""
    shutil.copytree(code_dir, dest, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    if (tests_from / "tests").is_dir():
        shutil.copytree(tests_from / "tests", dest / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _main_tests(candidate: Candidate, base: Any, cand_dir: Path, hybrid: HarnessWorker,
                arbiter: Arbiter) -> list[Check]:
    declared = candidate.variable
    main_tests, cand_tests = harness_tests(Path(base.dir)), harness_tests(cand_dir)
    gone = [t for t in main_tests if t not in cand_tests and not variables.covers(declared, t)]
    changed = [t for t in main_tests if t in cand_tests and cand_tests[t] != main_tests[t]
               and not variables.covers(declared, t) and not arbiter.excuses(t)]
    ruled = [r.test for r in arbiter.excused()]
    kept = Check(name="tests_kept", base=float(len(main_tests)), candidate=float(len(main_tests) - len(gone)),
                 passed=not gone and not changed,
                 detail="; ".join(([f"deletes {', '.join(gone)}"] if gone else [])
                                  + ([f"changes {', '.join(changed)}"] if changed else []))[:500]
                 or f"all {len(main_tests)} of main's tests kept" + (f" ({', '.join(ruled)} rewritten as the "
                                                                     "evaluator's ruling says)" if ruled else ""))
    result = hybrid.selftest()
    failed = [f for f in result["failed"] if not variables.covers(declared, f["name"])
              and f["name"] not in base.failing and not arbiter.excuses(f["name"])]
    excused = [f["name"] for f in result["failed"] if f not in failed]
    run = Check(name="main_tests", base=float(result["n"]), candidate=float(len(result["passed"])),
                passed=not failed, detail="; ".join(f"{f['name']}: {f['error']}" for f in failed)[:500]
                or f"{len(result['passed'])} of main's tests pass against the candidate's code"
                + (f"; excused: {', '.join(excused)} (failing on main too, or contradicted by the evaluator)"
                   if excused else ""))
    return [kept, run]


# --- diagnostics, curriculum, determinism -----------------------------------------------------------------------
def _diagnostics(main: dict, cand: dict, declared: str) -> Check:
    problems = []
    for name, spec in sorted(main.items()):
        if variables.covers(declared, f"diagnostics.{name}"):
            continue
        mine = cand.get(name)
        if mine is None:
            problems.append(f"{name} is no longer registered")
            continue
        lo, hi = spec.get("min"), spec.get("max")
        if lo is not None and (mine.get("min") is None or mine["min"] < lo):
            problems.append(f"{name}: min loosened from {lo} to {mine.get('min')}")
        if hi is not None and (mine.get("max") is None or mine["max"] > hi):
            problems.append(f"{name}: max loosened from {hi} to {mine.get('max')}")
    return Check(name="diagnostics_kept", base=float(len(main)), candidate=float(len(cand)), passed=not problems,
                 detail="; ".join(problems)[:500] or f"all {len(main)} diagnostics of main kept")


def _coverage(main_mix: dict[str, float], cand_mix: dict[str, float]) -> Check:
    dropped = sorted(level for level, w in main_mix.items() if w > 0 and cand_mix.get(level, 0.0) <= 0)
    return Check(name="curriculum_coverage", base=float(sum(w > 0 for w in main_mix.values())),
                 candidate=float(sum(w > 0 for w in cand_mix.values())), passed=not dropped,
                 detail=f"stops sampling level(s) {', '.join(dropped)}" if dropped else "")


def _deterministic(rows: list[dict], base: Any, hybrid_dir: Path, hybrid: HarnessWorker) -> Check:
    batches: dict[tuple, list[dict]] = defaultdict(list)
    for r in base.rollouts:
        batches[(r["phase"], r["step"])].append(r)
    keys = list(batches)
    chosen = keys[:: max(1, len(keys) // DETERMINISM_BATCHES)][:DETERMINISM_BATCHES]
    first = {(r["phase"], r["group_id"], r["sample_idx"]): r for r in rows}
    differ, total, example = 0, 0, ""
    for key in chosen:
        for r in replay(hybrid, hybrid_dir, batches[key], base.tasks)["rows"]:
            a = first[(r["phase"], r["group_id"], r["sample_idx"])]
            total += 1
            if a["reward_components"] != r["reward_components"] or a["kept"] != r["kept"]:
                differ += 1
                example = example or (f" (e.g. {r['group_id']}/{r['sample_idx']}: {a['reward_components']} kept "
                                      f"{a['kept']} vs {r['reward_components']} kept {r['kept']})")
    return Check(name="deterministic_replay", base=float(total), candidate=float(total - differ), passed=not differ,
                 detail=(f"{differ} of {total} rollouts got other rewards or filter decisions when replayed again"
                         f" in training-sized batches{example}" if differ else
                         f"{total} rollouts replayed again in {len(chosen)} batches: identical")[:500])


# --- attempts ---------------------------------------------------------------------------------------------------
def attempts_check(attempts: list[dict], name: str = "sandbox_attempts") -> Check:
    """The check that fails on any attempt, naming the first few (kind, what, where, op)."""
    unique = list({(a["kind"], a["what"], a.get("where", "")): a for a in attempts}.values())
    named = [f"{a['kind']}: {a['what']}" + (f" at {a['where']}" if a.get("where") else "")
             + (f" [{a['op']}]" if a.get("op") else "") for a in unique]
    return Check(name=name, candidate=float(len(unique)), passed=not unique,
                 detail="; ".join(named[:5])[:500] + (f"; and {len(named) - 5} more" if len(named) > 5 else ""))
