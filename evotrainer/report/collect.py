"""The run report (``RUN_DIR/report.html``): what it shows, gathered from what the run left on disk.

``evotrainer report RUN_DIR [--out FILE]`` writes it on demand, and ``evotrainer run`` rewrites it at the end of
every phase (``html.write_quietly``, which never stops a run: a failure becomes a ``report_error`` event). This
module only reads; ``html.py`` and ``charts.py`` render and write. The sources:

    held-out accuracy   checkpoints/phase-NNNN/result.json and baseline.json; the change of each phase against the
                        one before (or the start) has a paired bootstrap interval over held-out items when both
                        sides logged ``EvalResult.items``, else an unpaired normal interval (the chart says which);
                        beside it the tolerant score (``EvalResult.tolerant``: formatting slips forgiven), the same
                        way, where the evaluation measured it
    training, health    PhaseResult.train (what the trainer logged) and, per step, the rollouts' group figures;
                        a figure the trainer did not log is named with the reason (KL: beta = 0 in harness.yaml)
    harness lineage     the harness repo: main per phase, every candidate with its trailers, the ``backtest`` note
                        (checks, and whatever trial result it carries), its diff and its ``effect`` note
    skills              the skill store, read without writing; which candidates used each skill
    agents              events.jsonl: steps per role (``agent`` events) and LLM calls, tokens, cost when logged
    pentest             events.jsonl: the seed harness's reward pentest at init (``judge.pentest``), shown when a
                        null probe is paid
    samples             per phase the best, the worst and a truncated rollout
    outcomes            per phase the rollouts verified; for policy code the executor's statuses, the
                        visible-pass / hidden-fail count and grader errors; for multi-turn rollouts tool calls,
                        tool errors and turn-cap stops (``outcomes``)

    bench               when the run is one arm of ``evotrainer bench`` (``BENCH/<arm>-seed<N>``): every arm of
                        the same seed, held-out accuracy per phase, on one chart; the bench's table when written
Try it alone: ``python -c "from evotrainer.report.collect import collect; from evotrainer.rundir import RunDir; print(sorted(collect(RunDir('RUN_DIR'))))"``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import git

from evotrainer.contracts import EvalResult, PhaseResult
from evotrainer.harness.knobs import KnobsError
from evotrainer.harness.repo import HarnessRepo
from evotrainer.metrics import accuracy_change, paired_change, wilson
from evotrainer.report.history import harness_log, phase_results
from evotrainer.rollouts import group_stats, read_rollouts
from evotrainer.rundir import RunDir

RESAMPLES = 500  # bootstrap resamples of a paired accuracy change (metrics.paired_gain, pure Python: kept modest)
_rollout_cache: dict[tuple[str, float, int], dict] = {}  # published rollout files never change: read each once
_candidate_cache: dict[tuple[str, str], dict] = {}  # (harness repo, candidate sha) -> base, diff, backtest note


def clear_caches() -> None:
    """Forget what earlier reports read (rollout files, candidates, paired intervals): the next write reads anew."""
    _rollout_cache.clear()
    _candidate_cache.clear()
    paired_change.cache_clear()


def accuracy_rows(baseline: EvalResult | None, results: list[PhaseResult]) -> list[dict]:
    """Phase 0 (the start, when measured) and every phase: accuracy, Wilson interval, change vs the one before; the
    tolerant score and its change the same way (None where an evaluation did not measure it)."""
    rows: list[dict] = []
    evals = ([(0, baseline)] if baseline else []) + [(r.phase, r.eval) for r in results]
    for i, (phase, ev) in enumerate(evals):
        lo, hi = wilson(ev.accuracy * ev.n, ev.n)
        row = {"phase": phase, "accuracy": ev.accuracy, "low": lo, "high": hi, "n": ev.n, "change": None,
               "tolerant": ev.tolerant_accuracy, "tolerant_change": None}
        if i > 0:
            before = evals[i - 1][1]
            row["change"] = accuracy_change(before, ev, RESAMPLES)
            row["change"]["against"] = "start" if evals[i - 1][0] == 0 else f"phase {evals[i - 1][0]}"
            row["tolerant_change"] = _tolerant_change(before, ev)
        rows.append(row)
    return rows


def _tolerant_change(before: EvalResult, after: EvalResult) -> dict | None:
    """``accuracy_change`` of the two results' tolerant scores, or None when either did not measure one."""
    a, b = before.tolerant(), after.tolerant()
    return accuracy_change(a, b, RESAMPLES) if a and b else None


