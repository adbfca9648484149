"""The keep/discard step (``evolution.mode: keep_discard``): the scalar loop of autoresearch-style systems.

A baseline for ``evotrainer bench``, not the product: after each phase, the edit the phase trained on is kept if
held-out accuracy rose against the phase before, and reverted (by a new commit) otherwise (the verdict is the
promotion's ``effect``); then the next edit of the domain's playbook that applies to main is committed straight
onto main for the next phase. No diagnosis, no backtest, no trial: this is what EvoTrainer's gate is measured
against. As in the evolving loop, after the last phase (unless ``evolution.final_round``) the verdict is made but
no next edit: no phase would train on it, and main would end on an edit nothing tested. That half of the step
waits (``round_due``) and runs first when ``evotrainer run --phases N`` raises the budget. The edits come from the
built-in playbook in its order (what the built-in Engineer knows), whatever model ``agents.engineer`` names: an LLM
Engineer needs diagnoses, which this baseline has none of by design.
"""

from __future__ import annotations

from agents import playbook
from evotrainer.contracts import Candidate, Promotion
from evotrainer.harness import HARNESS_FILES
from evotrainer.loop.runtime import Runtime
from evotrainer.loop.state import RunState
from evotrainer.rollouts import level_history


def step(rt: Runtime, state: RunState) -> dict:
    promotions = list(state.promotions)
    last = next((i for i, p in enumerate(promotions) if p.phase == state.phase - 1), None)
    if last is not None and len(state.results) >= 2 and not promotions[last].effect:  # judged once
        before, after = (r.eval.accuracy for r in state.results[-2:])
        promo, rose = promotions[last], after > before
        rt.emit("keep_discard", phase=state.phase, branch=promo.branch, kept=rose, accuracy=[before, after])
        verdict = f"{'kept' if rose else 'discarded'}: held-out accuracy {before:.1%} -> {after:.1%}"
        promotions[last] = promo = promo.model_copy(update={"effect": verdict})
        if not rose and not promo.reverted_sha:
            sha = rt.repo.revert(promo.main_sha, f"Discard {promo.branch}: {promo.candidate.variable}",
                                 "held-out accuracy did not rise", {"Reason": "keep/discard: accuracy did not rise"})
            promotions[last] = promo.model_copy(update={"reverted_sha": sha})
    if any(p.phase == state.phase for p in promotions):  # this phase's edit is made (a re-run after a kill)
        return {"promotions": promotions, "round_due": False}
    if state.phase >= rt.cfg.phases and not rt.cfg.evolution.final_round:
        return {"promotions": promotions, "round_due": True}  # no phase would train on a next edit: it waits
    main = rt.repo.sha("main")
    files = {name: rt.repo.show_file(main, name) for name in HARNESS_FILES}
    tried = {p.candidate.intervention for p in promotions}
    ctx = {"level_stats": level_history(rt.evidence.rollouts(state.phase))}
    for intervention in playbook.for_domain(rt.cfg.domain):
        edits = None if intervention.name in tried else intervention.edit(files, rt.evidence.knobs(main), ctx)
        if not edits:
            continue
        branch = f"candidates/phase-{state.phase}-kd"
        cand = Candidate(branch=branch, base_sha=main, diagnosis_id="none", intervention=intervention.name,
                         hypothesis=f"If {intervention.summary}, held-out accuracy rises, because {intervention.because}", variable=intervention.variable,
                         target_metric="held-out accuracy", direction="up", expected="held-out accuracy rises",
                         rollback="reverted by the next phase if accuracy does not rise", files=sorted(edits))
        cand.sha = rt.repo.commit_candidate(branch, main, edits, f"{intervention.variable}: {intervention.summary}",
                                            "keep/discard: the next playbook edit", {"Variable": cand.variable})
        main_sha = rt.repo.promote(branch, f"Try {branch}: {cand.variable}", cand.hypothesis,
                                   {"Variable": cand.variable, "Mode": "keep/discard"})
        promotions.append(Promotion(phase=state.phase, branch=branch, sha=cand.sha, main_sha=main_sha,
                                    candidate=cand, failure_mode="none"))
        rt.emit("promoted", phase=state.phase, branch=branch, main_sha=main_sha, variable=cand.variable)
        break
    return {"promotions": promotions, "round_due": False}
