"""``evotrainer backtest RUN_DIR REF``: judge any branch or commit of a run's harness against its main.

The same backtest the loop runs (``evotrainer.judge.checks.run_backtest``: replay and safety checks, in the sandbox)
on the run's retained rollouts (the last ``backtest.retained_phases`` phases that trained, at most
``backtest.replay_batches`` generated batches of them), for a commit the Engineer made or one a person wrote by
hand. The candidate is read from the commit's trailers (Variable, Target,
Hypothesis, Expected, Rollback, Diagnosis; ``evotrainer.harness.repo.parse_trailers``); a hand-written commit
without them gets defaults: no declared variable (the ``variable`` check then infers the one the diff changes
and rejects a diff that changes several), the subject as hypothesis, and a target metric from its ``Target``
trailer (the Engineer writes one, ``evotrainer.harness.repo.target_trailer``), else from an ``Expected`` trailer
that opens with ``<metric> up|down`` (a person's, or the Engineer's before it wrote ``Target``), else
``reward_verified_auc`` up; the outcome's reason says when the target was not the commit's ``Target``. Nothing
here asks the agents: the commit alone says what it targets.

Exit status: 0 the commit passes (would promote; with trials on, the A/B trial of a real run still decides),
1 it is rejected (the reasons say why), 2 it could not be judged (the reason: no such ref, no retained rollouts,
nothing to judge, a harness folder that is not a git repository, a git command that failed, ...): every failure
before or during the backtest is exit 2 with one line (``evotrainer.judge.checks.one_line``), never a traceback, so a 1 always means
"rejected". Nothing of the run is changed: no note, no branch, no state. Try it alone:
``evotrainer backtest /tmp/after/demo candidates/phase-1-1 --json``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import git

from evotrainer.contracts import Candidate
from evotrainer.harness.repo import TARGET, HarnessRepo, parse_trailers, read_target
from evotrainer.judge.checks import one_line
from evotrainer.rundir import RunDir

DEFAULT_TARGET = ("reward_verified_auc", "up")


class CannotJudge(Exception):
    """The backtest could not run (exit status 2); the message says why."""


@dataclass
class Outcome:
    code: int  # 0 passes, 1 rejected, 2 could not run
    reason: str = ""
    candidate: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        verdict = {0: "promote", 1: "reject"}.get(self.code, "error")
        return {"exit": self.code, "verdict": verdict, "reason": self.reason, "candidate": self.candidate,
                "report": self.report}


def target(trailers: dict[str, str]) -> tuple[str, str, str]:
    """(metric, direction, how) of a commit's target: its ``Target`` trailer (``how`` empty), else an ``Expected``
    trailer opening with ``<metric> up|down``, else ``DEFAULT_TARGET``; ``how`` says which of the last two it was."""
    declared = read_target(trailers)
    if declared:
        return *declared, ""
    match = re.match(r"\s*([A-Za-z_][\w:]*)\s+(up|down)\b", trailers.get("Expected", ""))
    if match:
        return match.group(1), match.group(2), f"no {TARGET} trailer: the target is read from its Expected trailer"
    return *DEFAULT_TARGET, f"no {TARGET} trailer and no Expected '<metric> up|down': the target is the default"


def trailers_of(repo: HarnessRepo, ref: str) -> dict[str, str]:
    """The trailers of the commit ``ref`` names (none for a message without a body)."""
    message = repo.commit(ref).message
    return parse_trailers(message) if "\n\n" in message.strip() else {}


def candidate_for(repo: HarnessRepo, ref: str) -> Candidate:
    """The Candidate a commit stands for, from its trailers, with defaults for a hand-written one."""
    commit = repo.commit(ref)
    trailers = trailers_of(repo, ref)
    main = repo.sha("main")
    variable = trailers.get("Variable", "").strip()
    metric, direction, _ = target(trailers)
    branch = ref if repo.is_branch(ref) else f"ref/{commit.sha[:12]}"
    intervention = re.search(r"Intervention (\S+) from", commit.message)
    base = repo.merge_base(main, commit.sha) or main
    return Candidate(
        branch=branch, base_sha=base, sha=commit.sha,
        diagnosis_id=(trailers.get("Diagnosis", "").split() or ["manual"])[0],
        intervention=intervention.group(1) if intervention else "manual",
        hypothesis=trailers.get("Hypothesis") or commit.summary or "(none given)", variable=variable,
        target_metric=metric, direction=direction, expected=trailers.get("Expected") or f"{metric} {direction}",
        rollback=trailers.get("Rollback") or f"revert {commit.sha[:12]}",
        files=sorted(repo.changed_files(base, commit.sha)),
    )


def _retained(rd: RunDir, keep: int) -> list[int]:
    phases = sorted(int(p.stem.split("-")[1]) for p in rd.rollouts.glob("phase-*.parquet"))
    return phases[-keep:]


def _resolve(repo: HarnessRepo, ref: str, where) -> str:
    """The commit ``ref`` names (a tag or ``REF^{tree}`` that is no commit counts as none)."""
    try:
        return repo.commit(ref).sha
    except ValueError:
        raise CannotJudge(f"{ref!r} is not a branch, tag or commit of {where}") from None


def backtest_ref(run_dir, ref: str) -> Outcome:
    """Judge ``ref`` against main on ``run_dir``'s retained rollouts; never raises for a bad ref or run."""
    from evotrainer.config import ConfigError
    from evotrainer.judge.checks import run_backtest
    from evotrainer.rollouts import read_rollouts, spread_batches
    from evotrainer.rundir import RunDirError

    try:
        rd = RunDir(run_dir)
        cfg = rd.load_config()
        try:
            repo = HarnessRepo(rd.harness)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise CannotJudge(f"{rd.harness} is not a git repository (the run's harness repo is missing or "
                              f"broken)") from None
        sha = _resolve(repo, ref, rd.harness)
        main = _resolve(repo, "main", rd.harness)
        if repo.commit(sha).tree == repo.commit(main).tree:
            raise CannotJudge(f"{ref} has the same files as main: nothing to judge")
        phases = _retained(rd, cfg.backtest.retained_phases)
        if not phases:
            raise CannotJudge(f"{rd.root} has no retained rollouts yet (no phase has trained)")
        rows = spread_batches([r for p in phases for r in read_rollouts(rd.rollout_file(p))],
                              cfg.backtest.replay_batches)
        tasks = {t["id"]: t for t in rd.harness_tasks()}
        candidate = candidate_for(repo, ref)
        how = target(trailers_of(repo, ref))[2]
    except CannotJudge as err:
        return Outcome(2, str(err))
    except (ConfigError, RunDirError) as err:
        return Outcome(2, " ".join(str(err).split()))
    except Exception as err:  # noqa: BLE001 - git, parquet, a broken tasks file...: exit 2, one line, never 1
        return Outcome(2, one_line(err))
    try:
        report = run_backtest(repo, candidate, rows, tasks, main_sha=main, settings=cfg.backtest,
                              sandbox=cfg.sandbox, hide=rd.hidden_from_harness(), domain=cfg.domain,
                              executor=cfg.executor)
        code = 0 if report.verdict == "promote" else 1
        note = f"judged on {len(rows)} rollouts of phase(s) {', '.join(map(str, phases))}"
        if how:
            note += f"; {how} ({candidate.target_metric} {candidate.direction})"
        if code == 0 and cfg.backtest.trial_steps > 0:
            note += "; in a run, the A/B trial would still decide"
        return Outcome(code, note, candidate.model_dump(mode="json"), report.model_dump(mode="json"))
    except Exception as err:  # noqa: BLE001 - say why it could not run, never a traceback (exit 1 = rejected only)
        return Outcome(2, f"the backtest could not run: {one_line(err)}", candidate.model_dump(mode="json"))