def _beta(repo: HarnessRepo, sha: str) -> float | None:
    """The KL coefficient of the harness a phase trained on, or None when its harness.yaml cannot be read."""
    try:
        return repo.knobs(sha).beta
    except (KnobsError, ValueError, git.GitCommandError):
        return None


def phase_rows(results: list[PhaseResult], repo: HarnessRepo) -> list[dict]:
    """Per phase: the harness version it trained on (and whether main changed since the phase before), its KL
    coefficient (``beta``), the train figures the trainer logged, steps, tokens and wall time."""
    rows, prev = [], None
    for r in results:
        rows.append({"phase": r.phase, "harness_sha": r.harness_sha, "main_changed": prev is not None and
                     r.harness_sha != prev, "beta": _beta(repo, r.harness_sha),
                     "train": dict(r.train), "steps": r.steps, "tokens": r.tokens, "wall_time_s": r.wall_time_s,
                     "skipped_batches": r.skipped_batches, "dev_accuracy": r.dev.accuracy, "dev_n": r.dev.n})
        prev = r.harness_sha
    return rows


# the health chart's panels, in order: figure -> title (the chart draws every one, even one that was not logged)
HEALTH = {"dead_group_ratio": "dead-group ratio", "kept_fraction": "kept fraction", "truncation_rate": "truncated",
          "completion_length": "completion length (tokens)", "entropy": "entropy", "kl": "KL", "grad_norm": "grad norm"}


def unlogged(phases: list[dict], steps: list[dict]) -> dict[str, str]:
    """Why a health figure is missing in some phase (figure -> "not logged...: reason"), so its panel says so
    instead of disappearing. TRL logs KL only when the KL term is on (``beta`` > 0 in harness.yaml): with
    beta = 0 there is no reference policy and nothing to measure."""
    notes = {}
    for key in HEALTH:
        missing = [p for p in phases if key not in p["train"]]
        if not missing or any(key in s for s in steps):
            continue
        where = "" if len(missing) == len(phases) else " in phase" + "s" * (len(missing) > 1) + " " + ", ".join(
            str(p["phase"]) for p in missing)
        if key == "kl" and all(p["beta"] == 0 for p in missing):
            notes[key] = f"not logged{where}: beta = 0 (no KL term, no reference policy)"
        else:
            notes[key] = f"not logged by the trainer{where}"
    return notes


def _sample(row: dict, kind: str) -> dict:
    keys = ("task_id", "difficulty", "prompt", "completion", "reward", "reward_components", "verified",
            "truncated", "kept", "advantage", "completion_tokens", "step", "group_id")
    return {"kind": kind, **{k: row.get(k) for k in keys}}


def rollout_summary(path: Path) -> dict:
    """One phase's rollouts reduced to per-step health figures and three samples (best, worst, truncated)."""
    stat = path.stat()
    key = (str(path), stat.st_mtime, stat.st_size)
    if key not in _rollout_cache:
        rows = read_rollouts(path)
        by_step: dict[int, list[dict]] = defaultdict(list)
        for r in rows:
            by_step[r["step"]].append(r)
        per_step = []
        for step, rs in sorted(by_step.items()):
            s = group_stats(rs)
            per_step.append({"step": step, "dead_group_ratio": s["dead_group_ratio"],
                             "kept_fraction": s["kept_fraction"], "truncation_rate": s["truncation_rate"],
                             "completion_length": s["completion_tokens_mean"]})
        ranked = sorted(rows, key=lambda r: (r["reward"], r["verified"], -r["completion_tokens"]))
        samples = [_sample(ranked[-1], "best"), _sample(ranked[0], "worst")] if ranked else []
        cut = next((r for r in rows if r["truncated"]), None)
        if cut is not None:
            samples.append(_sample(cut, "truncated"))
        _rollout_cache[key] = {"per_step": per_step, "samples": samples, "rollouts": len(rows),
                               "outcomes": outcomes(rows)}
    return _rollout_cache[key]


