"""The Diagnostician on an LLM: it reads the phase through tools (SQL over the rollouts, samples, registry, history)
and returns typed Diagnoses whose figures come from its own queries and whose rollout ids exist.

The conversation is a bounded tool loop (``agents.<role>.tool_rounds``) in a JSON action protocol that works on
every model (:func:`agents.evidence_tools.investigate`). An answer is checked against the data before it is
accepted: every cited figure must be in the first row of the query cited with it, every rollout id must exist;
otherwise the model is told what is wrong and answers again (``retries``), then the next fallback answers. The
system prompt is ``agents/prompts/diagnostician.md``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, field_validator

import agents.modes as modes
from agents.roles import PhaseEvidence
from agents.evidence_tools import EvidenceTools, ToolCall, investigate
from agents.llm import LLMRole, UseBuiltin
from evotrainer.contracts import Diagnosis, MetricEvidence


class Figure(BaseModel):
    name: str = Field(description="what the figure is, e.g. dead_group_ratio")
    value: float
    query: str = Field(description="the SQL query whose first row contains value")
    n: int = Field(0, ge=0, description="units (rollouts, groups, tasks) behind the value")
    low: float | None = Field(None, description="lower end of the 95% interval")
    high: float | None = Field(None, description="upper end of the 95% interval")
    threshold: float | None = None


class DiagnosisDraft(BaseModel):
    failure_mode: str = Field(min_length=1, description="one of the registered failure modes the system prompt lists "
                              "(its layer and question follow from it)")
    statement: str = Field(min_length=1)
    evidence: list[Figure] = Field(min_length=1)
    rollout_ids: list[str] = Field(default_factory=list)
    severity: float = Field(ge=0, le=1)
    confidence: float = Field(ge=0, le=1)

    @field_validator("failure_mode")
    @classmethod
    def registered(cls, value: str) -> str:
        """A registered mode (``agents.modes``), in its snake_case spelling; else a one-line error that lists them,
        which goes back to the model (``agents.llm``: it answers again, then the next model or the rules do)."""
        name = mode_name(value)
        modes.get(name)
        return name


class DiagnosticianStep(ToolCall):
    diagnoses: list[DiagnosisDraft] = Field(default_factory=list, description="with action 'answer'")


def check_drafts(tools: EvidenceTools, drafts: list[DiagnosisDraft]) -> str | None:
    """Why the drafts do not hold against the data (figures not in their queries, unknown rollout ids), or None."""
    problems = []
    for i, d in enumerate(drafts, 1):
        unknown = tools.unknown_ids(d.rollout_ids)
        if unknown:
            problems.append(f"diagnosis {i}: unknown rollout ids {unknown[:5]} (ids are group_id/sample_idx)")
        for f in d.evidence:
            why = tools.holds(f.query, f.value)
            if why:
                problems.append(f"diagnosis {i}, figure {f.name}: {why}")
    return "; ".join(problems) or None


def mode_name(text: str) -> str:
    """A failure mode as a snake_case machine name ('Dead groups', 'dead-groups' -> 'dead_groups'), the registry's
    form, so a model's spelling does not hide a mechanism the registry and the built-in repairs know."""
    return re.sub(r"[^a-z0-9]+", "_", text.strip().lower()).strip("_") or "unknown"


def to_diagnosis(d: DiagnosisDraft, ident: str) -> Diagnosis:
    ev = [MetricEvidence(name=f.name, value=f.value, low=f.value if f.low is None else f.low,
                         high=f.value if f.high is None else f.high, n=f.n, threshold=f.threshold,
                         query=f.query)
          for f in d.evidence]
    mode = modes.get(mode_name(d.failure_mode))
    return Diagnosis(id=ident, layer=mode.layer, failure_mode=mode.name, statement=d.statement, evidence=ev,
                     rollout_ids=d.rollout_ids, severity=d.severity, confidence=d.confidence)


def evidence_brief(ev: PhaseEvidence, tools: EvidenceTools) -> str:
    cur = ev.current
    return (f"Phase {ev.phase} just trained on harness {cur.harness_sha[:8]} ({cur.steps} steps); dev "
            f"accuracy {cur.dev.accuracy:.3f} (n={cur.dev.n})"
            + (f", starting policy {ev.baseline.accuracy:.3f}" if ev.baseline else "")
            + (f", the checkpoint it trained from {start.accuracy:.3f}" if (start := ev.start_dev()) is not None
               and start is not ev.baseline else "")
            + f". Phases in view: {ev.phases_in_view}. Train figures: "
            + ", ".join(f"{k}={v:.3g}" for k, v in cur.train.items())
            + f"\nKnobs (harness.yaml): {ev.knobs.model_dump_json()}\nTables:\n{tools.schema()}")


def modes_prompt(role: str) -> str:
    """What the Diagnostician's and the Critic's system prompts add: the registry of failure modes
    (``agents.modes.prompt_lines``), one line each, with the layer and question it belongs to."""
    use = ("Name every diagnosis with one of them (failure_mode); a name not listed is sent back." if
           role == "diagnostician" else "The Engineer answers a reward that disagrees with the verifier (objective) "
           "first, then an update that moves the wrong way (overshoot), then the rest by severity x confidence.")
    return f"Failure modes (name, layer, question: what it means; what it reads). {use}\n{modes.prompt_lines()}"


def history_of(ev: PhaseEvidence) -> list[dict]:
    if ev.run_dir is None:
        return []
    from evotrainer.report.history import harness_log
    from evotrainer.rundir import RunDir

    try:
        return harness_log(RunDir(ev.run_dir))
    except Exception:  # history is context, never a reason to stop
        return []


class LLMDiagnostician(LLMRole):
    role = "diagnostician"

    def diagnose(self, ev: PhaseEvidence) -> list[Diagnosis]:
        tools = EvidenceTools.from_evidence(ev, history_of(ev))
        try:
            conversation = self.conversation(f"diagnose phase {ev.phase}", modes_prompt(self.role))
            step = investigate(conversation, tools, DiagnosticianStep,
                               evidence_brief(ev, tools) + "\n\nWhat is failing in this phase?",
                               self.settings.tool_rounds, lambda s: check_drafts(tools, s.diagnoses))
        except UseBuiltin:
            return self.builtin.diagnose(ev)
        finally:
            tools.close()
        if step is None:
            return []
        return [to_diagnosis(d, f"d{ev.phase}-{k}") for k, d in enumerate(step.diagnoses, 1)]
