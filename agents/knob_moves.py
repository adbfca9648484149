"""The knob moves: one table row per harness.yaml knob (:data:`KNOBS`), and the moves it generates.

A numeric knob steps up and down on its natural scale (log for rates, norms and budgets, log2 for counts, additive for
temperature and the turn cap; a knob that may be 0 is "off" there and comes on at its row's onset) and, where its row
gives a jump factor, jumps further when the evidence says the policy does not move although its groups carry signal
(``policy_stalled``) or collapsed (an overshoot mode, or ``COLLAPSE`` of its dev accuracy lost). A categorical knob
moves to each value a failure mode's mechanism asks for. Each move declares what it does to the knob, the failure modes
it answers, the metric it should move, its mirror or why it has none, and needs a training run to be judged
(``needs_pilot``). A value the Knobs validator refuses (its bounds, the clip epsilons without reuse) is not applicable.
The completion budget is sized from the evidence both ways, the turn cap (``max_turns``, moved only where harness.yaml
sets one: a multi-turn domain's) down; two more moves go to a fixed point (the evaluator's budget, a temperature of 1).
``agents/playbook.py`` merges them into the playbook (:data:`KNOB_MOVES`) and its docstring tables the factors;
``tests/test_moves.py`` holds every knob to a move each way, a mirror, a return to the start, and no catalogued defect's
constant.

Alone: ``python -m agents.knob_moves`` prints each move with its mirror.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, get_args

from pydantic import ValidationError

from agents.diagnostician import CALLS_NEEDED, UNCUT_LENGTH
from agents.move_kit import (EVALUATOR_BUDGET, STALLED, Files, Intervention, cited, collapsed, fmt, same_function,
                             set_yaml_scalar, stalled_with_signal)
from evotrainer.domains.neutral import KEEP_ALL
from evotrainer.harness.knobs import Knobs


@dataclass(frozen=True)
class Way:
    """One way a knob moves, and why: the failure modes it answers, the metric it should move (and which way), and
    the mechanism, a clause that follows "because"."""

    answers: tuple[str, ...]
    metric: str
    direction: str
    because: str


@dataclass(frozen=True)
class Knob:
    """One row of :data:`KNOBS`: how a harness.yaml knob moves.

    Numeric (``up``/``down``): ``scale`` "log" multiplies by ``step`` (a ``jump`` by ``jump``), "add" adds it; a log
    knob with an ``onset`` may be 0 (off): raising it from 0 goes to the onset, lowering it from the onset or below
    turns it off. ``size`` may replace a direction's step with one sized from the evidence (same arguments as an
    edit, returns the new value or None); ``requires`` may make a direction depend on the harness (same arguments,
    True where it can act). Categorical (``values``): a move to each value a mechanism asks for.
    ``names`` overrides a generated move name (by "up", "down" or the value); ``no_mirror`` is why a move of this
    knob has no mirror, when one has none."""

    key: str
    priority: int
    up: Way | None = None
    down: Way | None = None
    scale: str = "log"
    step: float = 1.0
    jump: float | None = None
    onset: float | None = None
    integer: bool = False
    values: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)
    no_mirror: str = ""
    size: dict = field(default_factory=dict)
    requires: dict = field(default_factory=dict)
    summary: str = ""  # what the knob is, for a move's summary


HALF_DECADE, DECADE_AND_HALF = 10 ** 0.5, 10 ** 1.5  # learning rates and norms are searched on a log grid
OVERSTEP = ("accuracy_regression", "training_decline", "entropy_collapse")  # the step moves the policy too far


def stepped(row: Knob, value, sign: int, factor: float):
    """``value`` moved one ``factor`` up (sign +1) or down (-1) on the row's scale; None when it cannot move."""
    if row.scale == "add":
        new = round(value + sign * factor, 6)
    elif value == 0:
        if sign < 0 or row.onset is None or factor != row.step:
            return None  # off: only a step turns it on, to its onset
        new = row.onset
    elif sign < 0 and row.onset is not None and value <= row.onset * (1 + 1e-9):
        new = 0
    else:
        new = value * factor if sign > 0 else value / factor
    if row.integer:
        new = int(round(new))
    return new


def valid(knobs: Knobs, key: str, value) -> bool:
    """Whether harness.yaml with ``key`` set to ``value`` passes the Knobs validator (its bounds and its rules)."""
    try:
        Knobs(**{**knobs.model_dump(), key: value})
    except ValidationError:
        return False
    return True


