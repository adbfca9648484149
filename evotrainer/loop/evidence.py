"""Evidence loaded once and shared by every step of a phase: rollouts, knobs, tasks, and main's replay.

Before this cache, a phase's rollouts were read from disk about six times, main's diagnostics ran in a fresh
sandbox twice, main was replayed once per candidate and the whole harness repo was exported to read one yaml
file. Now:

    rollouts(phase)          each phase's parquet file, read once (rows are shared: never mutate them)
    knobs(sha)               harness.yaml at a commit, read with ``git show``
    tasks()                  the training pool by id
    main(sha, phases)        main exported once, its sandbox worker, its replay on those phases' rollouts (at most
                             backtest.replay_batches generated batches of them, spread evenly)
    registry(sha, phases)    main's diagnostics on the phases' rollouts as they trained (what the Diagnostician reads)

It is a cache, not state: after a kill it is rebuilt from disk.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from evotrainer.config import Config
from evotrainer.harness.knobs import Knobs
from evotrainer.harness.repo import HarnessRepo
from evotrainer.judge.checks import Baseline, harness_worker
from evotrainer.judge.replay import registry
from evotrainer.rollouts import read_rollouts, spread_batches
from evotrainer.rundir import RunDir
from sandbox import HarnessWorker


class EvidenceCache:
    def __init__(self, rd: RunDir, repo: HarnessRepo, cfg: Config):
        self.rd, self.repo, self.cfg = rd, repo, cfg
        self._rollouts: dict[int, list[dict]] = {}
        self._knobs: dict[str, Knobs] = {}
        self._tasks: dict[str, dict] | None = None
        self._workers: dict[str, tuple[contextlib.ExitStack, Path, HarnessWorker]] = {}
        self._mains: dict[tuple[str, tuple[int, ...]], Baseline] = {}
        self._registries: dict[tuple[str, tuple[int, ...]], dict] = {}

    def rollouts(self, phase: int) -> list[dict]:
        if phase not in self._rollouts:
            self._rollouts[phase] = read_rollouts(self.rd.rollout_file(phase))
        return self._rollouts[phase]

    def rows(self, phases: list[int]) -> list[dict]:
        return [r for p in phases for r in self.rollouts(p)]

    def knobs(self, sha: str) -> Knobs:
        if sha not in self._knobs:
            self._knobs[sha] = self.repo.knobs(sha)
        return self._knobs[sha]

    def tasks(self) -> dict[str, dict]:
        if self._tasks is None:
            self._tasks = {t["id"]: t for t in self.rd.harness_tasks()}
        return self._tasks

    def main(self, sha: str, phases: list[int]) -> Baseline:
        """Main at ``sha`` with its sandbox worker (one per sha), replayed lazily on the rollouts of ``phases``."""
        if sha not in self._workers:
            stack = contextlib.ExitStack()
            path, worker = stack.enter_context(harness_worker(self.repo, sha, self.cfg.sandbox,
                                                              self.rd.hidden_from_harness()))
            self._workers[sha] = (stack, path, worker)
        key = (sha, tuple(phases))
        if key not in self._mains:
            _, path, worker = self._workers[sha]
            rows = spread_batches(self.rows(phases), self.cfg.backtest.replay_batches)
            self._mains[key] = Baseline(sha=sha, dir=path, worker=worker, rollouts=rows, tasks=self.tasks())
        return self._mains[key]

    def registry(self, sha: str, phases: list[int]) -> dict:
        """Main's diagnostics registry over the rollouts of ``phases`` as they were logged in training."""
        key = (sha, tuple(phases))
        if key not in self._registries:
            self._registries[key] = registry(self.main(sha, phases).worker, self.rows(phases), self.tasks())
        return self._registries[key]

    def forget_before(self, phase: int) -> None:
        """Drop rollouts of phases before ``phase`` and everything computed on them; stop main's old sandboxes."""
        self._rollouts = {p: rows for p, rows in self._rollouts.items() if p >= phase}
        self._mains = {k: v for k, v in self._mains.items() if min(k[1], default=phase) >= phase}
        self._registries = {k: v for k, v in self._registries.items() if min(k[1], default=phase) >= phase}
        self.close()

    def close(self) -> None:
        """Stop every sandbox worker (they restart on demand)."""
        for stack, _, _ in self._workers.values():
            stack.close()
        self._workers.clear()
        self._mains.clear()

