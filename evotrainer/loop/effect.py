"""Step 7: the realized effect of last phase's promotion, measured once the phase that first trained it is done.

A promotion made after phase N-1 is judged on phase N, the first phase trained on it, against a counterfactual: the
old main trained from the same checkpoint with the same seeds and tasks (and, at further seeds, both harnesses
again), scored on the dev split and compared per task and seed (:func:`realized_effect`, stored as the
candidate's ``effect`` git note). An edit whose effect is a loss beyond that paired margin is rolled back by a new
commit on main (:func:`rollback`); then, in a stalled run, the escalation's rollback to the last known-good harness
(``escalation.rollback``). After the run's last phase (unless ``evolution.final_round``) nothing trains on what a
rollback restores, so no counterfactual is trained there: the effect is the unpaired change. The Librarian (the next
step) turns the measured effect into skill evidence. The
baselines (static, keep/discard) get none of this: the step passes through.
"""

from __future__ import annotations

import time

from evotrainer import behaviour
from evotrainer.contracts import EvalResult, PhaseResult, Promotion
from evotrainer.domains import get_domain
from evotrainer.judge.scoring import trained
from evotrainer.judge.targets import measure
from evotrainer.loop import escalation
from evotrainer.loop.evidence import EvidenceCache
from evotrainer.loop.promote import undo
from evotrainer.loop.runtime import Runtime, none_follows
from evotrainer.loop.state import RunState
from evotrainer.metrics import paired_gain, unpaired_margin, wilson
from evotrainer.trainer.client import TrainerError


def counterfactual(rt: Runtime, promo: Promotion, after: PhaseResult, starts: dict[str, int] | None = None
                   ) -> list[tuple[EvalResult, EvalResult]] | None:
    """(without the edit, with it) dev results, one pair per seed; None when turned off or when a run fails.

    Seed 0: the harness ``after`` trained without the edit (the merge's first parent; or, when main changed after
    the merge, e.g. an earlier edit rolled back, that harness with the merge reverted: :meth:`HarnessRepo.taken_out`)
    trained exactly like ``after``, the phase that first trained the edit (same checkpoint, seeds and tasks),
    against that phase. Each further seed
    (``evolution.counterfactual_seeds``) trains both harnesses again from that checkpoint with other seeds: two
    runs of one harness from one checkpoint end a few dev points apart, and only pairs at several seeds carry
    that noise into the interval (:func:`evotrainer.metrics.paired_gain` resamples seeds, then tasks)."""
    if not rt.cfg.evolution.counterfactual:
        return None
    phase, steps = after.phase, rt.cfg.training.steps_per_phase
    without = rt.repo.taken_out(promo.main_sha, after.harness_sha)
    if without is None:
        rt.emit("counterfactual_error", phase=phase, branch=promo.branch, error=f"git cannot revert {promo.branch}'s "
                f"merge on the harness phase {phase} trained ({after.harness_sha[:8]}): no counterfactual")
        return None
    seeds = rt.cfg.evolution.counterfactual_seeds
    runs = [(without, 0)] + [(sha, r) for r in range(1, seeds) for sha in (without, after.harness_sha)]
    init = rt.checkpoint_for(phase, starts)  # where ``after`` started (``RunState.starts``)
    req = rt.request(phase, without, steps, init=init, pilot=True).model_copy(update={"counterfactual": True})
    scored, spent = {}, 0
    try:
        for i, (sha, replicate) in enumerate(runs):
            which = "without" if sha == without else "with"
            with rt.reporter.progress(f"phase {phase}: counterfactual {i + 1}/{len(runs)} ({which} {promo.branch}, "
                                      f"seed {replicate})", steps) as bar:
                pilot = rt.trainer.run_pilot(req.model_copy(update={"harness_sha": sha, "replicate": replicate}),
                                             on_progress=bar, timeout_s=rt.cfg.trainer.phase_timeout_s)
            scored[sha, replicate], spent = pilot.probe, spent + pilot.completions
    except TrainerError as err:
        rt.emit("counterfactual_error", phase=phase, branch=promo.branch, error=str(err))
        return None
    finally:
        if runs:  # what the counterfactual cost, charged to the run (the bench counts it per arm)
            rt.emit("counterfactual", phase=phase, branch=promo.branch, runs=len(scored), completions=spent)
    return [(scored[without, 0], after.dev)] + [(scored[without, r], scored[after.harness_sha, r])
                                                  for r in range(1, seeds)]


