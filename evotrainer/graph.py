"""The co-evolution loop as a LangGraph state machine, checkpointed to SQLite after every node.

    train -> diagnose -> critique -> engineer -> backtest -> promote -> librarian -> (stop | train)
                 ^           |                       |
                 +-- more evidence (bounded)         +-- all rejected: back to engineer (bounded)

State holds only JSON (the pydantic contracts dumped), so a checkpoint is readable and a killed run resumes
at the node it was in (``invoke(None, config)``). Every node is safe to re-run: training is keyed by phase
and harness sha (a finished phase is never trained twice), candidate branches are recreated, notes are
overwritten, promotion is a no-op for an already-merged branch, skill outcomes are recorded once per commit.
The budget is the number of training phases, read from the run's config each time the graph decides (so a budget
raised with ``evotrainer run --phases N`` holds for a resumed run too, not only for a finished one).
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from agents import Agents, EngineerContext, PhaseEvidence
from agents.playbook import BY_NAME
from evotrainer.backtest import METRICS, pilot_check, run_backtest
from evotrainer.config import Config
from evotrainer.console import Reporter
from evotrainer.contracts import BacktestReport, Candidate, Diagnosis, EvalResult, PhaseResult
from evotrainer.domains import get_domain
from evotrainer.harness import HarnessRepo, read_knobs
from evotrainer.metrics import difference_noise, wilson
from evotrainer.rollouts import group_stats, harness_view, level_history, read_rollouts, trained
from evotrainer.rundir import RunDir
from evotrainer.sandbox import HarnessWorker, SandboxLimits
from evotrainer.trainer.client import TrainerClient

THREAD = {"configurable": {"thread_id": "run"}, "recursion_limit": 100_000}


class RunState(TypedDict, total=False):
    phase: int                  # last phase whose training finished
    results: list[dict]         # PhaseResult per phase
    diagnoses: list[dict]       # this phase's, after critique
    evidence_round: int
    engineer_round: int
    tried: list[str]            # interventions tried this phase
    candidates: list[dict]      # this round's Candidates
    reports: list[dict]         # this phase's BacktestReports (all rounds)
    promotions: list[dict]      # every promotion of the run
    phase_log: list[dict]       # per-phase summaries


@dataclass
class Runtime:
    """What the nodes use besides the state: the run directory, config, trainer, agents and the console."""

    rd: RunDir
    cfg: Config
    trainer: TrainerClient
    agents: Agents
    reporter: Reporter
    base_policy: str
    baseline: EvalResult | None = None  # held-out result of the starting policy ("phase 0")
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def repo(self) -> HarnessRepo:
        return HarnessRepo(self.rd.harness)

    @property
    def limits(self) -> SandboxLimits:
        s = self.cfg.sandbox
        return SandboxLimits(memory_mb=s.memory_mb, cpu_s=s.cpu_s, call_timeout_s=s.call_timeout_s)

    def emit(self, kind: str, **fields: Any) -> None:
        self.rd.events.emit(kind, **fields)

    def tasks(self) -> dict[str, dict]:
        if "tasks" not in self._cache:
            self._cache["tasks"] = {t["id"]: t for t in self.rd.train_tasks()}
        return self._cache["tasks"]

    def request(self, phase: int, sha: str, init: str, steps: int) -> dict:
        c = self.cfg
        return {
            "run_dir": str(self.rd.root), "phase": phase, "harness_sha": sha, "init_checkpoint": init,
            "steps": steps, "prompts_per_step": c.training.prompts_per_step, "seed": c.seed, "domain": c.domain,
            "device": c.policy.device, "dtype": c.policy.dtype, "lora": c.policy.lora,
            "lora_rank": c.policy.lora_rank, "eval_max_new_tokens": c.training.eval_max_new_tokens,
            "threads": c.training.threads, "sandbox_backend": c.sandbox.backend,
            "sandbox_memory_mb": c.sandbox.memory_mb, "sandbox_cpu_s": c.sandbox.cpu_s,
            "sandbox_call_timeout_s": c.sandbox.call_timeout_s,
        }

    def checkpoint_for(self, phase: int) -> str:
        """What phase ``phase`` starts from: the previous phase's checkpoint, or the base policy."""
        return str(self.rd.checkpoint(phase - 1)) if phase > 1 else self.base_policy


