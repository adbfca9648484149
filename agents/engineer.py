"""Engineer: turns the confirmed diagnoses into single-variable candidate commits, each on its own branch.

For each confirmed diagnosis (most urgent first: ``agents.roles.urgency``) the built-in Engineer orders the moves
that answer it: the Librarian's skills first (moves that won before for this failure mode, ranked by wins), then
the playbook order (``agents.playbook.for_domain(ctx.domain)``: the generic moves, the knob table's, the domain's
neutral forms and its own edits), where a move whose ``cause`` the evidence shows (the harness produces the
diagnosis in a way the move undoes, e.g. a curriculum that samples some levels rarely while the sampled ones are
dead) goes first: a cause before shaping that masks it. A template (``undo``, ``remove_reward`` ...) stands for its
moves on the harness at hand (``agents.playbook.concrete``). It then proposes up to ``max_candidates`` candidates
round robin: the first applicable move of each diagnosis in urgency order, then the next move of each, so a round
has several entrants, not one per diagnosis. It skips moves already tried this phase, rejected as "no effect" or
lost on this same main in an earlier phase, not applicable to the harness (already present, outside the knobs'
bounds), needing a training run when trials are off, or, after ``evolution.escalate_after`` phases in a row with
nothing promoted (``ctx.escalation``), editing a layer edited during the stall; an undo is a subtraction and goes
ahead then, and with nothing else left the stall gets one (``undo`` of the latest promotion not undone). Each
candidate is committed on ``candidates/phase-N-k`` from ``main`` with the hypothesis and trailers; nothing touches
``main``. :func:`commit` is the one way a candidate is committed, by any Engineer.
"""

from __future__ import annotations

from typing import Iterator

from agents.move_kit import Intervention, layer_of
from agents.playbook import UNDO, concrete, for_domain
from agents.roles import EngineerContext, urgency
from evotrainer.contracts import Candidate, Diagnosis, Skill
from evotrainer.domains import get_domain
from evotrainer.harness.repo import HARNESS_FILES, target_trailer
from evotrainer.judge import variables


