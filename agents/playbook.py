"""The Engineer's built-in playbook: single-variable harness edits, each answering some failure modes.

Every intervention knows which failure modes it answers, the one variable it changes, the metric it should
move (and which way), whether that metric can be judged on retained rollouts or needs a short pilot run, and
how to write the edit into the harness files. Edits are made as text changes that keep the rest of each file
(comments included) as it was, so the candidate's diff shows exactly the one change. Applied interventions
leave an ``# intervention: NAME`` marker so the Engineer does not apply one twice.

This module holds what any domain can use: the :class:`Intervention` type, the text editors, and the generic
interventions (group filter, curriculum, truncation, RL knobs). Interventions that know a domain's answer
format live in ``agents/domains/<domain>.py`` (a module-level
``INTERVENTIONS`` list built from the pieces here); :func:`for_domain` imports it lazily and merges both lists by
``priority``, so ``evotrainer`` never imports ``agents`` and a new domain needs no edit here. The harness files
these edits write to, and what their code may rely on, are described in ``harness_repo/README.md``.

Try it alone::

    python -c "from agents.playbook import for_domain; print([i.name for i in for_domain('math')])"
"""

from __future__ import annotations

import ast
import importlib
import math
import re
from dataclasses import dataclass
from typing import Callable

from agents.diagnostician import THRESHOLDS, UNCUT_LENGTH
from agents.roles import OVERSHOOT_MODES
from evotrainer.contracts import Diagnosis
from evotrainer.harness.knobs import Knobs

Files = dict[str, str]


@dataclass(frozen=True)
class Intervention:
    name: str
    priority: int  # place in the Engineer's fallback order, lower first, across generic and domain interventions
    answers: tuple[str, ...]
    variable: str  # ending in ".*": the one variable the edit's diff changes (the evidence picks the target)
    target_metric: str
    direction: str
    needs_pilot: bool
    summary: str
    because: str
    edit: Callable[[Files, Knobs, dict], Files | None]  # None = not applicable to these files
    # True when the evidence shows the harness causes the diagnosis in a way this edit undoes (so it goes ahead of
    # the playbook's order for it: a cause before shaping that would mask its symptom); same arguments as ``edit``
    cause: Callable[[Files, Knobs, dict], bool] | None = None

    def hypothesis(self, d: Diagnosis) -> str:
        return (f"If {self.summary}, {self.target_metric} goes {self.direction}, because {self.because} "
                f"(diagnosis: {d.failure_mode})")


def layer_of(variable: str) -> str:
    """The harness layer a variable belongs to: rewards, filters, curriculum, prompt, diagnostics or knobs.

    ``filters.keep_group`` -> filters; ``harness.yaml:curriculum_weights`` -> curriculum; ``harness.yaml:temperature``
    -> knobs. Escalation (a stall) asks the Engineer for a layer not edited during the stall.
    """
    file, _, key = variable.partition(":") if ":" in variable else (variable.split(".")[0], "", "")
    if file in ("harness.yaml", "harness"):
        return {"curriculum_weights": "curriculum", "reward_weights": "rewards",
                "mask_truncated_completions": "filters"}.get(key, "knobs")
    return file.removesuffix(".py")


# --- text-editing helpers ------------------------------------------------------------------------------------
def marker(name: str) -> str:
    return f"# intervention: {name}"


def replace_function(source: str, func: str, new_def: str) -> str:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == func:
            lines = source.splitlines(keepends=True)
            start = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
            return "".join(lines[:start]) + new_def.rstrip("\n") + "\n" + "".join(lines[node.end_lineno:])
    raise ValueError(f"no function {func!r} to replace")


def components_node(tree: ast.Module) -> ast.Assign | None:
    """rewards.py's top-level ``COMPONENTS = ...`` assignment, or None."""
    return next((node for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "COMPONENTS" for t in node.targets)), None)