def _results(state: RunState) -> list[PhaseResult]:
    return [PhaseResult.model_validate(r) for r in state.get("results", [])]


def _evidence(rt: Runtime, state: RunState) -> PhaseEvidence:
    phase = state["phase"]
    rounds = state.get("evidence_round", 0)
    # a further evidence round pools earlier phases, but only those trained on the same harness as this one
    results = {r["phase"]: r["harness_sha"] for r in state.get("results", [])}
    in_view = [p for p in range(max(1, phase - rounds), phase + 1)
               if rt.rd.rollout_file(p).exists() and results.get(p) == results.get(phase)]
    rollouts = [r for p in in_view for r in read_rollouts(rt.rd.rollout_file(p))]
    main = rt.repo.sha("main")
    knobs = read_knobs_at(rt, main)
    registry = _registry(rt, main, rollouts)
    promos = [p for p in state.get("promotions", []) if p["phase"] == phase - 1]
    last = None
    if promos:
        last = {"branch": promos[-1]["branch"], "intervention": promos[-1]["candidate"]["intervention"]}
    return PhaseEvidence(phase=phase, results=_results(state), rollouts=rollouts, phases_in_view=in_view,
                         registry=registry, knobs=knobs, domain=get_domain(rt.cfg.domain), last_promotion=last,
                         baseline=rt.baseline)


def read_knobs_at(rt: Runtime, sha: str):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return read_knobs(rt.repo.export(sha, Path(tmp)))