class HeuristicEngineer:
    name = "heuristic"

    def __init__(self, max_candidates: int = 3):
        self.max_candidates = max_candidates

    def ranked(self, d: Diagnosis, skills: list[Skill], domain: str, evidence: tuple | None = None
               ) -> list[tuple[Intervention, list[str]]]:
        """Interventions for a diagnosis: winning skills first, then the domain's playbook, those whose ``cause``
        the evidence (``(files, knobs, ctx)``, as an edit gets it) shows ahead of the rest; losers last."""
        playbook = for_domain(domain)
        if evidence is not None:
            playbook = sorted(playbook, key=lambda i: not (i.cause and d.failure_mode in i.answers
                                                           and i.cause(*evidence)))
        by_name = {i.name: i for i in playbook}
        known = [s for s in skills if s.intervention in by_name]
        winners = sorted((s for s in known if s.wins > 0), key=lambda s: (-s.wins / max(s.uses, 1), -s.wins))
        losers = {s.intervention for s in known if s.uses >= 2 and s.wins == 0}
        order: list[tuple[Intervention, list[str]]] = [(by_name[s.intervention], [s.id]) for s in winners]
        seen = {i.name for i, _ in order}
        for i in playbook:
            if d.failure_mode in i.answers and i.name not in seen and i.name not in losers:
                order.append((i, []))
                seen.add(i.name)
        order += [(by_name[n], []) for n in sorted(losers) if n not in seen and d.failure_mode in by_name[n].answers]
        return order

    def propose(self, diagnoses: list[Diagnosis], ctx: EngineerContext, skills: dict[str, list[Skill]]
                ) -> list[Candidate]:
        files = {name: ctx.repo.show_file(ctx.base_sha, name) for name in HARNESS_FILES}
        out: list[Candidate] = []
        used = set(ctx.tried) | set(ctx.no_effect) | set(ctx.trial_lost)
        confirmed = sorted((d for d in diagnoses if d.status == "confirmed"), key=urgency)
        cache: dict = {}  # what moves compute once for every diagnosis (an undo's tree without its promotion)
        queues = [(d, self._moves(d, ctx, files, skills.get(d.id, []), used, cache)) for d in confirmed]
        while queues and len(out) < self.max_candidates:  # round robin: each diagnosis's next move in turn
            for d, queue in list(queues):
                if len(out) >= self.max_candidates:
                    break
                move = next(queue, None)
                if move is None:
                    queues.remove((d, queue))
                    continue
                intervention, skill_ids, edits = move
                used.add(intervention.name)
                out.append(self._commit(ctx, d, intervention, edits, skill_ids, len(ctx.tried) + len(out) + 1,
                                        declared_variable(intervention, files, edits)))
        if ctx.escalation and not out and confirmed:  # no other layer left: undo the latest promotion
            seen = self._seen(ctx, confirmed[0], cache)
            undo = next((u for u in concrete(UNDO, files, ctx.knobs, seen) if u.name not in used), None)
            if undo is not None:
                out.append(self._commit(ctx, confirmed[0], undo, undo.edit(files, ctx.knobs, seen), [],
                                        len(ctx.tried) + 1, undo.variable))
        return out

    @staticmethod
    def _seen(ctx: EngineerContext, d: Diagnosis, cache: dict) -> dict:
        """What a move reads beside the files and knobs: the diagnosis it answers, the phase's levels, the domain's
        levels, what an undo needs (the repo, the base, the promotions) and the round's shared cache."""
        if "levels" not in cache:
            try:
                cache["levels"] = get_domain(ctx.domain).levels
            except ValueError:  # a domain the evaluator does not know: the levels harness.yaml and the phase name
                cache["levels"] = []
        return {"level_stats": ctx.level_stats, "diagnosis": d, "levels": cache["levels"], "repo": ctx.repo,
                "base_sha": ctx.base_sha, "promotions": ctx.promotions, "cache": cache, "ceilings": ctx.ceilings}

    def _moves(self, d: Diagnosis, ctx: EngineerContext, files: dict[str, str], skills: list[Skill], used: set[str],
               cache: dict) -> Iterator[tuple[Intervention, list[str], dict[str, str]]]:
        """The moves that answer ``d`` and apply here, in order, each with its skills and edits (lazily: ``used``
        grows as other diagnoses take moves)."""
        seen = self._seen(ctx, d, cache)
        for template, skill_ids in self.ranked(d, skills, ctx.domain, (files, ctx.knobs, seen)):
            if template.needs_pilot and not ctx.pilot:
                continue
            for intervention in concrete(template, files, ctx.knobs, seen):
                undo = intervention.name.startswith("undo:")
                if intervention.name in used:
                    continue
                if ctx.escalation and not undo and layer_of(intervention.variable) in ctx.avoid_layers:
                    continue  # escalated: a layer not edited during the stall (an undo is a subtraction)
                edits = intervention.edit(files, ctx.knobs, seen)
                if edits:
                    yield intervention, skill_ids, edits

    def _commit(self, ctx: EngineerContext, d: Diagnosis, i: Intervention, edits: dict[str, str],
                skill_ids: list[str], k: int, variable: str) -> Candidate:
        branch = f"candidates/phase-{ctx.phase}-{k}"
        ev = d.evidence[0] if d.evidence else None
        now = f"{ev.name} is {ev.value:.3g} (95% CI {ev.low:.3g}-{ev.high:.3g})" if ev else "see diagnosis"
        expected = f"{i.target_metric} {i.direction} beyond the backtest noise floor; now {now}"
        rollback = f"revert the merge of {branch} (git revert -m 1 <merge>), restoring {variable}"
        cand = Candidate(
            branch=branch, base_sha=ctx.base_sha, diagnosis_id=d.id, intervention=i.name,
            hypothesis=i.hypothesis(d), variable=variable, target_metric=i.target_metric, direction=i.direction,
            expected=expected, rollback=rollback, skills_used=skill_ids, files=sorted(edits),
        )
        source = f"skill {', '.join(skill_ids)}" if skill_ids else "built-in playbook"
        return commit(ctx, d, cand, edits, f"{variable}: {i.summary}",
                      f"{d.statement}\n\nIntervention {i.name} from the {source}.")


def declared_variable(i: Intervention, files: dict[str, str], edits: dict[str, str]) -> str:
    """The variable a candidate of ``i`` declares: ``i.variable``, or, for one ending in ``.*`` (an edit whose target
    the evidence picks, e.g. whichever reward component is lenient), the one variable its diff changes, named by the
    judge's own rule (``evotrainer.judge.variables``)."""
    if not i.variable.endswith(".*"):
        return i.variable
    names = set().union(*(variables.file_names(path, files.get(path), text) for path, text in edits.items()))
    return variables.infer(names) or i.variable[:-2]


def commit(ctx: EngineerContext, d: Diagnosis, cand: Candidate, edits: dict[str, str], subject: str,
           body: str) -> Candidate:
    """Commit ``cand`` on its branch from ``ctx.base_sha`` with the trailers every candidate carries."""
    cand.files = sorted(edits)
    cand.sha = ctx.repo.commit_candidate(
        cand.branch, ctx.base_sha, edits, subject=subject, body=body,
        trailers={
            "Diagnosis": f"{d.id} ({d.layer}/{d.failure_mode}) {d.statement}",
            "Hypothesis": cand.hypothesis,
            "Variable": cand.variable,
            **target_trailer(cand.target_metric, cand.direction),  # what `evotrainer backtest REF` judges it by
            "Expected": cand.expected,
            "Rollback": cand.rollback,
            "Backtest": f"pending (git notes --ref=backtest show {cand.branch})",
        },
    )
    return cand
