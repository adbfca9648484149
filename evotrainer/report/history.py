"""Reading a run back: its status, and the harness history of promoted and rejected candidates.

Everything here is derived from what the run left on disk: ``status.json``, the phase results in
``checkpoints/phase-NNNN/result.json``, the starting policy's in ``baseline.json``, and the harness repo itself (candidate branches, their commit
trailers, the ``backtest`` and ``effect`` git notes, whether ``main`` contains them). So ``evotrainer log`` and
``evotrainer show`` tell the same story as ``git log`` inside ``RUN_DIR/harness``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path


from evotrainer.contracts import NOT_JUDGED, PhaseResult
from evotrainer.harness.repo import HarnessRepo, parse_trailers
from evotrainer.rundir import RunDir

UNJUDGED = "not judged"  # verdict and state of a candidate with a NOT_JUDGED note (a full race; another passed first)


def phase_results(rd: RunDir) -> list[PhaseResult]:
    out = []
    for path in sorted(rd.checkpoints.glob("phase-*/result.json")):
        out.append(PhaseResult.model_validate_json(path.read_text()))
    return out


def status(rd: RunDir) -> dict:
    cfg = rd.load_config()
    st = rd.status()
    results = phase_results(rd)
    repo = HarnessRepo(rd.harness)
    promoted = [b for b in repo.branches() if repo.is_merged(b)]
    baseline = rd.baseline()
    return {
        "run": str(rd.root),
        "name": cfg.name,
        "state": st.get("state", "initialized"),
        "detail": st.get("detail") or st.get("error"),
        "waiting_for": st.get("waiting_for") if st.get("state") == "paused" else None,
        "node": st.get("node"),
        "phase": len(results),
        "phases": cfg.phases,
        "baseline_accuracy": baseline.accuracy if baseline else None,
        "accuracy": {r.phase: r.eval.accuracy for r in results},
        "eval_n": results[-1].eval.n if results else 0,
        "main": repo.sha("main"),
        "candidates": len(repo.branches()),
        "promoted": len(promoted),
        "pid": st.get("pid"),
    }


def _phase_k(branch: str) -> tuple[int, int]:
    """(phase, k) of ``candidates/phase-N-k``; keep/discard's ``candidates/phase-N-kd`` sorts after the phase's."""
    m = re.search(r"phase-(\d+)-(\d+|kd)$", branch)
    return (int(m.group(1)), 10**6 if m.group(2) == "kd" else int(m.group(2))) if m else (0, 0)


def _candidates(rd: RunDir) -> list[tuple[dict, dict | None, dict | None]]:
    """Each candidate in phase order: its log entry, its backtest note and its effect note (None when absent)."""
    rd.load_config()  # RunDirError, one line, when it is no run directory
    repo = HarnessRepo(rd.harness)
    out = []
    for branch in sorted(repo.branches(), key=_phase_k):
        sha = repo.sha(branch)
        message = repo.message(sha)
        trailers = parse_trailers(message)
        report = repo.note(sha, "backtest")
        effect = repo.note(sha, "effect")
        merged = repo.is_merged(branch)
        skipped = None if report else repo.note(sha, NOT_JUDGED)
        verdict = report["verdict"] if report else UNJUDGED if skipped else "pending"
        state = "promoted" if merged else ("rejected" if verdict == "reject" else
                                           "passed, not promoted" if verdict == "promote" else verdict)
        out.append(({
            "phase": _phase_k(branch)[0], "branch": branch, "sha": sha, "state": state,
            "subject": message.splitlines()[0], "diagnosis": trailers.get("Diagnosis", ""),
            "hypothesis": trailers.get("Hypothesis", ""), "variable": trailers.get("Variable", ""),
            "expected": trailers.get("Expected", ""), "verdict": verdict,
            "reasons": report["reasons"] if report else [skipped["reason"]] if skipped else [],
            "realized_effect": effect.get("summary") if effect else None,
        }, report, effect))
    return out


def harness_log(rd: RunDir) -> list[dict]:
    """One entry per candidate: what it changed, why, how it was judged, and what it did afterwards (the keys of
    ``evotrainer log --json``, listed in docs/reference.md)."""
    return [entry for entry, _, _ in _candidates(rd)]


def log_rows(rd: RunDir) -> list[dict]:
    """``evotrainer log``'s view: per candidate its branch, variable, verdict, the one reason that decided and the
    realized effect, each short (``evotrainer show`` prints the whole record)."""
    return [{"branch": e["branch"], "variable": e["variable"], "verdict": e["verdict"],
             "decided": decided(e["state"], report, e["reasons"]), "effect": effect_brief(effect)}
            for e, report, effect in _candidates(rd)]


def decided(state: str, report: dict | None, reasons: list[str] | None = None) -> str:
    """The one reason that decided a candidate: for a rejection its first failed check (the report's first reason:
    reasons are the failed checks in order); for a pass, "promoted" (or "not promoted") and the A/B trial's gain in
    probe accuracy when one ran ("promoted, trial +3.1%"), else the report's summary; for a candidate left unjudged,
    why (its ``reasons``: the round's race was full, or with trials off another passed first)."""
    if not report:
        return f"{UNJUDGED}: {(reasons or ['?'])[0]}" if state == UNJUDGED else "not judged yet"
    reasons = report.get("reasons") or []
    if report.get("verdict") == "reject":
        return reasons[0] if reasons else "rejected"
    from evotrainer.judge.checks import TRIAL  # here: the judge's imports cost a second, and only a pass needs it

    head = "promoted" if state == "promoted" else "not promoted"
    trial = next((c for c in report.get("checks", []) if c.get("name") == TRIAL), None)
    gain = re.match(r"gain ([+-]?\d+(?:\.\d+)?)", (trial or {}).get("detail") or "")
    if gain:
        return f"{head}, trial {float(gain.group(1)):+.1%}"
    return f"{head}: {reasons[0]}" if reasons else head


def effect_brief(effect: dict | None) -> str:
    """A realized effect (the ``effect`` note) in a few words: the held-out accuracy gain with the edit over without
    it (the counterfactual, paired) and win, loss or within noise; without a counterfactual, the accuracy from the
    phase before to the phase after, and "win" when it was one."""
    if not effect:
        return "-"
    try:
        if effect.get("counterfactual"):
            won = "win" if effect["won"] else "loss" if effect["lost"] else "within noise"
            return f"{effect['gain']:+.1%}, {won}"
        return (f"{effect['accuracy_before']:.1%} -> {effect['accuracy_after']:.1%}"
                + (", win" if effect["won"] else ""))
    except (KeyError, TypeError, ValueError):  # a note of another shape: its summary
        return effect.get("summary") or "-"


def resolve(repo: HarnessRepo, ref: str) -> str:
    for candidate in (ref, f"candidates/{ref}", f"candidates/phase-{ref}"):
        try:  # an annotated tag (phase-N) is peeled to the commit it marks
            return repo.commit(candidate).sha
        except ValueError:
            continue
    raise ValueError(f"unknown ref {ref!r} (try a branch like candidates/phase-1-1, a tag like phase-2, or a sha)")


def show(rd: RunDir, ref: str) -> dict:
    """A commit's message, its diff, and the backtest report (of the candidate, for a promotion merge)."""
    rd.load_config()  # RunDirError, one line, when it is no run directory
    repo = HarnessRepo(rd.harness)
    sha = resolve(repo, ref)
    commit = repo.commit(sha)
    parents = commit.parents
    diff = repo.diff(parents[0] if parents else None, sha)
    note_sha = parents[1] if len(parents) > 1 else sha
    return {
        "sha": sha, "message": commit.message, "diff": diff,
        "backtest": repo.note(note_sha, "backtest"), "effect": repo.note(note_sha, "effect"),
    }


def dumps(obj) -> str:
    return json.dumps(obj, indent=1, default=str)


__all__ = ["status", "harness_log", "log_rows", "decided", "effect_brief", "show", "phase_results", "dumps", "Path"]