def _registry(rt: Runtime, sha: str, rollouts: list[dict]) -> dict:
    """Main's diagnostics.py over the rollouts (in the sandbox; ``verified`` withheld)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        hdir = rt.repo.export(sha, Path(tmp) / "h")
        with HarnessWorker(hdir, limits=rt.limits, backend=rt.cfg.sandbox.backend, hide=rt.rd.hidden_from_harness()) as w:
            try:
                tasks = rt.tasks()
                return w.diagnostics([harness_view(r, tasks[r["task_id"]], decided=True) for r in rollouts])
            except Exception as err:  # a broken registry on main is itself worth reporting, not fatal
                rt.emit("registry_error", sha=sha, error=str(err))
                return {}


# --- nodes ------------------------------------------------------------------------------------------------------
def build_graph(rt: Runtime, checkpointer):
    def train(state: RunState) -> dict:
        phase = state.get("phase", 0) + 1
        repo = rt.repo
        repo.recover()
        sha = repo.sha("main")
        repo.tag(f"phase-{phase}", sha, f"harness that trained phase {phase}")
        rt.rd.set_status("running", phase=phase, node="train")
        rt.emit("node_start", node="train", phase=phase, harness_sha=sha)
        req = rt.request(phase, sha, rt.checkpoint_for(phase), rt.cfg.training.steps_per_phase)
        with rt.reporter.progress(f"phase {phase}: training at main@{sha[:8]}", rt.cfg.training.steps_per_phase) as bar:
            result = rt.trainer.run_phase(req, on_progress=bar, timeout_s=rt.cfg.trainer.phase_timeout_s)
        rt.emit("node_end", node="train", phase=phase, accuracy=result.eval.accuracy, wall_time_s=result.wall_time_s,
                train=result.train, rollouts=result.rollout_path)
        return {"phase": phase, "results": [*state.get("results", []), result.model_dump(mode="json")],
                "diagnoses": [], "evidence_round": 0, "engineer_round": 0, "tried": [], "candidates": [],
                "reports": []}

    def diagnose(state: RunState) -> dict:
        t0 = time.time()
        ev = _evidence(rt, state)
        diagnoses = rt.agents.diagnostician.diagnose(ev)
        rt.emit("node_end", node="diagnose", phase=state["phase"], phases_in_view=ev.phases_in_view,
                diagnoses=[d.model_dump(mode="json") for d in diagnoses], agent="diagnostician",
                model=rt.cfg.agents.diagnostician.model, seconds=round(time.time() - t0, 2))
        return {"diagnoses": [d.model_dump(mode="json") for d in diagnoses]}

    def critique(state: RunState) -> dict:
        ev = _evidence(rt, state)
        rounds_left = rt.cfg.evolution.max_evidence_rounds - state.get("evidence_round", 0)
        diagnoses = [Diagnosis.model_validate(d) for d in state.get("diagnoses", [])]
        result = rt.agents.critic.critique(diagnoses, ev, rounds_left)
        rt.emit("node_end", node="critique", phase=state["phase"], agent="critic", model=rt.cfg.agents.critic.model,
                needs_more_evidence=result.needs_more_evidence,
                verdicts={d.id: [d.status, d.critique] for d in result.diagnoses})
        update: dict[str, Any] = {"diagnoses": [d.model_dump(mode="json") for d in result.diagnoses]}
        if result.needs_more_evidence:
            update["evidence_round"] = state.get("evidence_round", 0) + 1
        return update

    def after_critique(state: RunState) -> str:
        if any(d["status"] == "proposed" for d in state.get("diagnoses", [])):
            return "diagnose"
        return "engineer" if any(d["status"] == "confirmed" for d in state["diagnoses"]) else "librarian"

    def engineer(state: RunState) -> dict:
        repo = rt.repo
        base = repo.sha("main")
        diagnoses = [Diagnosis.model_validate(d) for d in state.get("diagnoses", [])]
        skills = {d.id: rt.agents.librarian.retrieve(d, rt.cfg.domain) for d in diagnoses if d.status == "confirmed"}
        rejections: dict[str, list[str]] = {}
        for r in state.get("reports", []):
            rejections.setdefault(r["branch"], r["reasons"])
        rows = read_rollouts(rt.rd.rollout_file(state["phase"]))
        ctx = EngineerContext(
            phase=state["phase"], round=state.get("engineer_round", 0) + 1, repo=repo, base_sha=base,
            knobs=read_knobs_at(rt, base), domain=rt.cfg.domain, tried=list(state.get("tried", [])),
            rejections=rejections, pilot=rt.cfg.backtest.pilot_steps > 0, level_stats=level_history(rows),
        )
        t0 = time.time()
        candidates = rt.agents.engineer.propose(diagnoses, ctx, skills)
        for c in candidates:
            rt.emit("candidate", phase=state["phase"], **c.model_dump(mode="json"))
        rt.emit("node_end", node="engineer", phase=state["phase"], agent="engineer", model=rt.cfg.agents.engineer.model,
                round=ctx.round, candidates=[c.branch for c in candidates],
                skills_retrieved={k: [x.id for x in v] for k, v in skills.items()}, seconds=round(time.time() - t0, 2))
        return {"candidates": [c.model_dump(mode="json") for c in candidates],
                "tried": [*state.get("tried", []), *(c.intervention for c in candidates)],
                "engineer_round": state.get("engineer_round", 0) + 1}

    def after_engineer(state: RunState) -> str:
        return "backtest" if state.get("candidates") else "promote"

    def backtest(state: RunState) -> dict:
        phase = state["phase"]
        main = rt.repo.sha("main")
        keep = rt.cfg.backtest.retained_phases
        rollouts = [r for p in range(max(1, phase - keep + 1), phase + 1) if rt.rd.rollout_file(p).exists()
                    for r in read_rollouts(rt.rd.rollout_file(p))]
        bench = _Bench(rt, state, main, rollouts)
        reports = list(state.get("reports", []))
        with rt.reporter.progress(f"phase {phase}: backtesting", len(state["candidates"])) as bar:
            for i, c in enumerate(state["candidates"]):
                cand = Candidate.model_validate(c)
                intervention = BY_NAME.get(cand.intervention)
                report = rt.agents.backtester.judge(cand, bench, bool(intervention and intervention.needs_pilot))
                rt.repo.add_note(cand.sha, report.model_dump(mode="json"), ref="backtest")
                rt.emit("verdict", phase=phase, branch=cand.branch, verdict=report.verdict, reasons=report.reasons,
                        checks=[ch.model_dump(mode="json") for ch in report.checks], runtime_s=report.runtime_s,
                        sandbox=report.sandbox, agent="backtester", model=rt.cfg.agents.backtester.model)
                reports = [r for r in reports if r["branch"] != cand.branch] + [report.model_dump(mode="json")]
                bar(step=i + 1, total=len(state["candidates"]))
        return {"reports": reports}

    def after_backtest(state: RunState) -> str:
        this_round = {c["branch"] for c in state.get("candidates", [])}
        passed = any(r["verdict"] == "promote" for r in state["reports"] if r["branch"] in this_round)
        if not passed and state.get("engineer_round", 0) < rt.cfg.evolution.max_engineer_rounds:
            return "engineer"
        return "promote"

    def promote(state: RunState) -> dict:
        phase = state["phase"]
        repo = rt.repo
        candidates = {c["branch"]: c for c in _all_candidates(rt, state)}
        passing = [BacktestReport.model_validate(r) for r in state.get("reports", []) if r["verdict"] == "promote"]
        passing.sort(key=_margin, reverse=True)
        promotions = list(state.get("promotions", []))
        done_branches = {p["branch"] for p in promotions}
        touched: set[str] = set()
        made = 0
        for report in passing:
            if made >= rt.cfg.evolution.max_promotions_per_phase:
                rt.emit("not_promoted", phase=phase, branch=report.branch,
                        reason=f"max_promotions_per_phase={rt.cfg.evolution.max_promotions_per_phase} reached")
                continue
            cand = Candidate.model_validate(candidates[report.branch])
            if touched & set(cand.files):
                rt.emit("not_promoted", phase=phase, branch=report.branch, reason="touches a file already changed")
                continue
            diag = next((d for d in state.get("diagnoses", []) if d["id"] == cand.diagnosis_id), {})
            if report.branch not in done_branches:
                main_sha = repo.promote(
                    cand.branch, subject=f"Promote {cand.branch}: {cand.variable}",
                    body=cand.hypothesis,
                    trailers={
                        "Diagnosis": f"{cand.diagnosis_id} ({diag.get('layer')}/{diag.get('failure_mode')}) "
                                     f"{diag.get('statement', '')}",
                        "Hypothesis": cand.hypothesis, "Variable": cand.variable, "Expected": cand.expected,
                        "Rollback": cand.rollback, "Backtest": f"{report.verdict}: {'; '.join(report.reasons)}",
                        "Candidate": cand.sha,
                    },
                )
                promotions.append({
                    "phase": phase, "branch": cand.branch, "sha": cand.sha, "main_sha": main_sha,
                    "candidate": cand.model_dump(mode="json"), "failure_mode": diag.get("failure_mode", "unknown"),
                    "statement": diag.get("statement", ""), "backtest": report.reasons,
                })
                rt.emit("promoted", phase=phase, branch=cand.branch, main_sha=main_sha, variable=cand.variable)
            touched |= set(cand.files)
            made += 1
        return {"promotions": promotions}

    def librarian(state: RunState) -> dict:
        phase = state["phase"]
        lib = rt.agents.librarian
        t0 = time.time()
        diags = {d["id"]: Diagnosis.model_validate(d) for d in state.get("diagnoses", [])}
        cands = {c["branch"]: Candidate.model_validate(c) for c in _all_candidates(rt, state)}
        for r in state.get("reports", []):
            report = BacktestReport.model_validate(r)
            cand = cands.get(report.branch)
            if cand is not None:
                lib.record_outcome(cand, report, diags.get(cand.diagnosis_id), rt.cfg.domain)
        effects = []
        results = _results(state)
        for promo in [p for p in state.get("promotions", []) if p["phase"] == phase - 1]:
            effect = realized_effect(rt, promo, results)
            rt.repo.add_note(promo["sha"], effect, ref="effect")
            lib.record_effect(promo, effect, rt.cfg.domain)
            rt.emit("realized_effect", phase=phase, branch=promo["branch"], **effect)
            effects.append({"branch": promo["branch"], **effect})
        rt.emit("node_end", node="librarian", phase=phase, agent="librarian", model=rt.cfg.agents.librarian.model,
                outcomes=len(state.get("reports", [])), effects=[e["branch"] for e in effects],
                seconds=round(time.time() - t0, 2))
        held = {e["branch"]: e["reason"] for e in rt.rd.events.read("not_promoted") if e.get("phase") == phase}
        summary = _summary(state, effects, list(cands.values()), held, rt.baseline)
        rt.reporter.phase_summary(summary)
        rt.emit("phase_summary", **summary)
        rt.rd.set_status("running", phase=phase, node="librarian",
                         accuracy=[r.eval.accuracy for r in results])
        log = [s for s in state.get("phase_log", []) if s["phase"] != phase] + [summary]
        return {"phase_log": log}

    def after_librarian(state: RunState) -> str:
        return END if state["phase"] >= rt.cfg.phases else "train"

    g = StateGraph(RunState)
    for name, fn in (("train", train), ("diagnose", diagnose), ("critique", critique), ("engineer", engineer),
                     ("backtest", backtest), ("promote", promote), ("librarian", librarian)):
        g.add_node(name, _logged(rt, name, fn))
    g.add_edge(START, "train")
    g.add_edge("train", "diagnose")
    g.add_edge("diagnose", "critique")
    g.add_conditional_edges("critique", after_critique, ["diagnose", "engineer", "librarian"])
    g.add_conditional_edges("engineer", after_engineer, ["backtest", "promote"])
    g.add_conditional_edges("backtest", after_backtest, ["engineer", "promote"])
    g.add_edge("promote", "librarian")
    g.add_conditional_edges("librarian", after_librarian, ["train", END])
    return g.compile(checkpointer=checkpointer)


def _logged(rt: Runtime, name: str, fn):
    def node(state: RunState) -> dict:
        t0 = time.time()
        rt.rd.set_status("running", phase=state.get("phase", 0), node=name)
        out = fn(state)
        rt.emit("node", node=name, phase=out.get("phase", state.get("phase", 0)), seconds=round(time.time() - t0, 2))
        return out

    return node


def _all_candidates(rt: Runtime, state: RunState) -> list[dict]:
    """Every candidate of this phase (all rounds), from the event log (state keeps only the last round)."""
    seen = {c["branch"]: c for c in rt.rd.events.read("candidate") if c.get("phase") == state["phase"]}
    for c in state.get("candidates", []):
        seen[c["branch"]] = {**c, "phase": state["phase"]}
    fields = set(Candidate.model_fields)
    return [{k: v for k, v in c.items() if k in fields} for c in seen.values()]


def _margin(report: BacktestReport) -> float:
    target = next((c for c in report.checks if c.name.startswith(("target:", "pilot:"))), None)
    if target is None or target.base is None or target.candidate is None:
        return 0.0
    return abs(target.candidate - target.base) / (report.noise_floor or 1e-3)


class _Bench:
    """The Backtester's bench: replay checks on retained rollouts, pilots through the trainer service."""

    def __init__(self, rt: Runtime, state: RunState, main_sha: str, rollouts: list[dict]):
        self.rt, self.state, self.main_sha, self.rollouts = rt, state, main_sha, rollouts
        self.pilots_enabled = rt.cfg.backtest.pilot_steps > 0
        self._main_pilot: dict | None = None

    def _pilot_rows(self, sha: str) -> list[dict]:
        phase = self.state["phase"] + 1
        req = self.rt.request(phase, sha, str(self.rt.rd.checkpoint(self.state["phase"])),
                              self.rt.cfg.backtest.pilot_steps)
        res = self.rt.trainer.run_pilot(req, timeout_s=self.rt.cfg.trainer.phase_timeout_s)
        return read_rollouts(Path(res.rollout_path))

    def pilot(self, candidate: Candidate) -> dict:
        if self._main_pilot is None:
            self._main_pilot = {"rows": self._pilot_rows(self.main_sha)}
        base_rows = self._main_pilot["rows"]
        cand_rows = self._pilot_rows(candidate.sha)
        names = ["dead_group_ratio", "truncation_rate", "verified_rate", "kept_fraction", "reward_mean",
                 "completion_tokens_mean"]
        # main's and the candidate's pilots are independent runs: the noise is that of their difference
        noise = difference_noise(base_rows, cand_rows, group_stats, self.rt.cfg.backtest.bootstrap)
        noise = {n: noise.get(n, 0.0) for n in names}
        return {"base": group_stats(base_rows), "candidate": group_stats(cand_rows), "noise": noise,
                "rollouts": len(cand_rows)}

    def checks(self, candidate: Candidate, pilot: dict | None) -> BacktestReport:
        b = self.rt.cfg.backtest
        return run_backtest(
            self.rt.repo, candidate, self.rollouts, self.rt.tasks(), main_sha=self.main_sha, limits=self.rt.limits,
            backend=self.rt.cfg.sandbox.backend, hide=self.rt.rd.hidden_from_harness(), time_budget_s=b.time_budget_s,
            bootstrap=b.bootstrap, tolerance=b.alignment_tolerance, pilot=pilot, test_timeout_s=b.test_timeout_s,
        )


