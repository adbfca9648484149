"""The one registry of failure modes: what each is, which layer of the health report it belongs to, what it reads.

Every failure mode a diagnosis can carry is listed here once (:data:`MODES`), and every place that must agree on
the set reads it from here: the built-in Diagnostician's rules (``agents/diagnostician.py``), the Engineer's moves
(``agents/playbook.py``: every mode has at least one move, a test holds it), the Critic's ranking (``tier``:
``agents.roles.urgency``), training on from an earlier checkpoint (``evotrainer/loop/resume.py``: the ``overshoot``
tier) and the LLM roles' prompts (``prompt_lines``). A mode answers one of four questions about a run that does not
learn, its ``question``:

    objective   the reward signal is wrong: it disagrees with the verifier, so every signal derived from it is
                measured against the wrong objective
    overshoot   the policy moves the wrong way: updates make it worse, or certain without reward
    harm        the policy lost accuracy it had: a symptom, whose cause decides the move (no tier of its own)
    stalled     the policy does not move: updates change nothing the evaluator sees
    mismatch    what trains is not what is evaluated: prompts, budgets or answers differ between the two
    signal      the update carries little signal (dead groups, diluted batches, filters that starve it)
    behavior    the policy's completions show a defect (format, truncation, length; in a multi-turn domain, turns
                stopped by the cap, erroring or needless tool calls)

A ``multi_turn`` mode reads only the turn figures a multi-turn rollout records (``turns``, ``tool_calls``,
``tool_errors``, ``hit_turn_cap``): it never occurs in a single-turn domain, whose moves need not answer it.

``tier`` orders them for the Critic and the Engineer: a wrong objective first (everything else is measured against
it), then an update moving the wrong way, then the rest by severity x confidence.

Alone: ``python -m agents.modes`` prints the registry.
"""

from __future__ import annotations

from dataclasses import dataclass

from evotrainer.contracts import Layer

QUESTIONS = ("objective", "overshoot", "harm", "stalled", "mismatch", "signal", "behavior")
TIERS = {"objective": 0, "overshoot": 1}  # the rest: 2 (ranked by severity x confidence)


@dataclass(frozen=True)
class Mode:
    name: str
    layer: Layer  # the Diagnosis.layer of a diagnosis with this mode
    question: str  # one of QUESTIONS
    reads: str  # the evidence the rule reads
    help: str  # one line: what it means for training
    multi_turn: bool = False  # reads only a multi-turn rollout's turn figures: never occurs in a single-turn domain

    @property
    def tier(self) -> int:
        return TIERS.get(self.question, 2)


MODES: dict[str, Mode] = {m.name: m for m in [
    Mode("reward_disagreement", "behavior", "objective",
         "reward vs verified per rollout (and the advantage it trained with), overall and as shares of the right / "
         "rewarded ones, per reward component",
         "the reward disagrees with the verifier: it pays wrong answers or misses right ones"),
    Mode("training_decline", "score", "overshoot",
         "verified share and reward of training rollouts, phase over phase, on an unchanged harness",
         "training makes the policy worse at what it is rewarded for: the step overshoots"),
    Mode("entropy_collapse", "behavior", "overshoot",
         "per-step entropy and reward within the phase (first vs last quarter)",
         "the policy grows certain without being rewarded for it"),
    Mode("accuracy_regression", "score", "harm",
         "dev accuracy against the best earlier phase or the starting policy, paired per task",
         "the policy lost dev accuracy it had"),
    Mode("edit_regression", "version", "harm",
         "dev accuracy in the first phase trained on a promoted edit against the phase before, paired per task",
         "the last promoted edit made the policy worse"),
    Mode("policy_stalled", "score", "stalled",
         "dev answers changed since the phase's start, training reward trend, KL and gradient norm per step",
         "the updates change nothing the evaluator sees: the policy does not move"),
    Mode("train_eval_mismatch", "behavior", "mismatch",
         "training rollouts' verified share against dev accuracy at the same checkpoint; prompt and budget "
         "against the evaluator's",
         "what trains is not what is evaluated: gains in training do not reach the evaluator"),
    Mode("dead_groups", "signal", "signal", "GRPO groups without reward spread, by level",
         "most groups give no advantage, so most of the batch carries no gradient"),
    Mode("diluted_batch", "signal", "signal", "groups that still train without reward spread",
         "groups with zero advantage take batch slots and dilute the per-sequence loss"),
    Mode("over_filtering", "signal", "signal", "share of rollouts the harness filters keep",
         "the filters keep so few rollouts that the update starves"),
    Mode("format_failures", "behavior", "behavior", "completions without an answer the evaluator can read",
         "the policy often gives no answer in the expected format"),
    Mode("truncation", "behavior", "behavior", "completions cut at max_completion_length",
         "completions hit the length budget without ending"),
    Mode("correct_but_truncated", "behavior", "behavior", "verified-correct completions cut at the budget",
         "right answers are cut at the length budget"),
    Mode("length_growth", "behavior", "behavior", "mean completion length, phase over phase",
         "completions grow long quickly"),
    Mode("turn_cap_hit", "behavior", "behavior", "rollouts the turn cap (max_turns) stopped while still making new "
         "tool calls (one repeating a call is looping: tool_spam)",
         "rollouts are stopped by the turn cap before they can answer", multi_turn=True),
    Mode("tool_errors", "behavior", "behavior", "tool calls the environment answered with an error, as a share of "
         "all calls", "many tool calls are malformed or ask for what the environment lacks", multi_turn=True),
    Mode("tool_spam", "behavior", "behavior", "repeated identical tool calls, and calls beyond what verified-correct "
         "rollouts of the same level make", "rollouts call the tool more than their task needs", multi_turn=True),
]}


def get(name: str) -> Mode:
    """The mode called ``name``; ValueError in one line for one not registered."""
    if name not in MODES:
        raise ValueError(f"unknown failure mode {name!r} (known: {', '.join(sorted(MODES))})")
    return MODES[name]


def of_question(question: str) -> frozenset[str]:
    """The modes answering ``question`` (one of :data:`QUESTIONS`)."""
    return frozenset(m.name for m in MODES.values() if m.question == question)


def prompt_lines() -> str:
    """The registry as the LLM roles read it: a line per mode."""
    return "\n".join(f"- {m.name} ({m.layer}, {m.question}): {m.help}; reads {m.reads}" for m in MODES.values())


if __name__ == "__main__":
    print(prompt_lines())
