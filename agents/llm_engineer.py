"""The Engineer on an LLM: it reads the harness files and the retrieved skills, then edits any harness file with
search/replace blocks (:mod:`agents.edits`), one hypothesis and one variable per candidate.

The answer is checked before anything is committed: every block applies exactly and the result compiles (else the
problems go back to the model, ``retries`` times), the blocks change only the one variable the candidate declares
(what a variable covers is :mod:`evotrainer.judge.variables`' rule, the one the backtest's safety check applies), the
diagnosis id is a confirmed one, the target metric is one the effect step measures, the intervention was not tried
this phase, one offered as a subtraction is one (:func:`evotrainer.harness.edits.subtraction_problem`: it reverts
an earlier promotion or only deletes), and, when the run is stalled, the edit changes a layer not edited during the
stall or is a subtraction. Each accepted candidate is committed with the trailers by
:func:`agents.engineer.commit`. A person's feedback from the gate (``evotrainer approve --revise``) is part of the
request. The system prompt is ``agents/prompts/engineer.md``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agents.roles import EngineerContext
from agents.edits import Block, apply_blocks
from agents.engineer import HeuristicEngineer, commit
from agents.librarian import how_of
from agents.llm import LLMRole, UseBuiltin
from agents.move_kit import layer_of
from evotrainer.contracts import Candidate, Diagnosis, Skill
from evotrainer.harness.edits import subtraction_problem
from evotrainer.harness.knobs import KnobsError, parse_knobs
from evotrainer.harness.repo import seed_dir
from evotrainer.judge import variables


SUBTRACTIONS = ("subtract", "undo:")  # an edit offered as a subtraction is named so (the built-in one: undo:<branch>)


class Proposal(BaseModel):
    diagnosis_id: str
    intervention: str = Field(min_length=1, description="a short snake_case name of the edit")
    summary: str = Field(min_length=1, description="what the edit does, in a few words (the commit subject)")
    hypothesis: str = Field(min_length=1, description='"if X changes, Y moves, because Z"')
    variable: str = Field(min_length=1, description="the one variable changed, e.g. rewards.format or "
                          "harness.yaml:temperature")
    target_metric: str
    direction: Literal["up", "down"]
    expected: str = Field(min_length=1)
    rollback: str = Field(min_length=1)
    blocks: list[Block] = Field(min_length=1)


class EngineerAnswer(BaseModel):
    candidates: list[Proposal] = Field(default_factory=list)


def target_metrics() -> list[str]:
    """The metrics a candidate may name as its target: every one the effect step measures on the phase it trains
    (``judge.targets.measurable``: replay figures, which the backtest also measures on replay, behaviour figures such as
    ``format_failure_rate`` and ``turn_cap_rate``, and group figures). The A/B trial judges accuracy on a probe of
    the dev split whatever the target."""
    from evotrainer.judge.targets import measurable

    return measurable()


def api_doc(domain: str) -> str:
    try:
        return (seed_dir(domain).parent / "README.md").read_text()[:9000]
    except OSError:
        return ""


def skill_line(diagnosis_id: str, s: Skill) -> str:
    """A retrieved skill as the request shows it: its record, and how to make its edit (the Librarian's text)."""
    how = how_of(s)
    return (f"{diagnosis_id}: {s.intervention} (skill {s.id}; uses {s.uses}, wins {s.wins}): trigger {s.trigger}; "
            f"expected {s.expected_outcome}; validation {s.validation}" + (f"; how: {how}" if how else ""))


def scope_problems(p: Proposal, edits: dict[str, str], read, ctx: EngineerContext) -> list[str]:
    """Why applied ``edits`` are not the one change ``p`` declares: variables beyond ``p.variable`` (by the rule
    the backtest's safety check applies), or a subtraction that does not subtract."""
    names = set().union(*(variables.file_names(f, read(f), text) for f, text in edits.items()))
    extra = variables.uncovered(p.variable, names)
    out = []
    if not names:
        out.append("the blocks change no variable (only comments or docstrings)")
    elif extra:
        out.append(f"declares {p.variable} but its blocks also change {', '.join(extra)}: one variable per "
                   "candidate (propose the other change as a candidate of its own, or declare the one variable "
                   "that covers them all)")
    if p.intervention.startswith(SUBTRACTIONS):
        why = subtraction_problem(ctx.repo, edits, read, ctx.promotions)
        out += [f"{p.intervention} is named as a subtraction but {why}"] if why else []
    if "harness.yaml" in edits and ctx.ceilings:
        try:
            knobs = parse_knobs(edits["harness.yaml"]).model_dump()
        except KnobsError:  # an invalid harness.yaml is the backtest's to reject, with the validator's message
            knobs = {}
        out += [f"harness.yaml sets {key} {knobs[key]}, over the {ceiling:g} this run allows (a larger value fails "
                f"in the trainer)" for key, ceiling in ctx.ceilings.items()
                if isinstance(knobs.get(key), (int, float)) and knobs[key] > ceiling]
    return out


class LLMEngineer(LLMRole):
    role = "engineer"

    def __init__(self, ctx, builtin: HeuristicEngineer):
        super().__init__(ctx, builtin)
        self.max_candidates = builtin.max_candidates

    def _read(self, ctx: EngineerContext):
        return lambda name: ctx.repo.read(ctx.base_sha, name)

    def request(self, confirmed: list[Diagnosis], ctx: EngineerContext, skills: dict[str, list[Skill]]) -> str:
        files = ctx.repo.files(ctx.base_sha)
        read = self._read(ctx)
        shown = "\n\n".join(f"--- {f} ---\n{read(f)}" for f in files if not f.startswith("."))
        diag = "\n".join(d.model_dump_json(exclude={"status"}) for d in confirmed)
        sk = "\n".join(skill_line(did, s) for did, ss in skills.items() for s in ss)
        rej = "\n".join(f"{b}: {'; '.join(r)}" for b, r in ctx.rejections.items())
        parts = [f"Phase {ctx.phase}, round {ctx.round}. Confirmed diagnoses:\n{diag}",
                 f"Harness API:\n{api_doc(ctx.domain)}", f"Harness files at main ({ctx.base_sha[:8]}):\n{shown}",
                 f"Retrieved skills:\n{sk or 'none yet'}",
                 f"Already tried this phase: {', '.join(ctx.tried) or 'nothing'}",
                 f"Changed no training update on this main in an earlier phase (do not retry): "
                 f"{', '.join(ctx.no_effect) or 'nothing'}",
                 f"Lost its A/B trial on this main in an earlier phase (do not retry until main changes): "
                 f"{', '.join(ctx.trial_lost) or 'nothing'}",
                 f"Rejected this phase, with the backtest's reasons:\n{rej or 'none'}",
                 f"Target metrics: {', '.join(target_metrics())}"]
        if ctx.ceilings:
            parts.append("The most each knob can be on this run (a larger value fails in the trainer): " + ", ".join(
                f"{key} {ceiling:g}" for key, ceiling in ctx.ceilings.items()))
        if ctx.feedback:
            parts.append(f"A person reviewed the last candidates and asks you to revise: {ctx.feedback}")
        if ctx.escalation:
            parts.append(f"{ctx.escalation} Layers edited during the stall: {', '.join(ctx.avoid_layers) or 'none'}.")
        parts.append(f"Propose at most {self.max_candidates} candidates, one per diagnosis.")
        return "\n\n".join(parts)

    def check(self, answer: EngineerAnswer, confirmed: list[Diagnosis], ctx: EngineerContext,
              applied: dict[int, dict[str, str]]) -> str | None:
        ids, metrics, problems = {d.id for d in confirmed}, target_metrics(), []
        applied.clear()
        for k, p in enumerate(answer.candidates[:self.max_candidates], 1):
            if p.diagnosis_id not in ids:
                problems.append(f"candidate {k}: diagnosis_id {p.diagnosis_id!r} is not one of {sorted(ids)}")
            if p.target_metric not in metrics:
                problems.append(f"candidate {k}: target_metric {p.target_metric!r} is not one of the listed metrics")
            if p.intervention in ctx.tried:
                problems.append(f"candidate {k}: {p.intervention} was already tried this phase")
            elif p.intervention in ctx.no_effect:
                problems.append(f"candidate {k}: {p.intervention} changed no training update on this main before")
            elif p.intervention in ctx.trial_lost:
                problems.append(f"candidate {k}: {p.intervention} lost its A/B trial on this main before")
            if ctx.escalation and layer_of(p.variable) in ctx.avoid_layers and not p.intervention.startswith(
                    SUBTRACTIONS):
                problems.append(f"candidate {k}: the run is stalled; {p.variable} is in layer "
                                f"{layer_of(p.variable)}, edited during the stall: change layer or subtract")
            read = self._read(ctx)
            edits, errs = apply_blocks(p.blocks, read)
            problems += [f"candidate {k}, {e}" for e in errs]
            if not errs:
                problems += [f"candidate {k}: {e}" for e in scope_problems(p, edits, read, ctx)]
            applied[k] = edits
        return "; ".join(problems) or None

    def propose(self, diagnoses: list[Diagnosis], ctx: EngineerContext, skills: dict[str, list[Skill]]
                ) -> list[Candidate]:
        confirmed = [d for d in diagnoses if d.status == "confirmed"]
        if not confirmed:
            return []
        applied: dict[int, dict[str, str]] = {}
        conv = self.conversation(f"engineer phase {ctx.phase} round {ctx.round}")
        try:
            answer = conv.ask(self.request(confirmed, ctx, skills), EngineerAnswer,
                              lambda a: self.check(a, confirmed, ctx, applied))
        except UseBuiltin:
            return self.builtin.propose(diagnoses, ctx, skills)
        if answer is None:
            return []
        by_id = {d.id: d for d in confirmed}
        out = []
        for k, p in enumerate(answer.candidates[:self.max_candidates], 1):
            n = len(ctx.tried) + len(out) + 1
            cand = Candidate(branch=f"candidates/phase-{ctx.phase}-{n}", base_sha=ctx.base_sha,
                             diagnosis_id=p.diagnosis_id, intervention=p.intervention, hypothesis=p.hypothesis,
                             variable=p.variable, target_metric=p.target_metric, direction=p.direction,
                             expected=p.expected, rollback=p.rollback, skills_used=[s.id for s in
                                                                                    skills.get(p.diagnosis_id, [])])
            out.append(commit(ctx, by_id[p.diagnosis_id], cand, applied[k], f"{p.variable}: {p.summary}",
                              f"{by_id[p.diagnosis_id].statement}\n\nIntervention {p.intervention} written by the "
                              f"LLM Engineer ({conv.chain[conv.index][0]})."))
        return out