def realized_effect(rt: Runtime, promo: dict, results: list[PhaseResult]) -> dict:
    """How the promoted edit did in the phase it first trained: targeted metric and held-out accuracy."""
    before_phase, after_phase = promo["phase"], promo["phase"] + 1
    before = next(r for r in results if r.phase == before_phase)
    after = next(r for r in results if r.phase == after_phase)
    cand = Candidate.model_validate(promo["candidate"])
    metric = cand.target_metric

    def measured(phase: int) -> float | None:
        rows = read_rollouts(rt.rd.rollout_file(phase))
        for r in rows:
            r["trained"] = trained(r)
        if metric in METRICS:
            return METRICS[metric](rows)
        stats = group_stats(rows)
        return stats.get(metric)

    m0, m1 = measured(before_phase), measured(after_phase)
    a0, a1 = before.eval.accuracy, after.eval.accuracy
    se = math.sqrt(a0 * (1 - a0) / max(before.eval.n, 1) + a1 * (1 - a1) / max(after.eval.n, 1))
    moved = None if m0 is None or m1 is None else (m1 - m0 if cand.direction == "up" else m0 - m1)
    acc_ok = a1 - a0 > -1.96 * se
    won = bool(moved is not None and moved > 0 and acc_ok)
    lo, hi = wilson(a1 * after.eval.n, after.eval.n)
    summary = (f"{metric} {m0:.3f} -> {m1:.3f} ({'as promised' if moved and moved > 0 else 'not as promised'}); "
               f"accuracy {a0:.1%} -> {a1:.1%} (95% CI {lo:.1%}-{hi:.1%}); "
               f"{'win' if won else 'no win'}{_accuracy_note(won, a1 - a0, 1.96 * se)}"
               ) if m0 is not None and m1 is not None else "metric not measurable"
    return {"metric": metric, "before": m0, "after": m1, "accuracy_before": a0, "accuracy_after": a1,
            "accuracy_margin": 1.96 * se, "won": won, "summary": summary, "measured_in_phase": after_phase}


