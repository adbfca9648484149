"""Engineer: turns each confirmed diagnosis into one single-variable candidate commit on its own branch.

For each confirmed diagnosis (most urgent first: ``agents.roles.urgency``) the built-in Engineer asks the
Librarian's skills first — interventions that won before for this failure mode, ranked by wins — then falls back to
the playbook order (``agents.playbook.for_domain(ctx.domain)``: the generic edits plus the domain's own), where an
edit whose ``cause`` the evidence shows (the harness produces the diagnosis in a way the edit undoes, e.g. a
curriculum withholding levels while the sampled ones are dead) goes first: a cause before shaping that masks it.
It skips interventions already tried this phase, rejected as "no effect" on this same main in an earlier phase,
already present in the harness, known to lose (skills with uses but no wins), or needing a pilot run when pilots
are off.
The edit is committed on ``candidates/phase-N-k`` from ``main`` with the hypothesis and trailers; nothing touches
``main``. After ``evolution.escalate_after`` phases in a row with nothing promoted (``ctx.escalation``) it only
edits layers not edited during the stall, or, with none left, proposes a subtraction (:func:`subtraction`: undo the
latest promotion). :func:`commit` is the one way a candidate is committed, by any Engineer.
"""

from __future__ import annotations

from agents.roles import EngineerContext, urgency
from agents.playbook import Intervention, for_domain, layer_of
from evotrainer.contracts import Candidate, Diagnosis, Skill
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
        for d in confirmed:
            if len(out) >= self.max_candidates:
                break
            seen = {"level_stats": ctx.level_stats, "diagnosis": d}
            for intervention, skill_ids in self.ranked(d, skills.get(d.id, []), ctx.domain, (files, ctx.knobs, seen)):
                if intervention.name in used or (intervention.needs_pilot and not ctx.pilot):
                    continue
                if ctx.escalation and layer_of(intervention.variable) in ctx.avoid_layers:
                    continue  # escalated: a layer not edited during the stall
                edits = intervention.edit(files, ctx.knobs, seen)
                if not edits:
                    continue
                used.add(intervention.name)
                out.append(self._commit(ctx, d, intervention, edits, skill_ids, len(ctx.tried) + len(out) + 1,
                                        declared_variable(intervention, files, edits)))
                break
        if ctx.escalation and not out and confirmed:  # no other layer left: propose a subtraction
            cand = subtraction(ctx, confirmed[0], len(ctx.tried) + 1)
            out += [cand] if cand else []
        return out

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


def subtraction(ctx: EngineerContext, d: Diagnosis, k: int) -> Candidate | None:
    """A candidate that undoes the latest promotion not undone yet: its files as they were before its merge."""
    done = set(ctx.tried)
    for promo in reversed(ctx.promotions):
        name = f"subtract:{promo.candidate.intervention}"
        if name in done:
            continue
        restored = ctx.repo.files_before(promo.main_sha, promo.candidate.files)  # a file it added is left alone
        edits = {f: t for f, t in restored.items() if t is not None and t != ctx.repo.show_file(ctx.base_sha, f)}
        if not edits:
            continue
        c = promo.candidate
        cand = Candidate(
            branch=f"candidates/phase-{ctx.phase}-{k}", base_sha=ctx.base_sha, diagnosis_id=d.id, intervention=name,
            hypothesis=f"If {c.variable} goes back to what it was before {promo.branch}, the stall ends, because "
                       f"that edit has not paid off (diagnosis: {d.failure_mode})",
            variable=c.variable, target_metric=c.target_metric, direction="up" if c.direction == "down" else "down",
            expected=f"{c.target_metric} returns toward its value before {promo.branch}; dev accuracy holds",
            rollback=f"merge {promo.branch} again", files=sorted(edits))
        return commit(ctx, d, cand, edits, f"{c.variable}: undo {promo.branch} (subtraction)",
                      f"{ctx.escalation}\n\nSubtraction: {promo.branch} ({c.intervention}) is undone.")
    return None
