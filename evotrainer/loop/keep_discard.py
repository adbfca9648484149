"""The keep/discard step (``evolution.mode: keep_discard``): the scalar loop of autoresearch-style systems.

A baseline for ``evotrainer bench``, not the product: after each phase, the edit the phase trained on is kept if
dev accuracy rose against the phase before, and reverted (by a new commit) otherwise (the verdict is the
promotion's ``effect``); then the next edit of the domain's playbook that applies to main is committed straight
onto main for the next phase. No diagnosis, no backtest, no trial: this is what EvoTrainer's gate is measured
against. As in the evolving loop, after the last phase (unless ``evolution.final_round``) the verdict is made but
no next edit: no phase would train on it, and main would end on an edit nothing tested. That half of the step
waits (``round_due``) and runs first when ``evotrainer run --phases N`` raises the budget.

Where the edit comes from follows ``agents.engineer``, so the baseline is the same agent without EvoTrainer's
machinery around it: the built-in Engineer walks its playbook in order (the next edit that applies to main and was
not tried); an LLM Engineer gets what an autoresearch agent sees and nothing more -- the harness files, the dev
accuracy after each phase and every earlier edit with its verdict, as one ``scalar`` finding in place of a
diagnosis -- and its first candidate is committed onto main. An LLM that answers nothing usable (after its retries,
its fallbacks and the budget) leaves the step to the playbook, and the ``promoted`` event names which one wrote it.
"""

from __future__ import annotations

from agents import playbook
from agents.roles import EngineerContext, ceilings_of
from evotrainer.agents_config import HEURISTIC
from evotrainer.contracts import Candidate, Diagnosis, Promotion
from evotrainer.harness.repo import HARNESS_FILES, parse_trailers
from evotrainer.loop.promote import undo
from evotrainer.loop.runtime import Runtime, none_follows
from evotrainer.loop.state import RunState
from evotrainer.rollouts import level_history


def step(rt: Runtime, state: RunState) -> dict:
    promotions = list(state.promotions)
    last = next((i for i, p in enumerate(promotions) if p.phase == state.phase - 1), None)
    if last is not None and len(state.results) >= 2 and not promotions[last].effect:  # judged once
        before, after = (r.dev.accuracy for r in state.results[-2:])
        promo, rose = promotions[last], after > before
        rt.emit("keep_discard", phase=state.phase, branch=promo.branch, kept=rose, accuracy=[before, after])
        verdict = f"{'kept' if rose else 'discarded'}: dev accuracy {before:.1%} -> {after:.1%}"
        promotions[last] = promo = promo.model_copy(update={"effect": verdict})
        if not rose and not promo.reverted_sha:
            promotions[last] = undo(rt, promo, state.phase, f"Discard {promo.branch}: {promo.candidate.variable}",
                                    "dev accuracy did not rise", {"Reason": "keep/discard: accuracy did not rise"})
    if any(p.phase == state.phase for p in promotions):  # this phase's edit is made (a re-run after a kill)
        return {"promotions": promotions, "round_due": False}
    if none_follows(rt.cfg, state.phase):
        return {"promotions": promotions, "round_due": True}  # no phase would train on a next edit: it waits
    if merged := _merged_before(rt, state.phase):  # killed after the merge, before this step's state was saved
        return {"promotions": [*promotions, merged], "round_due": False}
    main = rt.repo.sha("main")
    cand, source = _llm_edit(rt, state, promotions, main), "llm"
    if cand is None:
        cand, source = _playbook_edit(rt, state, promotions, main), "playbook"
    if cand is not None:
        rt.repo.add_note(cand.sha, cand.model_dump(mode="json"), ref=NOTES)  # what a re-run rebuilds it from
        main_sha = rt.repo.promote(cand.branch, f"Try {cand.branch}: {cand.variable}", cand.hypothesis,
                                   {"Variable": cand.variable, "Mode": "keep/discard", "Phase": str(state.phase)})
        promotions.append(Promotion(phase=state.phase, branch=cand.branch, sha=cand.sha, main_sha=main_sha,
                                    candidate=cand, failure_mode="none"))
        rt.emit("promoted", phase=state.phase, branch=cand.branch, main_sha=main_sha, variable=cand.variable,
                source=source)
    return {"promotions": promotions, "round_due": False}