def _knob(key: str, compute: Callable[[Knobs], float | int | str | bool | None]):
    """An edit setting ``key`` to ``compute(knobs)``, held to the knob's ceiling on this run (``ctx["ceilings"]``,
    ``agents.roles.ceilings_of``); not applicable when that is None, the current value, or a value the Knobs
    validator refuses."""

    def edit(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
        value, ceiling = compute(knobs), ctx.get("ceilings", {}).get(key)
        if ceiling is not None and isinstance(value, (int, float)) and not isinstance(value, bool) and value > ceiling:
            value = type(value)(ceiling) if getattr(knobs, key) < ceiling else None  # never a raise that lowers
        if value is None or value == getattr(knobs, key) or not valid(knobs, key, value):
            return None
        text = str(value).lower() if isinstance(value, bool) else value if isinstance(value, str) else \
            str(value) if isinstance(value, int) else fmt(value)
        return {"harness.yaml": set_yaml_scalar(files["harness.yaml"], key, text)}

    return edit


def _numeric(row: Knob, sign: int, jump: bool) -> Intervention:
    way = row.up if sign > 0 else row.down
    word = "up" if sign > 0 else "down"
    factor = row.jump if jump else row.step
    answers = tuple(m for m in way.answers if m in STALLED | set(OVERSTEP)) if jump else way.answers
    name = row.names.get(f"jump {word}" if jump else word) or (f"jump_{row.key}_{word}" if jump else
                                                               f"{'raise' if sign > 0 else 'lower'}_{row.key}")
    mirror = row.names.get(f"jump {'down' if sign > 0 else 'up'}" if jump else "down" if sign > 0 else "up") or (
        f"jump_{row.key}_{'down' if sign > 0 else 'up'}" if jump else f"{'lower' if sign > 0 else 'raise'}_{row.key}")
    how = (f"{'x' if sign > 0 else '/'}{factor:.3g}" if row.scale == "log" else f"{'+' if sign > 0 else '-'}{factor:g}")
    sized = None if jump else row.size.get(word)
    requires = row.requires.get(word)

    def edit(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
        if jump and not (_answers_diagnosis(answers, ctx) and (stalled_with_signal(ctx) or collapsed(ctx))):
            return None  # a jump only where the evidence says the policy does not move, or collapsed
        if requires is not None and not requires(files, knobs, ctx):
            return None
        if sized is not None:
            return _knob(row.key, lambda k: sized(files, k, ctx))(files, knobs, ctx)
        return _knob(row.key, lambda k: stepped(row, getattr(k, row.key), sign, factor))(files, knobs, ctx)

    return Intervention(
        name, row.priority + (0 if jump else 2) + (0 if sign < 0 else 4), answers, f"harness.yaml:{row.key}",
        way.metric, way.direction, True,
        f"{row.summary or row.key} {'jumps' if jump else 'steps'} {word} ({how}"
        f"{', sized from the evidence' if sized else ''})", way.because, edit,
        moves=f"jump {word}" if jump else word, mirror=mirror)


def _answers_diagnosis(answers: tuple[str, ...], ctx: dict) -> bool:
    d = ctx.get("diagnosis")
    return d is not None and d.failure_mode in answers


def _categorical(row: Knob, value, way: Way) -> Intervention:
    name = row.names.get(value) or f"{row.key}_to_{value}"
    others = [v for v in row.values if v != value]
    everything = set(row.values) == set(choices(row.key))  # a move to every value: the other is the way back
    mirror = row.names.get(others[0]) or f"{row.key}_to_{others[0]}" if everything and len(others) == 1 else ""
    return Intervention(
        name, row.priority + list(row.values).index(value), way.answers, f"harness.yaml:{row.key}", way.metric,
        way.direction, True, f"{row.summary or row.key} turns {'on' if value else 'off'}" if isinstance(value, bool)
        else f"{row.summary or row.key} becomes {value}", way.because,
        _knob(row.key, lambda k: value), moves=f"to {str(value).lower()}", mirror=mirror,
        no_mirror="" if mirror else row.no_mirror)


def choices(key: str) -> tuple:
    """The values the Knobs schema allows a categorical knob (its Literal's, or a bool's two)."""
    annotation = Knobs.model_fields[key].annotation
    return (True, False) if annotation is bool else get_args(annotation)


def knob_moves(rows: dict[str, Knob]) -> list[Intervention]:
    """The moves :data:`KNOBS` defines: a step up and down for each numeric knob, a jump each way where it has a
    jump factor, a move to each value a categorical knob's mechanisms ask for."""
    out = []
    for row in rows.values():
        if row.values:
            out += [_categorical(row, value, way) for value, way in row.values.items()]
            continue
        out += [_numeric(row, sign, False) for sign in (+1, -1)]
        if row.jump:
            out += [_numeric(row, sign, True) for sign in (+1, -1)]
    return out


MAX_BUDGET = 4096  # the most completion tokens the budget move asks for


def _fits(ctx: dict) -> int:
    """The smallest power of two holding what 99% of the dev evaluation's ended completions needed (``UNCUT_LENGTH``:
    measured at the evaluator's own budget, which does not cut them), now or for the starting policy; 0 unknown."""
    uncut = cited(ctx).get(UNCUT_LENGTH, 0)
    return 2 ** math.ceil(math.log2(uncut)) if uncut >= 1 else 0


def _raise_budget(files: Files, knobs: Knobs, ctx: dict) -> int | None:
    """A completion budget that fits the answers: ``_fits``, and at least double the current budget (doubling alone
    creeps: a budget of 2 doubled to 4 still cuts every five-token answer, and a trial of a budget that still cuts
    shows little); at most ``MAX_BUDGET``, never lowering one above it."""
    raised = min(max(knobs.max_completion_length * 2, _fits(ctx)), MAX_BUDGET)
    return raised if raised > knobs.max_completion_length else None


def _lower_budget(files: Files, knobs: Knobs, ctx: dict) -> int | None:
    """A budget that holds long completions back: twice what 99% of the ended completions need (``_fits``: room for
    them, none for rambling), where the evidence says; else half the current one. Not below what they need."""
    fits = _fits(ctx)
    lowered = 2 * fits if fits else knobs.max_completion_length // 2
    return lowered if 1 <= lowered < knobs.max_completion_length else None


def _multi_turn(files: Files, knobs: Knobs, ctx: dict) -> bool:
    """The harness trains multi-turn rollouts: harness.yaml sets a turn cap (a single-turn harness has none)."""
    return knobs.max_turns is not None


def _lower_turns(files: Files, knobs: Knobs, ctx: dict) -> int | None:
    """A turn cap with room for the calls right answers make and the answer (``CALLS_NEEDED``, the most calls the
    levels' verified-correct rollouts make, plus one turn), where the diagnosis cites it; else one turn less. Never
    below that room, nor 0."""
    needed = cited(ctx).get(CALLS_NEEDED)
    lowered = math.ceil(needed) + 1 if needed is not None else knobs.max_turns - 1
    return lowered if 1 <= lowered < knobs.max_turns else None


def _toward_eval_budget(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    """The training budget set to the evaluator's (``EVALUATOR_BUDGET``, cited by a train_eval_mismatch diagnosis):
    training then rewards only what the evaluator can read."""
    budget = cited(ctx).get(EVALUATOR_BUDGET)
    return _knob("max_completion_length", lambda k: int(budget) if budget else None)(files, knobs, ctx)


def _toward_one(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    """Temperature one step toward 1 (sampling the policy's own distribution), not past it."""
    t, step = knobs.temperature, KNOBS["temperature"].step
    return _knob("temperature", lambda k: None if t == 1 else round(min(t + step, 1.0) if t < 1 else
                                                                      max(t - step, 1.0), 6))(files, knobs, ctx)


_CATEGORICAL_BACK = ("categorical: the way back to the value it replaced is undo:<its promotion> (no failure mode's "
                     "mechanism asks for {})")

KNOBS: dict[str, Knob] = {row.key: row for row in [
    Knob("learning_rate", 75, summary="the learning rate", step=HALF_DECADE, jump=DECADE_AND_HALF,
         up=Way(("policy_stalled",), "verified_rate", "up", "the step is too small to change what the policy "
                "answers: learning rates are searched on a log grid"),
         down=Way(OVERSTEP, "verified_rate", "up", "the step overshoots: each update moves the policy further than "
                  "its noisy advantage estimate justifies (learning rates are searched on a log grid)")),
    Knob("temperature", 90, summary="the sampling temperature", scale="add", step=0.25,
         up=Way(("dead_groups", "entropy_collapse", "policy_stalled"), "dead_group_ratio", "down",
                "more diverse samples split more groups, so more of them carry advantage"),
         down=Way(("format_failures",), "format_failure_rate", "down", "hot samples garble the answer's form, "
                  "which the greedy evaluator never sees")),
    Knob("group_size", 100, summary="the group size", step=2, integer=True,
         up=Way(("dead_groups",), "dead_group_ratio", "down", "a larger group is more likely to hold both outcomes"),
         down=Way((), "dead_group_ratio", "up", "a smaller group costs less generation (no failure mode asks for "
                  "it: the mirror of raise_group_size)")),
    Knob("max_completion_length", 80, summary="the completion budget", step=2, integer=True,
         size={"up": _raise_budget, "down": _lower_budget},
         up=Way(("correct_but_truncated", "truncation"), "truncation_rate", "down",
                "completions are being cut before they end"),
         down=Way(("length_growth",), "completion_tokens_mean", "down", "completions grow far past what an answer "
                  "needs, and a budget with room only for that holds them back")),
    Knob("max_turns", 85, summary="the turn cap", scale="add", step=1, integer=True,
         requires={"up": _multi_turn, "down": _multi_turn}, size={"down": _lower_turns},
         up=Way(("turn_cap_hit",), "turn_cap_rate", "down", "rollouts the cap stops while they still call the tool "
                "end without an answer: each turn more is one more call, or the answer (one turn at a time: a turn "
                "is a whole call)"),
         down=Way(("tool_spam",), "needless_call_share", "down", "a cap with room for the calls right answers make "
                  "and the answer leaves no turn for needless ones")),
    Knob("loss_type", 110, summary="the loss",
         values={"dr_grpo": Way(("length_growth",), "completion_tokens_mean", "down",
                                "normalising by each completion's length penalises a long wrong completion less per "
                                "token, which rewards rambling (Dr. GRPO drops it)"),
                 "dapo": Way(("length_growth",), "completion_tokens_mean", "down",
                             "a token-level loss weighs every token alike, so a long completion's tokens are not "
                             "discounted by its length (DAPO)")},
         no_mirror=_CATEGORICAL_BACK.format("per-sequence normalisation (grpo) or bnpo")),
    Knob("beta", 130, summary="the KL coefficient", step=HALF_DECADE, jump=DECADE_AND_HALF, onset=0.04,
         up=Way(OVERSTEP, "verified_rate", "up", "a KL term to the reference policy holds each update near what the "
                "policy could do (onset 0.04, the GRPO paper's coefficient)"),
         down=Way(("policy_stalled",), "verified_rate", "up", "the KL term holds the policy at the reference so it "
                  "cannot move")),
    Knob("max_grad_norm", 140, summary="the gradient clipping norm", step=HALF_DECADE, jump=DECADE_AND_HALF,
         up=Way(("policy_stalled",), "verified_rate", "up", "a norm that clips every step shrinks the update"),
         down=Way(("training_decline", "entropy_collapse"), "verified_rate", "up", "a tighter clip bounds how far "
                  "one noisy batch moves the policy")),
    Knob("updates_per_batch", 150, summary="the updates per generated batch", step=2, jump=4, integer=True,
         up=Way(("policy_stalled",), "verified_rate", "up", "each generated batch then moves the policy more"),
         down=Way(("training_decline", "entropy_collapse"), "verified_rate", "up", "reusing a batch for many "
                  "updates moves the policy past what its advantages were measured on")),
    Knob("warmup_steps", 160, summary="the learning-rate warm-up", step=HALF_DECADE, onset=10, integer=True,
         up=Way(("training_decline", "entropy_collapse"), "verified_rate", "up", "the first updates, on optimizer "
                "statistics not yet settled, overshoot at the full rate (onset 10 steps)"),
         down=Way(("policy_stalled",), "verified_rate", "up", "a long warm-up keeps the rate near zero")),
    Knob("lr_schedule", 170, summary="the learning-rate schedule",
         values={"constant": Way(("policy_stalled",), "verified_rate", "up", "a decaying schedule has brought the "
                                 "rate down to where the policy no longer moves"),
                 "cosine": Way(("training_decline", "accuracy_regression"), "verified_rate", "up",
                               "a rate that decays over the run overshoots less as the policy nears what it can do"),
                 "linear": Way(("training_decline", "accuracy_regression"), "verified_rate", "up",
                               "a rate that decays over the run overshoots less as the policy nears what it can do")},
         no_mirror="categorical: each schedule is a move of its own, the way back to any of them"),
    Knob("scale_rewards", 180, summary="the advantage scaling",
         values={"group": Way(("policy_stalled",), "verified_rate", "up", "without per-group scaling, groups whose "
                              "rewards differ little give advantages too small to move the policy"),
                 "batch": Way(("training_decline", "entropy_collapse"), "verified_rate", "up",
                              "per-group scaling blows a group where one rollout differs up to a unit advantage: "
                              "large, noisy updates; the batch's scale keeps them in proportion")},
         no_mirror=_CATEGORICAL_BACK.format("unscaled advantages (none)")),
    Knob("epsilon", 190, summary="the lower clip", step=2 ** 0.5,
         up=Way(("policy_stalled",), "verified_rate", "up", "a tight clip stops the policy ratio from moving"),
         down=Way(("training_decline",), "verified_rate", "up", "a tighter clip bounds each reused batch's update")),
    Knob("epsilon_high", 195, summary="the upper clip", step=2 ** 0.5,
         up=Way(("entropy_collapse", "policy_stalled"), "verified_rate", "up", "a higher upper clip lets "
                "low-probability tokens rise, which keeps the policy exploring (DAPO's clip-higher)"),
         down=Way(("training_decline",), "verified_rate", "up", "a tighter clip bounds each reused batch's update")),
    Knob("weight_decay", 200, summary="the weight decay", step=HALF_DECADE, onset=0.01,
         up=Way((), "verified_rate", "up", "a decay pulls the weights toward zero (onset 0.01, AdamW's usual; no "
                "failure mode asks for it: the mirror of lower_weight_decay)"),
         down=Way(("training_decline", "accuracy_regression"), "verified_rate", "up", "a decay pulls the weights "
                  "away from what the policy knew at every step, reward or not")),
    Knob("oversample", 210, summary="the refill budget (oversample)", step=2, integer=True,
         requires={"up": lambda files, k, ctx: not same_function(files.get("filters.py") or "", "keep_group",
                                                                 KEEP_ALL["keep_group"])},
         up=Way(("over_filtering", "diluted_batch"), "kept_fraction", "up", "generating more groups refills the "
                "batch with those the filter keeps (only with a keep_group that drops groups)"),
         down=Way((), "kept_fraction", "down", "fewer groups generated cost less (no failure mode asks for it: the "
                  "mirror of raise_oversample)")),
    Knob("mask_truncated_completions", 60, summary="masking of truncated completions",
         values={True: Way(("truncation", "length_growth"), "trained_truncated_rate", "down",
                           "a cut completion's reward says little about its tokens"),
                 False: Way(("over_filtering", "correct_but_truncated"), "kept_fraction", "up",
                            "masking drops every cut completion from the loss, right answers cut at the budget "
                            "and all")},
         names={True: "mask_truncated", False: "unmask_truncated"}),
]}


# two moves to a fixed point, answering train_eval_mismatch: what trains is not what is evaluated
FIXED_POINTS = [
    Intervention(
        "budget_toward_eval", 84, ("train_eval_mismatch",), "harness.yaml:max_completion_length",
        "truncation_rate", "down", True, "the completion budget becomes the evaluator's",
        "training rewards answers the evaluator's budget cuts, or cuts answers the evaluator reads",
        _toward_eval_budget, moves="to the evaluator's",
        no_mirror="a fixed point (the evaluator's budget); raise_ and lower_max_completion_length move away from it"),
    Intervention(
        "temperature_toward_one", 94, ("train_eval_mismatch",), "harness.yaml:temperature", "verified_rate", "up",
        True, "the sampling temperature steps toward 1 (the policy's own distribution)",
        "samples far from the policy's own distribution train answers the evaluator never sees",
        _toward_one, moves="toward 1",
        no_mirror="a fixed point (the policy's own distribution); raise_ and lower_temperature move away from it"),
]
KNOB_MOVES: list[Intervention] = knob_moves(KNOBS) + FIXED_POINTS


if __name__ == "__main__":
    for move in KNOB_MOVES:
        print(f"{move.name:30} {move.moves:18} {move.mirror or '(' + move.no_mirror + ')'}")