def realized_effect(evidence: EvidenceCache, promo: Promotion, results: list[PhaseResult],
                    pairs: list[tuple[EvalResult, EvalResult]] | None = None) -> dict:
    """How the promoted edit did in the phase it first trained: the targeted metric, and dev accuracy.

    With ``pairs`` (the counterfactual: (without, with) the edit, trained from the same checkpoint, one pair per
    seed; see :func:`counterfactual`) the accuracy effect is the paired difference on the same dev tasks,
    its interval resampling seeds and then tasks; the edit ``won`` when the interval is above zero and ``lost``
    when below. Without them, the two consecutive phases are compared, unpaired, and nothing is called lost.
    """
    before_phase, after_phase = promo.phase, promo.phase + 1
    before = next(r for r in results if r.phase == before_phase)
    after = next(r for r in results if r.phase == after_phase)
    cand = promo.candidate
    metric = cand.target_metric

    def measured(phase: int) -> float | None:
        domain = get_domain(evidence.cfg.domain, evidence.cfg.executor) if metric in behaviour.FIGURES else None
        return measure(metric, [{**r, "trained": trained(r)} for r in evidence.rollouts(phase)], domain)

    m0, m1 = measured(before_phase), measured(after_phase)
    moved = None if m0 is None or m1 is None else (m1 - m0 if cand.direction == "up" else m0 - m1)
    target = (f"{metric} {m0:.3f} -> {m1:.3f} ({'as promised' if moved and moved > 0 else 'not as promised'})"
              if moved is not None else f"{metric} not measurable")
    a1 = after.dev.accuracy
    if pairs and all(w.items and set(w.items) == set(e.items) for w, e in pairs):
        g = paired_gain([(w.items, e.items) for w, e in pairs])
        won, lost = g["low"] > 0, g["high"] < 0
        with_edit, without = (sum(p[i].accuracy for p in pairs) / len(pairs) for i in (1, 0))
        verdict = "win" if won else ("loss: rolled back" if lost else "no measurable effect")
        runs = "same checkpoint and seeds" if len(pairs) == 1 else f"{len(pairs)} seeds each, same checkpoint"
        summary = (f"{target}; dev accuracy {with_edit:.1%} with the edit vs {without:.1%} without it ({runs}):"
                   f" {g['diff']:+.1%} (95% CI {g['low']:+.1%} to {g['high']:+.1%}, paired on {g['n']} tasks x "
                   f"{len(pairs)} seed(s)); {verdict}")
        return {"metric": metric, "before": m0, "after": m1, "accuracy_before": before.dev.accuracy,
                "accuracy_after": a1, "accuracy_with": with_edit, "accuracy_without": without, "seeds": len(pairs),
                "gain": g["diff"], "low": g["low"], "high": g["high"], "accuracy_margin": g["diff"] - g["low"],
                "won": won, "lost": lost, "counterfactual": True, "summary": summary, "measured_in_phase": after_phase}
    a0 = before.dev.accuracy
    margin = unpaired_margin(a0, before.dev.n, a1, after.dev.n)
    won = bool(moved is not None and moved > 0 and a1 - a0 > margin)
    lo, hi = wilson(a1 * after.dev.n, after.dev.n)
    summary = (f"{target}; accuracy {a0:.1%} -> {a1:.1%} (95% CI {lo:.1%}-{hi:.1%}; no counterfactual, so "
               f"consecutive phases, unpaired); {'win' if won else 'no win'}{accuracy_note(moved is not None and moved > 0, a1 - a0, margin)}")
    return {"metric": metric, "before": m0, "after": m1, "accuracy_before": a0, "accuracy_after": a1,
            "accuracy_margin": margin, "won": won, "lost": False, "counterfactual": False, "summary": summary,
            "measured_in_phase": after_phase}


def rollback(rt: Runtime, promo: Promotion, effect: dict, phase: int) -> Promotion:
    """Revert a promotion whose realized effect was a loss, by a new commit on main (:func:`promote.undo`)."""
    return undo(
        rt, promo, phase, subject=f"Roll back {promo.branch}: {promo.candidate.variable}",
        body=f"Realized effect in phase {effect['measured_in_phase']}: {effect['summary']}",
        trailers={"Reason": f"dev accuracy {effect['gain']:+.1%} (95% CI {effect['low']:+.1%} to "
                            f"{effect['high']:+.1%}) against the old main trained from the same checkpoint",
                  "Candidate": promo.sha},
    )


def accuracy_note(won: bool, change: float, margin: float) -> str:
    """What a win says about accuracy: a metric that moved as promised is not an accuracy gain unless beyond noise."""
    if not won:
        return ""
    if change > margin:
        return " (accuracy up beyond noise)"
    return " on the targeted metric; the accuracy change is within noise"


def measured_this_phase(state: RunState) -> list[Promotion]:
    """The promotions whose realized effect this phase measured (made after the previous phase, effect set)."""
    return [p for p in state.promotions if p.phase == state.phase - 1 and p.effect]


def step(rt: Runtime, state: RunState) -> dict:
    if rt.cfg.evolution.mode != "evolve":  # the baselines get none of EvoTrainer's machinery
        return {}
    t0 = time.time()
    promotions = list(state.promotions)
    for i, promo in enumerate(promotions):
        if promo.phase != state.phase - 1 or promo.effect:
            continue  # a phase's waiting round passes here twice, measures once
        after = next(r for r in state.results if r.phase == promo.phase + 1)
        # after the run's last phase no phase trains on what a rollback would restore: the counterfactual's trainings
        # (a phase again per seed) would only report, so the effect is the unpaired one (unless evolution.final_round)
        pairs = None if none_follows(rt.cfg, state.phase) else counterfactual(rt, promo, after, state.starts)
        effect = realized_effect(rt.evidence, promo, list(state.results), pairs)
        promotions[i] = promo = promo.model_copy(update={"effect": effect["summary"]})
        if effect["lost"] and not promo.reverted_sha:
            promotions[i] = promo = rollback(rt, promo, effect, state.phase)
            if promo.reverted_sha:
                rt.emit("rolled_back", phase=state.phase, branch=promo.branch, main_sha=promo.reverted_sha,
                        reason=effect["summary"])
            effect["summary"] = promo.effect  # with why it was not reverted, when git could not
        rt.repo.add_note(promo.sha, effect, ref="effect")
        rt.emit("realized_effect", phase=state.phase, branch=promo.branch, **effect)
    escalation.rollback(rt, state)  # stalled and below the last known-good accuracy: main goes back (new commit)
    rt.emit("node_end", node="effect", phase=state.phase, seconds=round(time.time() - t0, 2),
            effects=[p.branch for p in measured_this_phase(state.model_copy(update={"promotions": promotions}))])
    return {"promotions": promotions}
