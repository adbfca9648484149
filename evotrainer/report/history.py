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

import git

from evotrainer.contracts import PhaseResult
from evotrainer.harness.repo import HarnessRepo, parse_trailers
from evotrainer.rundir import RunDir


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


def harness_log(rd: RunDir) -> list[dict]:
    """One entry per candidate: what it changed, why, how it was judged, and what it did afterwards."""
    repo = HarnessRepo(rd.harness)
    entries = []
    for branch in sorted(repo.branches(), key=_phase_k):
        sha = repo.sha(branch)
        message = repo.message(sha)
        trailers = parse_trailers(message)
        report = repo.note(sha, "backtest")
        effect = repo.note(sha, "effect")
        merged = repo.is_merged(branch)
        verdict = report["verdict"] if report else "pending"
        state = "promoted" if merged else ("rejected" if verdict == "reject" else
                                           "passed, not promoted" if verdict == "promote" else "pending")
        entries.append({
            "phase": _phase_k(branch)[0], "branch": branch, "sha": sha, "state": state,
            "subject": message.splitlines()[0], "diagnosis": trailers.get("Diagnosis", ""),
            "hypothesis": trailers.get("Hypothesis", ""), "variable": trailers.get("Variable", ""),
            "expected": trailers.get("Expected", ""), "verdict": verdict,
            "reasons": report["reasons"] if report else [],
            "realized_effect": effect.get("summary") if effect else None,
        })
    return entries


def resolve(repo: HarnessRepo, ref: str) -> str:
    for candidate in (ref, f"candidates/{ref}", f"candidates/phase-{ref}"):
        try:  # ^{commit} peels an annotated tag (phase-N) to the commit it marks
            return repo.repo.rev_parse(f"{candidate}^{{commit}}").hexsha
        except (git.BadName, ValueError, git.BadObject, KeyError, IndexError):
            continue
    raise ValueError(f"unknown ref {ref!r} (try a branch like candidates/phase-1-1, a tag like phase-2, or a sha)")


def show(rd: RunDir, ref: str) -> dict:
    """A commit's message, its diff, and the backtest report (of the candidate, for a promotion merge)."""
    repo = HarnessRepo(rd.harness)
    sha = resolve(repo, ref)
    commit = repo.repo.commit(sha)
    if commit.type == "tag":  # pragma: no cover - rev_parse peels tags to commits already
        commit = commit.object
    parents = commit.parents
    diff = repo.diff(parents[0].hexsha, sha) if parents else repo.repo.git.show(sha, format="")
    note_sha = parents[1].hexsha if len(parents) > 1 else sha
    return {
        "sha": sha, "message": commit.message, "diff": diff,
        "backtest": repo.note(note_sha, "backtest"), "effect": repo.note(note_sha, "effect"),
    }


def dumps(obj) -> str:
    return json.dumps(obj, indent=1, default=str)


__all__ = ["status", "harness_log", "show", "phase_results", "dumps", "Path"]