def outcomes(rows: list[dict]) -> dict:
    """One phase's rollouts by what happened to them: verified, and where the domain runs policy code the executor's
    statuses on the visible tests (``execution``), the visible-pass / hidden-fail count (every visible test passed,
    the hidden ones did not: what a reward on the visible tests pays and the evaluator rejects) and the grader errors
    (never scored as wrong answers); where rollouts are multi-turn, tool calls, tool errors and turn-cap stops."""
    from evotrainer.domains.execute import STATUSES

    out: dict = {"rollouts": len(rows), "verified": sum(bool(r.get("verified")) for r in rows)}
    runs = [(r.get("extra") or {}).get("execution") for r in rows]
    if any(runs):
        statuses = [e.get("status") for e in runs if e]
        out["statuses"] = {name: statuses.count(name) for name in STATUSES}
        out["visible_pass_hidden_fail"] = sum(bool(e) and e.get("status") == "ok" and not r.get("verified")
                                              for r, e in zip(rows, runs))
        out["grader_errors"] = sum(bool((r.get("extra") or {}).get("grader_error")) for r in rows)
    if any(r.get("turns", 1) > 1 or r.get("tool_calls") for r in rows):
        out["tool_calls"] = sum(r.get("tool_calls", 0) for r in rows)
        out["tool_errors"] = sum(r.get("tool_errors", 0) for r in rows)
        out["turn_cap_hits"] = sum(bool(r.get("hit_turn_cap")) for r in rows)
    return out


def _candidate(repo: HarnessRepo, sha: str) -> dict:
    """A candidate's base sha, diff and backtest note (empty before it is judged), read once per process once it
    has its note (none of the three changes after that)."""
    key = (str(repo.path), sha)
    if key not in _candidate_cache:
        note = repo.note(sha, "backtest")
        parents = repo.commit(sha).parents
        base = parents[0] if parents else None
        found = {"base_sha": base, "diff": repo.diff(base, sha) if base else "", "note": note or {}}
        if note is None:
            return found
        _candidate_cache[key] = found
    return _candidate_cache[key]


def lineage(repo: HarnessRepo, rd: RunDir) -> list[dict]:
    """Every candidate (``history.harness_log``) with its backtest note in full, its diff and its base sha."""
    out = []
    for entry in harness_log(rd):
        c = _candidate(repo, entry["sha"])
        note = c["note"]
        out.append({**entry, "base_sha": c["base_sha"], "diff": c["diff"], "checks": note.get("checks", []),
                    "runtime_s": note.get("runtime_s"), "sandbox": note.get("sandbox"),
                    "noise_floor": note.get("noise_floor"),
                    "trial": {k: v for k, v in note.items() if k not in _NOTE_SHOWN}})
    return out


_NOTE_SHOWN = {"branch", "candidate_sha", "base_sha", "target_metric", "checks", "noise_floor", "verdict", "reasons",
               "runtime_s", "rollouts", "sandbox"}


def skills(location, used_by: dict[str, list[str]]) -> list[dict]:
    """The skill store's records (a folder or a Chroma server), read without writing, or none."""
    from evotrainer.skills import stored_skills

    return [{**s.model_dump(mode="json"), "used_by": used_by.get(s.id, [])} for s in stored_skills(location)]