def add_component(source: str, name: str, func_src: str) -> str:
    """Insert a reward component before ``COMPONENTS = {...}`` and register it there."""
    node = components_node(ast.parse(source))
    if node is None:
        raise ValueError("rewards.py has no COMPONENTS dict")
    if not isinstance(node.value, ast.Dict):
        raise ValueError("COMPONENTS is not a dict literal")
    keys = [ast.literal_eval(k) for k in node.value.keys]
    names = [ast.get_source_segment(source, v) for v in node.value.values]
    entries = ", ".join(f'"{k}": {v}' for k, v in zip(keys + [name], names + [func_src_name(func_src)]))
    lines = source.splitlines(keepends=True)
    before = "".join(lines[: node.lineno - 1])
    after = "".join(lines[node.end_lineno:])
    return before + func_src.rstrip("\n") + "\n\n\n" + f"COMPONENTS = {{{entries}}}\n" + after


def func_src_name(func_src: str) -> str:
    return re.search(r"def (\w+)\(", func_src).group(1)


def set_yaml_scalar(text: str, key: str, value: str) -> str:
    """Set a top-level ``key: value`` line, keeping its comment."""
    pat = re.compile(rf"^({re.escape(key)}:\s*)([^#\n]*?)(\s*#.*)?$", re.M)
    if not pat.search(text):
        return text.rstrip("\n") + f"\n{key}: {value}\n"
    return pat.sub(lambda m: f"{m.group(1)}{value}{m.group(3) or ''}", text, count=1)


def set_yaml_entry(text: str, section: str, key: str, value: str) -> str:
    """Set ``key: value`` inside a top-level mapping ``section`` (two-space indented), keeping other lines."""
    lines = text.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if re.match(rf"^{re.escape(section)}:", ln))
    except StopIteration:
        return text.rstrip("\n") + f"\n{section}:\n  {key}: {value}\n"
    end = start + 1
    while end < len(lines) and (lines[end].startswith("  ") or not lines[end].strip()):
        end += 1
    qkey = f'"{key}"' if key.isdigit() else key
    for i in range(start + 1, end):
        m = re.match(r"^  (\"?)([^\":]+)\1:\s*([^#]*?)(\s*#.*)?$", lines[i])
        if m and m.group(2) == key:
            lines[i] = f"  {m.group(1)}{key}{m.group(1)}: {value}{m.group(4) or ''}"
            return "\n".join(lines) + "\n"
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    lines.insert(end, f"  {qkey}: {value}")
    return "\n".join(lines) + "\n"


def _fmt(x: float) -> str:
    return f"{x:.6g}"


# --- the interventions ---------------------------------------------------------------------------------------
def _drops_flat_groups(src: str) -> bool:
    """Whether filters.py's keep_group is already one of the playbook's: it drops groups without reward spread."""
    return marker("drop_zero_variance_groups") in src or marker("dynamic_sampling") in src


def _spread_filter(src: str, intervention: str, *why: str) -> str:
    """filters.py with keep_group dropping groups whose rewards are all equal, marked as ``intervention`` and
    explained by the comment lines ``why``."""
    comments = "".join(f"    # {line}\n" for line in why)
    return replace_function(src, "keep_group", f'''def keep_group(group: list[dict]) -> bool:
    {marker(intervention)}
{comments}    rewards = [r["reward"] for r in group]
    return max(rewards) - min(rewards) > 1e-6
''')


