"""Step 5: the Backtester judges this round's candidates; the checks are framework code (``evotrainer/backtest.py``).

:class:`Bench` is what the loop lends the Backtester agent: the replay checks against main (main replayed once per
phase, from the evidence cache) and, for edits only a training run can judge, pilots through the trainer
service (main piloted once per phase, candidates with the same seed and tasks). Each report is stored as the
candidate's ``backtest`` git note. Router ``route``: back to the Engineer (with the reasons) when nothing passed
and rounds are left, else to promote.
"""

from __future__ import annotations

from pathlib import Path

from agents import playbook
from evotrainer.backtest import judge
from evotrainer.contracts import BacktestReport, Candidate
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState
from evotrainer.metrics import difference_noise
from evotrainer.rollouts import group_stats, read_rollouts

PILOT_FIGURES = ("dead_group_ratio", "truncation_rate", "verified_rate", "kept_fraction", "reward_mean",
                 "completion_tokens_mean")


class Bench:
    """Replay checks on the retained rollouts, and pilots from the phase's checkpoint."""

    def __init__(self, rt: Runtime, phase: int, main_sha: str):
        self.rt, self.phase, self.main_sha = rt, phase, main_sha
        keep = rt.cfg.backtest.retained_phases
        self.retained = [p for p in range(max(1, phase - keep + 1), phase + 1) if rt.rd.rollout_file(p).exists()]
        self.pilots_enabled = rt.cfg.backtest.pilot_steps > 0
        self._main_pilot: list[dict] | None = None

    def _pilot_rows(self, sha: str) -> list[dict]:
        rt = self.rt
        req = rt.request(self.phase + 1, sha, rt.cfg.backtest.pilot_steps, init=str(rt.rd.checkpoint(self.phase)),
                         pilot=True)
        return read_rollouts(Path(rt.trainer.run_pilot(req, timeout_s=rt.cfg.trainer.phase_timeout_s).rollout_path))

    def pilot(self, candidate: Candidate) -> dict:
        if self._main_pilot is None:
            self._main_pilot = self._pilot_rows(self.main_sha)
        base_rows, cand_rows = self._main_pilot, self._pilot_rows(candidate.sha)
        # main's and the candidate's pilots are independent runs: the noise is that of their difference
        noise = difference_noise(base_rows, cand_rows, group_stats, self.rt.cfg.backtest.bootstrap)
        return {"base": group_stats(base_rows), "candidate": group_stats(cand_rows),
                "noise": {n: noise.get(n, 0.0) for n in PILOT_FIGURES}, "rollouts": len(cand_rows)}

    def checks(self, candidate: Candidate, pilot: dict | None) -> BacktestReport:
        rt = self.rt
        return judge(rt.repo, candidate, rt.evidence.main(self.main_sha, self.retained), settings=rt.cfg.backtest,
                     sandbox=rt.cfg.sandbox, hide=rt.rd.hidden_from_harness(), pilot=pilot)


def step(rt: Runtime, state: RunState) -> dict:
    bench = Bench(rt, state.phase, rt.repo.sha("main"))
    reports = list(state.reports)
    todo = state.round_candidates()
    with rt.reporter.progress(f"phase {state.phase}: backtesting", len(todo)) as bar:
        for i, cand in enumerate(todo):
            intervention = playbook.find(rt.cfg.domain, cand.intervention)
            report = rt.agents.backtester.judge(cand, bench, bool(intervention and intervention.needs_pilot))
            rt.repo.add_note(cand.sha, report.model_dump(mode="json"), ref="backtest")
            rt.emit("verdict", phase=state.phase, branch=cand.branch, verdict=report.verdict, reasons=report.reasons,
                    checks=[ch.model_dump(mode="json") for ch in report.checks], runtime_s=report.runtime_s,
                    sandbox=report.sandbox, agent="backtester", model=rt.cfg.agents.backtester.model)
            reports = [r for r in reports if r.branch != cand.branch] + [report]
            bar(step=i + 1, total=len(todo))
    return {"reports": reports}


def route(max_rounds: int, state: RunState) -> str:
    """Back to the Engineer when no candidate of this round passed and rounds are left; else promote."""
    passed = any(r.verdict == "promote" for r in state.reports if r.branch in state.round_branches)
    return "engineer" if not passed and state.engineer_round < max_rounds else "promote"