def _accuracy_note(won: bool, change: float, margin: float) -> str:
    """What a win says about accuracy: a metric that moved as promised is not an accuracy gain unless beyond noise."""
    if not won:
        return ""
    if change > margin:
        return " (accuracy up beyond noise)"
    return " on the targeted metric; the accuracy change is within noise"


def _summary(state: RunState, effects: list[dict], candidates: list[Candidate], held: dict[str, str],
             baseline: EvalResult | None) -> dict:
    results = _results(state)
    cur = results[-1]
    prev = results[-2].eval.accuracy if len(results) > 1 else (baseline.accuracy if baseline else None)
    promoted = [{"branch": p["branch"], "main_sha": p["main_sha"], "hypothesis": p["candidate"]["hypothesis"]}
                for p in state.get("promotions", []) if p["phase"] == state["phase"]]
    by_branch = {c.branch: c for c in candidates}
    cands = []
    for r in state.get("reports", []):
        c = by_branch.get(r["branch"])
        verdict = r["verdict"] if r["branch"] not in held else f"passed, not promoted ({held[r['branch']]})"
        cands.append({"branch": r["branch"], "verdict": verdict, "reasons": r["reasons"],
                      "variable": c.variable if c else "", "intervention": c.intervention if c else ""})
    return {
        "phase": state["phase"], "accuracy": cur.eval.accuracy, "previous_accuracy": prev, "eval_n": cur.eval.n,
        "previous_label": "previous" if len(results) > 1 else "start",
        "by_difficulty": cur.eval.by_difficulty, "harness_sha": cur.harness_sha, "train_s": cur.wall_time_s,
        "reward_mean": cur.train.get("reward_mean", 0.0), "dead_group_ratio": cur.train.get("dead_group_ratio", 0.0),
        "kept_fraction": cur.train.get("kept_fraction", 0.0), "truncation_rate": cur.train.get("truncation_rate", 0.0),
        "diagnoses": [{k: d[k] for k in ("id", "layer", "failure_mode", "statement", "status", "critique")}
                      for d in state.get("diagnoses", [])],
        "candidates": cands, "promoted": promoted, "effects": effects,
    }


@contextlib.contextmanager
def open_checkpointer(path: Path):
    """The run's SQLite checkpointer; every node's output is committed before the next node starts."""
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def snapshot_json(graph) -> dict:
    snap = graph.get_state(THREAD)
    return {"next": list(snap.next), "values": json.loads(json.dumps(snap.values, default=str))}