def _drop_zero_variance(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    src = files["filters.py"]
    if _drops_flat_groups(src):
        return None  # main's filter already drops those groups (dynamic sampling's does, with its refill)
    return {"filters.py": _spread_filter(src, "drop_zero_variance_groups",
                                         "a group whose rewards are all equal has zero GRPO advantage: it only "
                                         "dilutes the loss")}


def _dynamic_sampling(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    """DAPO's dynamic sampling: groups without reward spread stop training and the step generates twice the prompts
    to refill the batch with groups that carry signal. One variable (``filters.keep_group`` covers the refill
    budget ``harness.yaml:oversample``); when main's filter already drops those groups, only the budget changes."""
    if knobs.oversample > 1:
        return None
    out = {"harness.yaml": set_yaml_scalar(files["harness.yaml"], "oversample", "2")}
    if not _drops_flat_groups(files["filters.py"]):
        out["filters.py"] = _spread_filter(
            files["filters.py"], "dynamic_sampling",
            "a group whose rewards are all equal has zero GRPO advantage; with harness.yaml's oversample: 2 the "
            "trainer", "refills the batch with groups that carry signal")
    return out


def reward_component(name: str, weight: float, func_src: str, intervention: str):
    """An edit that adds the reward component ``func_src`` to rewards.py with ``weight`` in harness.yaml."""

    def edit(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
        if marker(intervention) in files["rewards.py"] or name in knobs.reward_weights:
            return None
        return {
            "rewards.py": add_component(files["rewards.py"], name, func_src),
            "harness.yaml": set_yaml_entry(files["harness.yaml"], "reward_weights", name, _fmt(weight)),
        }

    return edit


_OVERLONG = f'''def overlong(sample: dict) -> float:
    """-1 for a completion cut at the length budget, else 0."""
    {marker("overlong_penalty")}
    return -1.0 if sample["truncated"] else 0.0
'''


def _mask_truncated(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    if knobs.mask_truncated_completions:
        return None
    return {"harness.yaml": set_yaml_scalar(files["harness.yaml"], "mask_truncated_completions", "true")}


def _reweight_curriculum(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    levels = ctx.get("level_stats") or {}
    if not levels:
        return None
    text = files["harness.yaml"]
    changed = False
    new_weights = {level: round(max(0.1, 1.0 - st["dead_group_ratio"]), 2) for level, st in levels.items()}
    # A level the phase never sampled (its weight was 0) gave no evidence that it is dead: it gets the prior weight
    # of 1.0 so the next phase finds out. Rescaling only the sampled levels would leave a zero weight at zero.
    new_weights.update({level: 1.0 for level in knobs.curriculum_weights if level not in levels})
    for level, new in sorted(new_weights.items()):
        old = knobs.curriculum_weights.get(level, 1.0)
        if abs(new - old) >= 0.1:
            text = set_yaml_entry(text, "curriculum_weights", level, _fmt(new))
            changed = True
    return {"harness.yaml": text} if changed else None


def _withheld_levels(files: Files, knobs: Knobs, ctx: dict) -> bool:
    """The curriculum withholds levels: the harness names levels the phase never sampled (weight 0), while every
    level it did sample has dead groups beyond the Diagnostician's threshold, so the dead groups come from what the
    curriculum picks."""
    levels = ctx.get("level_stats") or {}
    withheld = [lv for lv, w in knobs.curriculum_weights.items() if w <= 0 and lv not in levels]
    dead = [st["dead_group_ratio"] for st in levels.values()]
    return bool(withheld) and bool(dead) and min(dead) > THRESHOLDS["dead_group_ratio"]


def _knob(key: str, compute: Callable[[Knobs], float | int | str | None]):
    def edit(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
        value = compute(knobs)
        if value is None or value == getattr(knobs, key):
            return None
        text = value if isinstance(value, str) else _fmt(value)
        return {"harness.yaml": set_yaml_scalar(files["harness.yaml"], key, text)}

    return edit


def cited(ctx: dict) -> dict[str, float]:
    """The figures the diagnosis an edit answers cites (``ctx["diagnosis"]``), by evidence name; none without one."""
    d = ctx.get("diagnosis")
    return {e.name: e.value for e in (d.evidence if d else [])}


COLLAPSE = 0.25  # a fall of this share of the best earlier dev accuracy, or more, is a collapse, not a regression


def _tenfold_lower(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    """A tenfold lower learning rate, for a collapse: the diagnosis's dev accuracy drop is at least ``COLLAPSE`` of
    the accuracy it fell from (a smaller regression gets halving, ``lower_learning_rate``); and for training that
    makes the policy worse on an unchanged harness (``training_decline``) or grow certain without reward
    (``entropy_collapse``), whose size says nothing about how far the step overshoots: halving and the tenfold move
    are both tried, and the trial decides."""
    d = ctx.get("diagnosis")
    if d is not None and d.failure_mode in OVERSHOOT_MODES:
        return _knob("learning_rate", lambda k: k.learning_rate / 10)(files, knobs, ctx)
    seen = cited(ctx)
    drop, before = seen.get("dev_accuracy_drop"), seen.get("dev_accuracy_before")
    if drop is None or not before or drop < COLLAPSE * before:
        return None
    return _knob("learning_rate", lambda k: k.learning_rate / 10)(files, knobs, ctx)


MAX_BUDGET = 4096  # the most completion tokens the budget move asks for


def _raise_budget(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    """A completion budget that fits the answers: the smallest power of two holding what 99% of the dev
    evaluation's ended completions needed, now or for the starting policy, whichever is longer (``UNCUT_LENGTH``,
    measured at the evaluator's own budget, which does not cut them), and at least double the current budget.
    Doubling alone creeps: a budget of 2 doubled to 4 still cuts every five-token answer, and a trial of a budget
    that still cuts shows little."""
    uncut = cited(ctx).get(UNCUT_LENGTH, 0)
    fits = 2 ** math.ceil(math.log2(uncut)) if uncut >= 1 else 0

    def budget(k: Knobs) -> int | None:
        raised = min(max(k.max_completion_length * 2, fits), MAX_BUDGET)
        return raised if raised > k.max_completion_length else None  # never lowers a budget above MAX_BUDGET

    return _knob("max_completion_length", budget)(files, knobs, ctx)


# Generic interventions. Priorities leave gaps of 10 so a domain's own interventions slot in between them
# (math: partial_credit_reward 20, format_reward 40, numeric_answer_match 50).
GENERIC: list[Intervention] = [
    Intervention(
        "drop_zero_variance_groups", 10, ("diluted_batch", "dead_groups"), "filters.keep_group",
        "kept_dead_ratio", "down", False, "groups whose rewards are all equal stop training",
        "such groups carry zero advantage and only dilute the per-sequence loss", _drop_zero_variance),
    Intervention(
        "dynamic_sampling", 15, ("diluted_batch", "dead_groups"), "filters.keep_group", "kept_dead_ratio", "down",
        True, "groups without reward spread stop training and each step samples twice the prompts to refill the "
        "batch", "every trained slot then carries signal, where a dead group carries none (DAPO)", _dynamic_sampling),
    Intervention(
        "reweight_curriculum", 30, ("dead_groups",), "harness.yaml:curriculum_weights", "dead_group_ratio",
        "down", False, "levels are sampled in proportion to their share of groups with reward spread (a level "
        "the phase never sampled gets weight 1.0)", "levels that are all solved or all failed give no GRPO signal, and "
        "a level never sampled cannot be judged", _reweight_curriculum, cause=_withheld_levels),
    Intervention(
        "mask_truncated", 60, ("truncation", "length_growth"), "harness.yaml:mask_truncated_completions",
        "trained_truncated_rate", "down", False, "truncated completions are masked out of the loss",
        "a cut completion's reward says little about its tokens", _mask_truncated),
    Intervention(
        "overlong_penalty", 70, ("truncation", "length_growth"), "rewards.overlong", "truncated_advantage",
        "down", False, "a completion cut at the length budget is penalised",
        "the policy then gains by ending its answers", reward_component("overlong", 0.5, _OVERLONG,
                                                                           "overlong_penalty")),
    Intervention(
        "raise_max_completion_length", 80, ("correct_but_truncated", "truncation"),
        "harness.yaml:max_completion_length", "truncation_rate", "down", True,
        "the completion budget rises to fit what the policy writes when it is not cut (at least doubling)",
        "completions are being cut before they end", _raise_budget),
    Intervention(
        "raise_temperature", 90, ("dead_groups",), "harness.yaml:temperature", "dead_group_ratio", "down", True,
        "sampling temperature rises by 0.3", "more diverse samples split more groups",
        _knob("temperature", lambda k: round(min(k.temperature + 0.3, 1.6), 2) if k.temperature < 1.6 else None)),
    Intervention(
        "larger_groups", 100, ("dead_groups",), "harness.yaml:group_size", "dead_group_ratio", "down", True,
        "the group size doubles", "a larger group is more likely to contain both outcomes",
        _knob("group_size", lambda k: min(k.group_size * 2, 16) if k.group_size < 16 else None)),
    Intervention(
        "dr_grpo_loss", 110, ("length_growth",), "harness.yaml:loss_type", "completion_tokens_mean", "down", True,
        "the loss switches to Dr. GRPO (no per-sequence length normalisation)",
        "normalising by each completion's length penalises a long wrong completion less per token, which "
        "rewards rambling", _knob("loss_type", lambda k: "dr_grpo" if k.loss_type == "grpo" else None)),
    Intervention(
        "lower_learning_rate", 120, ("accuracy_regression", "edit_regression", "training_decline", "entropy_collapse"),
        "harness.yaml:learning_rate", "verified_rate", "up", True, "the learning rate halves",
        "the last phase overshot", _knob("learning_rate", lambda k: k.learning_rate / 2)),
    Intervention(
        "learning_rate_tenfold_lower", 115, ("accuracy_regression", "training_decline", "entropy_collapse"),
        "harness.yaml:learning_rate", "verified_rate", "up", True, "the learning rate drops tenfold",
        f"a phase that lost a large share of dev accuracy (a collapse, {COLLAPSE:.0%} or more of the best earlier "
        "accuracy), training that makes the policy worse on an unchanged harness, or a policy growing certain "
        "without reward, may overshoot by far more than "
        "a factor of two; halving would leave it unstable for another phase (learning rates are searched on a log "
        "scale)", _tenfold_lower),
]


# --- the public API ------------------------------------------------------------------------------------------
def for_domain(domain: str) -> list[Intervention]:
    """The generic interventions plus ``agents.domains.<domain>.INTERVENTIONS``, by priority.

    A domain without an interventions module gets the generic ones only. Names must be unique across both.
    """
    if not domain.isidentifier():
        raise ValueError(f"bad domain name {domain!r}")
    module_name = f"agents.domains.{domain}"
    try:
        own = list(importlib.import_module(module_name).INTERVENTIONS)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise  # the module exists but one of its imports is missing: that is a bug, not "no interventions"
        own = []
    clash = {i.name for i in own} & {i.name for i in GENERIC}
    if clash:
        raise ValueError(f"{module_name} redefines generic interventions {sorted(clash)}")
    return sorted(GENERIC + own, key=lambda i: i.priority)


def repairs_by_mode(domain: str) -> dict[str, list[str]]:
    """Each failure mode the playbook answers -> the interventions that answer it, in the playbook's order: the
    names a diagnosis must carry for the built-in Engineer, the Critic's ranking and the resume rules to act on it
    (an LLM Diagnostician is told them)."""
    modes: dict[str, list[str]] = {}
    for i in for_domain(domain):
        for mode in i.answers:
            modes.setdefault(mode, []).append(i.name)
    return dict(sorted(modes.items()))


def find(domain: str, name: str) -> Intervention | None:
    """The intervention called ``name`` among :func:`for_domain`'s, or None."""
    return next((i for i in for_domain(domain) if i.name == name), None)