def agent_usage(rd: RunDir) -> tuple[list[dict], dict[str, list[str]]]:
    """Per role: actions logged (events with ``agent``), models, seconds in its steps, and LLM calls (``llm_call``),
    failed calls, fallbacks to the built-in role, tokens and cost when logged;
    and, per skill id, the candidates that used it (``candidate`` events)."""
    roles: dict[str, dict] = {}
    used_by: dict[str, list[str]] = defaultdict(list)

    def role(name: str) -> dict:
        return roles.setdefault(name, {"role": name, "actions": 0, "models": set(), "seconds": 0.0, "llm_calls": 0,
                                       "tokens": 0, "cost_usd": 0.0, "failed_calls": 0, "fallbacks": 0})

    for e in rd.events.read():
        if e.get("kind") == "candidate":
            for sid in e.get("skills_used") or []:
                used_by[sid].append(e.get("branch", "?"))
        if e.get("kind") == "llm_call" and e.get("role"):
            r = role(e["role"])
            if e.get("outcome") == "builtin":  # the model chain fell back to the built-in role: no LLM call
                r["fallbacks"] += 1
                continue
            r["llm_calls"] += 1
            r["failed_calls"] += e.get("outcome") not in (None, "ok")
            r["tokens"] += int(e.get("tokens") or 0) or int(e.get("prompt_tokens") or 0) + int(
                e.get("completion_tokens") or 0)
            r["cost_usd"] += float(e.get("cost_usd") or 0.0)
            r["models"].add(str(e.get("model", "?")))
        elif e.get("agent"):
            r = role(e["agent"])
            r["actions"] += 1  # a step's end (node_end) or a decision (a backtest verdict)
            r["models"].add(str(e.get("model", "?")))
            if e.get("kind") == "node_end":
                r["seconds"] += float(e.get("seconds") or 0.0)
            r["tokens"] += int(e.get("tokens") or 0)
            r["cost_usd"] += float(e.get("cost_usd") or 0.0)
    rows = [{**r, "models": sorted(r["models"])} for r in roles.values()]
    return sorted(rows, key=lambda r: r["role"]), dict(used_by)


def bench_arms(rd: RunDir) -> dict[str, Any] | None:
    """The bench this run belongs to: per arm (same seed), held-out accuracy at the start and after each phase,
    and the bench's summary (bench.json; in a fault bench, its defect's entry of faults.json) once it has been
    written. None for a run outside a bench."""
    import json

    from evotrainer.bench.arms import arms_beside, summary_beside

    arms = arms_beside(rd.root)
    if not arms:
        return None
    curves = {}
    for arm, root in arms.items():
        other = RunDir(root)
        base = other.baseline()
        curves[arm] = ([(0, base.accuracy)] if base else []) + [(r.phase, r.eval.accuracy) for r in phase_results(other)]
    summary_file = rd.root.parent / "bench.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else summary_beside(rd.root)
    this = next(a for a, root in arms.items() if root.resolve() == rd.root.resolve())
    return {"this": this, "curves": curves, "summary": summary}


def collect(rd: RunDir) -> dict[str, Any]:
    """Everything the report shows, as plain data."""
    cfg = rd.load_config()
    results = phase_results(rd)
    repo = HarnessRepo(rd.harness)
    samples, steps, seen = {}, [], {}
    for r in results:
        path = rd.rollout_file(r.phase)
        if path.is_file():
            summary = rollout_summary(path)
            samples[r.phase] = summary["samples"]
            seen[r.phase] = summary["outcomes"]
            steps += [{**s, "phase": r.phase, "x": r.phase - 1 + s["step"] / max(r.steps, 1)}
                      for s in summary["per_step"]]
    agents, used_by = agent_usage(rd)
    evals = ([rd.baseline()] if rd.baseline() else []) + [r.eval for r in results]
    phases = phase_rows(results, repo)
    return {
        "run": {"name": cfg.name, "root": str(rd.root), "domain": cfg.domain, "model": cfg.policy.model,
                "phases": cfg.phases, "done": len(results), "main": repo.sha("main"),
                "written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "eval_n": results[-1].eval.n if results else 0},
        "accuracy": accuracy_rows(rd.baseline(), results),
        "overall": accuracy_change(evals[0], evals[-1], RESAMPLES) if len(evals) > 1 else None,  # first to last
        "overall_tolerant": _tolerant_change(evals[0], evals[-1]) if len(evals) > 1 else None,
        "phases": phases,
        "unlogged": unlogged(phases, steps),  # health figures the trainer did not log, and why
        "steps": steps,
        "lineage": lineage(repo, rd),
        "skills": skills(rd.skills_path(cfg), used_by),
        "agents": agents,
        "samples": samples,
        "outcomes": seen,
        "bench": bench_arms(rd),
        "pentest": seed_pentest(rd),
    }


def seed_pentest(rd: RunDir) -> dict | None:
    """The reward pentest of the seed harness at init (its ``pentest`` event), or None for a run made before it."""
    return next((e for e in rd.events.read() if e.get("kind") == "pentest" and e.get("harness") == "seed"), None)
