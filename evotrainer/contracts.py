"""The typed data contracts that cross every seam of EvoTrainer (DESIGN.md, "Data contracts").

Every object that moves between the trainer service, the graph, the agents and the harness repo is one of the
pydantic models below, so a malformed value fails where it is made, not three nodes later. The graph keeps
them in its checkpointed state as plain JSON (``model_dump(mode="json")``) and rebuilds them on read.

    Rollout         one generated completion, one parquet row (compatible in spirit with TRL's completions table)
    PhaseResult     what one training phase produced (metrics, held-out accuracy, where rollouts/checkpoint are)
    Diagnosis       a claim about what is failing, with the evidence behind it
    Candidate       one single-variable harness edit on its own branch, with its hypothesis
    BacktestReport  the checks a candidate was judged by, and the verdict
    Promotion       a candidate merged into main, with what it answered (kept in the run's state)
    Skill           a reusable intervention the Librarian keeps across phases and runs
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Rollout(_Model):
    phase: int = Field(description="training phase that produced the rollout (1-based)")
    step: int = Field(description="GRPO optimizer step within the phase")
    harness_sha: str = Field(description="harness commit the phase trained on")
    group_id: str = Field(description="id shared by the completions of one prompt (one GRPO group)")
    sample_idx: int = Field(description="index of the completion inside its group")
    task_id: str = Field(description="id of the task in the domain's training split")
    difficulty: str = Field(description="difficulty level of the task")
    prompt: str
    completion: str
    completion_tokens: int
    truncated: bool = Field(description="generation hit max_completion_length before end-of-sequence")
    reward: float = Field(description="total harness reward (weighted sum of components)")
    reward_components: dict[str, float] = Field(default_factory=dict)
    verified: bool = Field(description="ground truth from the evaluator's verifier, never computed by the harness")
    advantage: float = Field(description="advantage the rollout trained with (0 when it was filtered out)")
    kept: bool = Field(description="whether the harness filters let the rollout train")
    turns: int = Field(1, description="policy turns (multi-turn shapes: evotrainer.trainer.shapes; else 1)")
    tool_calls: int = Field(0, description="tool calls the policy made")
    tool_errors: int = Field(0, description="tool calls the environment answered with an error")
    hit_turn_cap: bool = Field(False, description="the turn cap stopped the rollout while it still called a tool")
    extra: dict[str, Any] = Field(default_factory=dict)


class EvalResult(_Model):
    accuracy: float = Field(description="fraction of the split's tasks the verifier accepted")
    n: int = Field(description="number of the split's tasks")
    by_difficulty: dict[str, float] = Field(default_factory=dict)
    truncated_rate: float = 0.0
    ended_length: dict[str, float] = Field(
        default_factory=dict, description="tokens (end-of-sequence included) of the completions that ended within "
        "the evaluation's budget, by quantile (p50, p90, p99, max), how many ended (n), and that budget: what the "
        "policy writes when the budget does not cut it, which sizes a completion budget that does not cut its answers")
    items: dict[str, float] = Field(
        default_factory=dict, description="per task id, the share of its samples the verifier accepted "
        "(0 or 1 under greedy decoding): what paired comparisons of two checkpoints are computed on"
    )
    answers: dict[str, str] = Field(
        default_factory=dict, description="per task id, a short fingerprint of the answer its completion(s) gave "
        "(trainer.model.answer_fingerprint), kept for the dev split and the trials' probe only: whether training "
        "changed the policy's answers at all (a trial in which neither arm's answers changed is uninformative)")
    tolerant_accuracy: float | None = Field(
        None, description="the same completions under the domain's tolerant verdict (Domain.verify_tolerant: the "
        "right answer with formatting slips a lenient reader forgives, such as a trailing period): whether training "
        "taught the skill or only the answer's form. Reports only, no decision reads it; None when not measured")
    tolerant_by_difficulty: dict[str, float] = Field(default_factory=dict)
    tolerant_items: dict[str, float] = Field(default_factory=dict, description="per task id, as ``items`` under the "
                                             "tolerant verdict")

    def tolerant(self) -> EvalResult | None:
        """The tolerant score as an EvalResult of its own (accuracy, by difficulty, items), so every figure computed
        on a strict score (a paired change, an interval) is computed on it the same way; None when not measured."""
        if self.tolerant_accuracy is None:
            return None
        return EvalResult(accuracy=self.tolerant_accuracy, n=self.n, by_difficulty=self.tolerant_by_difficulty,
                          items=self.tolerant_items, truncated_rate=self.truncated_rate)


class PhaseResult(_Model):
    phase: int
    harness_sha: str
    steps: int
    train: dict[str, float] = Field(
        default_factory=dict, description="reward_mean, dead_group_ratio, kept_fraction, entropy, kl, ..."
    )
    eval: EvalResult = Field(description="the held-out split's score: for the report and the bench, never a decision")
    dev: EvalResult = Field(description="the dev split's score: what the loop's decisions read")
    rollout_path: str
    checkpoint_path: str
    wall_time_s: float
    tokens: int = Field(description="completion tokens generated while training")
    completions: int = Field(0, description="completions generated while training (every group, kept or not)")
    skipped_batches: int = Field(0, description="batches where the harness filters kept nothing")
    sandbox_attempts: list[dict] = Field(
        default_factory=list, description="what harness code tried in the sandbox while training (denied): "
        "{kind, what, where, op}")
    trajectory: dict[str, list[float]] = Field(
        default_factory=dict, description="per logged optimizer step, in order: reward, entropy, grad_norm, kl, "
        "learning_rate, completion_length, zero_std_groups (the share of the step's groups without reward spread); "
        "how the phase moved within itself, which its means hide")


Layer = Literal["score", "signal", "behavior", "version"]
DiagnosisStatus = Literal["proposed", "confirmed", "rejected", "revised"]


class MetricEvidence(_Model):
    name: str
    value: float
    low: float = Field(description="lower end of the 95% interval")
    high: float = Field(description="upper end of the 95% interval")
    n: int = Field(description="number of units (rollouts, groups or tasks) behind the value")
    threshold: float | None = None
    query: str = Field("", description="the SQL query whose first row holds the value (an LLM Diagnostician's "
                       "citation, checked against the data); empty for the built-in Diagnostician's figures")


class Diagnosis(_Model):
    id: str
    layer: Layer
    failure_mode: str = Field(description="short machine name, e.g. dead_groups, truncation")
    statement: str = Field(description="one sentence a person can check against the evidence")
    evidence: list[MetricEvidence] = Field(default_factory=list)
    rollout_ids: list[str] = Field(default_factory=list, description="example rollouts showing the failure")
    severity: float = Field(ge=0, le=1)
    confidence: float = Field(ge=0, le=1)
    status: DiagnosisStatus = "proposed"
    critique: str = ""
    source: str = Field("", description="'rules' when the built-in rules flagged it and an LLM Diagnostician did not "
                        "name it (it reaches the Critic all the same); empty for the Diagnostician's own")


class Candidate(_Model):
    branch: str
    base_sha: str
    sha: str = ""
    diagnosis_id: str
    intervention: str = Field(description="playbook/skill name of the edit")
    hypothesis: str = Field(description='"if X changes, Y moves, because Z"')
    variable: str = Field(description="the one variable changed, e.g. filters.keep_group or harness.yaml:temperature")
    target_metric: str
    direction: Literal["up", "down"]
    expected: str = Field(description="what the targeted metric should do, in words and numbers")
    rollback: str = Field(description="how to undo the edit if it hurts the next phase")
    skills_used: list[str] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)


class Check(_Model):
    name: str
    base: float | None = None
    candidate: float | None = None
    threshold: float | None = None
    passed: bool
    detail: str = ""


NOT_JUDGED = "not_judged"  # git notes ref of a candidate left unjudged (another passed first, or the race was full)
RACE = "race"  # git notes ref of a candidate that raced: its rung, its paired gains over main, and why it stopped


class BacktestReport(_Model):
    branch: str
    candidate_sha: str
    base_sha: str
    target_metric: str
    checks: list[Check]
    noise_floor: float
    verdict: Literal["promote", "reject"]
    reasons: list[str]
    runtime_s: float
    rollouts: int = Field(description="retained rollouts the replay ran on")
    sandbox: str = Field(description="which sandbox ran the harness code")
    signature: str | None = Field(None, description="what its replay says training does with it, hashed "
                                  "(judge.checks.training_signature): two candidates with one signature train alike, "
                                  "and only the first races; None when not replayed")


class Promotion(_Model):
    phase: int = Field(description="phase after which the candidate was promoted (it first trains in phase + 1)")
    branch: str
    sha: str = Field(description="the candidate commit")
    main_sha: str = Field(description="main after the merge")
    candidate: Candidate
    failure_mode: str = "unknown"
    statement: str = Field("", description="the diagnosis the edit answered")
    backtest: list[str] = Field(default_factory=list, description="the backtest's reasons")
    reverted_sha: str = Field("", description="the commit on main that rolled the edit back, if its realized "
                              "effect was a loss beyond the margin")
    effect: str = Field("", description="its realized effect in one line, once measured (on the first phase "
                        "trained on it; measured once)")


class Skill(_Model):
    id: str
    trigger: str = Field(description="the diagnosis (failure mode and condition) the skill answers")
    failure_mode: str
    intervention: str
    expected_outcome: str
    validation: str = Field(description="how the edit was validated (backtest figures)")
    domains: list[str] = Field(default_factory=list)
    evidence: list[dict[str, Any]] = Field(default_factory=list, description="commits, backtests, realized effects")
    uses: int = 0
    wins: int = 0