NOTES = "keep_discard"  # git notes ref holding each keep/discard candidate as committed


def _merged_before(rt: Runtime, phase: int) -> Promotion | None:
    """This phase's edit when it is already merged on main (a kill between the merge and the step's saved state):
    rebuilt from its merge's trailers and its candidate's note, so a re-run never merges a second edit."""
    for commit in rt.repo.log("main", max_count=20, first_parent=True):
        trailers = parse_trailers(commit.message)
        ours = trailers.get("Mode") == "keep/discard" and trailers.get("Phase") == str(phase)
        if ours and len(commit.parents) == 2:
            note = rt.repo.note(commit.parents[1], ref=NOTES)
            if note:
                cand = Candidate.model_validate(note)
                return Promotion(phase=phase, branch=cand.branch, sha=cand.sha, main_sha=commit.sha,
                                 candidate=cand, failure_mode="none")
    return None


def scalar_finding(state: RunState, promotions: list[Promotion]) -> Diagnosis:
    """What the scalar loop knows, as the one finding an LLM Engineer answers: the accuracy after each phase, and
    every edit with its verdict."""
    accuracy = ", ".join(f"phase {r.phase} {r.dev.accuracy:.1%}" for r in state.results) or "none yet"
    edits = "; ".join(f"phase {p.phase}: {p.candidate.intervention} ({p.candidate.variable}), "
                      f"{p.effect or 'training now'}" for p in promotions) or "none yet"
    return Diagnosis(
        id="scalar", layer="score", failure_mode="dev_accuracy", severity=1.0, confidence=1.0,
        status="confirmed", statement=f"Dev accuracy after each phase: {accuracy}. Edits so far, each trained "
        f"for one phase and kept only if dev accuracy rose: {edits}. Propose the one edit most likely to raise "
        "dev accuracy after the next phase.")


def _llm_edit(rt: Runtime, state: RunState, promotions: list[Promotion], main: str) -> Candidate | None:
    """The LLM Engineer's first candidate, committed on its branch; None for the built-in Engineer or no answer."""
    if rt.cfg.agents.role("engineer").model == HEURISTIC:
        return None
    ctx = EngineerContext(phase=state.phase, round=1, repo=rt.repo, base_sha=main, knobs=rt.evidence.knobs(main),
                          domain=rt.cfg.domain, tried=[p.candidate.intervention for p in promotions],
                          level_stats=level_history(rt.evidence.rollouts(state.phase)), promotions=promotions,
                          ceilings=ceilings_of(state.results))
    made = rt.agents.engineer.propose([scalar_finding(state, promotions)], ctx, {})
    return made[0] if made else None


def _playbook_edit(rt: Runtime, state: RunState, promotions: list[Promotion], main: str) -> Candidate | None:
    """The next edit of the built-in playbook that applies to main and was not tried, committed on its branch."""
    files = {name: rt.repo.show_file(main, name) for name in HARNESS_FILES}
    tried = {p.candidate.intervention for p in promotions}
    ctx = {"level_stats": level_history(rt.evidence.rollouts(state.phase))}
    for intervention in playbook.for_domain(rt.cfg.domain):
        edits = None if intervention.name in tried else intervention.edit(files, rt.evidence.knobs(main), ctx)
        if not edits:
            continue
        branch = f"candidates/phase-{state.phase}-kd"
        cand = Candidate(branch=branch, base_sha=main, diagnosis_id="none", intervention=intervention.name,
                         hypothesis=f"If {intervention.summary}, dev accuracy rises, because {intervention.because}", variable=intervention.variable,
                         target_metric="dev accuracy", direction="up", expected="dev accuracy rises",
                         rollback="reverted by the next phase if accuracy does not rise", files=sorted(edits))
        cand.sha = rt.repo.commit_candidate(branch, main, edits, f"{intervention.variable}: {intervention.summary}",
                                            "keep/discard: the next playbook edit", {"Variable": cand.variable})
        return cand
    return None
