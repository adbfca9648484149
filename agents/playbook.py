"""The Engineer's built-in playbook: single-variable harness moves, each answering some failure modes.

Every move knows which failure modes it answers (``agents/modes.py`` registers them; a test holds that each has a
move), the one variable it changes, what it does to that variable (``moves``: up, down, a jump, to a value, back
to neutral, removed, undone), its mirror (the move back the other way) or a stated reason why it has none, the metric
it should move (and which way), whether that metric can be judged on retained rollouts or needs a training run
(``needs_pilot``), and how to write the edit into the harness files. Edits are text changes that keep the rest of
each file (comments included) as it was, so the candidate's diff shows exactly the one change. Applied code edits
leave an ``# intervention: NAME`` marker.

Five kinds of moves, none carrying a constant of a catalogued defect or of a seed harness (``tests/test_moves.py``):

* **Knob moves** (``agents/knob_moves.py``: one table row per harness.yaml knob, ``KNOBS``, generates them). A
  numeric knob steps up and down on its natural scale and, where the table gives one, jumps further when the
  evidence says the policy does not move at all (``policy_stalled`` with a signal the step does not follow) or
  collapsed (an overshoot mode, or at least ``COLLAPSE`` of the dev accuracy it had lost). Categorical knobs move to
  each value a failure mode's mechanism asks for. A move outside the Knobs validator's bounds is not applicable.

      knob                  scale           step        jump       mirror / reason
      learning_rate         log             x10^0.5     x10^1.5    lower_ / raise_, jump_*_down / jump_*_up
      max_grad_norm         log             x10^0.5     x10^1.5    (the same)
      beta                  log, 0 = off    x10^0.5     x10^1.5    onset 0.04 from off (the GRPO paper's)
      weight_decay          log, 0 = off    x10^0.5     -          onset 0.01 from off (AdamW's usual)
      warmup_steps          log, 0 = off    x10^0.5     -          onset 10 steps from off
      group_size            log2, integer   x2          -          raise_ / lower_
      updates_per_batch     log2, integer   x2          x4         raise_ / lower_, jumps
      oversample            log2, integer   x2          -          raise_ / lower_ (raising needs a filter that drops)
      epsilon, epsilon_high log2            x2^0.5      -          raise_ / lower_ (only with updates_per_batch > 1)
      temperature           additive        +-0.25      -          raise_ / lower_; temperature_toward_one
      max_completion_length log2, integer   x2, sized   -          raise_: what 99% of ended completions need, at
                            from evidence                          least doubling; lower_: twice that where cited,
                                                                   else half; budget_toward_eval: the evaluator's
      max_turns             additive,       +-1, down   -          raise_ / lower_ (only where harness.yaml sets a
                            integer         sized                  turn cap); lower_: the calls right answers make
                                                                   plus the answer's turn, where cited
      loss_type             categorical     to dr_grpo, to dapo     back: undo (no mode asks for grpo or bnpo)
      scale_rewards         categorical     to group, to batch      back: undo (no mode asks for none)
      lr_schedule           categorical     to constant, cosine, linear   each other's mirror
      mask_truncated_...    boolean         mask_truncated / unmask_truncated   each other's mirror

* **Neutral forms** of the code layers, published by the domain (``evotrainer.domains.neutral``): the evaluator's
  prompt (``canonical_prompt``), keep-all filters (``keep_all_rollouts``, ``keep_all_groups``, ``keep_all_filters``),
  the curriculum code that passes harness.yaml's weights through (``neutral_curriculum_code``) and equal weights
  there (``equal_curriculum_weights``). Not applicable where the file is already neutral.
* **Reward components** in turn (templates, one candidate per component): ``remove_reward:<name>`` (never the last)
  and ``lower_reward_weight:<name>``; plus the shaping and repairs that add or rewrite a component.
* **Undo** any promotion in any phase (template ``undo``: ``undo:<branch>`` for every promoted edit not undone yet):
  the files as they would be without that merge, whatever came after it (``HarnessRepo.taken_out``).
* **Shaping and repair** edits: group filters, dynamic sampling, curriculum reweighting, truncation masking and
  penalties, and the domain's own (``agents/domains/<domain>.py``: reward components that know its answer format).

A template (``expand``) stands for one move per reward component or promotion; the Engineer expands it on the
harness at hand. :func:`for_domain` merges the generic moves, the knob table's, the domain's neutral forms and
``agents.domains.<domain>.INTERVENTIONS`` by ``priority`` (importing the domain's lazily, so ``evotrainer`` never
imports ``agents``); :func:`repairs_by_mode` is the one answer to "which moves answer mode X". The harness files
these edits write to, and what their code may rely on, are described in ``harness_repo/README.md``.

Try it alone::

    python -c "from agents.playbook import repairs_by_mode; print(repairs_by_mode('math'))"
"""

from __future__ import annotations

import ast
import functools
import importlib
from dataclasses import replace

from agents.diagnostician import CREDITS_WRONG, MISSES_RIGHT, THRESHOLDS
from agents.knob_moves import KNOB_MOVES, KNOBS, stepped
from agents.move_kit import (Files, Intervention, add_component, checks_correctness, cited, component_functions,
                             component_names, drop_component, fmt, function_node, marker,
                             remove_yaml_entry, replace_function, same_function, set_yaml_entry, set_yaml_scalar)
from evotrainer.domains.neutral import KEEP_ALL, PASS_THROUGH, forms
from evotrainer.harness.knobs import Knobs

# --- shaping and repair edits ---------------------------------------------------------------------------------
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
    """DAPO's dynamic sampling: groups without reward spread stop training and the step generates more prompts (one
    step of ``oversample``'s scale) to refill the batch with groups that carry signal. One variable
    (``filters.keep_group`` covers the refill budget ``harness.yaml:oversample``); when main's filter already drops
    those groups, only the budget changes."""
    if knobs.oversample > 1:
        return None
    more = stepped(KNOBS["oversample"], knobs.oversample, +1, KNOBS["oversample"].step)
    out = {"harness.yaml": set_yaml_scalar(files["harness.yaml"], "oversample", str(more))}
    if not _drops_flat_groups(files["filters.py"]):
        out["filters.py"] = _spread_filter(
            files["filters.py"], "dynamic_sampling",
            f"a group whose rewards are all equal has zero GRPO advantage; with harness.yaml's oversample: {more} the "
            "trainer", "refills the batch with groups that carry signal")
    return out


def reward_component(name: str, weight: float, func_src: str, intervention: str):
    """An edit that adds the reward component ``func_src`` to rewards.py with ``weight`` in harness.yaml."""

    def edit(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
        if marker(intervention) in files["rewards.py"] or name in knobs.reward_weights:
            return None
        return {
            "rewards.py": add_component(files["rewards.py"], name, func_src),
            "harness.yaml": set_yaml_entry(files["harness.yaml"], "reward_weights", name, fmt(weight)),
        }

    return edit


_OVERLONG = f'''def overlong(sample: dict) -> float:
    """-1 for a completion cut at the length budget, else 0."""
    {marker("overlong_penalty")}
    return -1.0 if sample["truncated"] else 0.0
'''

# --- the curriculum -------------------------------------------------------------------------------------------
RARE = 0.5  # a level sampled at less than this share of an equal split of the phase's rollouts is sampled rarely


def _levels(knobs: Knobs, ctx: dict) -> list[str]:
    """The difficulty levels in play: the domain's (``ctx["levels"]``, when the Engineer gives them), harness.yaml's
    and the phase's."""
    return sorted(set(ctx.get("levels") or ()) | set(knobs.curriculum_weights) | set(ctx.get("level_stats") or {}))


def _starved_levels(files: Files, knobs: Knobs, ctx: dict) -> bool:
    """The curriculum causes the dead groups, by mechanism: every level the phase sampled at least at ``RARE`` of
    an equal share has dead groups beyond the Diagnostician's threshold, while levels it sampled rarely or not at all
    exist (whatever made them rare: zero weights in harness.yaml, or curriculum.py's code)."""
    stats = ctx.get("level_stats") or {}
    levels = _levels(knobs, ctx)
    total = sum(st.get("n", 0) for st in stats.values())
    if len(levels) < 2 or not stats:
        return False
    fair = total / len(levels)
    rare = {lv for lv in levels if lv not in stats or (total and stats[lv].get("n", 0) < RARE * fair)}
    sampled = [st["dead_group_ratio"] for lv, st in stats.items() if lv not in rare]
    return bool(rare) and bool(sampled) and min(sampled) > THRESHOLDS["dead_group_ratio"]


def _reweight_curriculum(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    """Levels weighed by their share of groups with reward spread (at least 0.1, so none falls silent); a level the
    phase never sampled gave no evidence that it is dead, so it weighs as much as the best sampled level (optimism:
    the next phase finds out). Rescaling only the sampled levels would leave a zero weight at zero."""
    levels = ctx.get("level_stats") or {}
    if not levels:
        return None
    text = files["harness.yaml"]
    changed = False
    new_weights = {level: round(max(0.1, 1.0 - st["dead_group_ratio"]), 2) for level, st in levels.items()}
    best = max(new_weights.values())
    new_weights.update({level: best for level in _levels(knobs, ctx) if level not in levels})
    for level, new in sorted(new_weights.items()):
        old = knobs.curriculum_weights.get(level, 1.0)
        if abs(new - old) >= 0.1:
            text = set_yaml_entry(text, "curriculum_weights", level, fmt(new))
            changed = True
    return {"harness.yaml": text} if changed else None


def _equal_weights(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    """harness.yaml's curriculum_weights all equal: each level an equal share (1 / levels), whatever they were."""
    levels = _levels(knobs, ctx)
    if not levels or len({knobs.curriculum_weights.get(lv) for lv in levels}) == 1:
        return None  # already equal (every level named with one weight)
    text = files["harness.yaml"]
    for level in levels:
        text = set_yaml_entry(text, "curriculum_weights", level, fmt(1 / len(levels)))
    return {"harness.yaml": text}


# --- neutral forms of the code layers ---------------------------------------------------------------------------
def with_marker(func_src: str, name: str) -> str:
    """A one-line ``def`` with the intervention's marker as its first body line."""
    head, _, body = func_src.partition("\n")
    return f"{head}\n    {marker(name)}\n{body}"


def to_neutral(file: str, funcs: dict[str, str], name: str):
    """An edit that puts ``funcs`` (function -> neutral source) into ``file`` where they differ; None when the file
    is already neutral, lacks one of them or does not parse."""

    def edit(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
        src = files.get(file)
        if src is None or any(function_node(src, func) is None for func in funcs):
            return None
        out = src
        for func, neutral in funcs.items():
            if not same_function(out, func, neutral):
                out = replace_function(out, func, with_marker(neutral, name))
        return {file: out} if out != src else None

    return edit


def _keep_all_groups(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    """keep_group keeps every group; a refill budget (oversample) then only costs generation, so it goes back to 1
    (off) with it: one variable, the filter and the refill of what it drops."""
    out = to_neutral("filters.py", {"keep_group": KEEP_ALL["keep_group"]}, "keep_all_groups")(files, knobs, ctx)
    if out and knobs.oversample > 1:
        out["harness.yaml"] = set_yaml_scalar(files["harness.yaml"], "oversample", "1")
    return out


def _keep_all_filters(files: Files, knobs: Knobs, ctx: dict, neutral: dict[str, str] = KEEP_ALL) -> Files | None:
    """Both filter functions back to the domain's neutral filters (``neutral``: keep-all, or what the domain publishes),
    only when both filter (else a one-function move does it)."""
    src = files.get("filters.py") or ""
    if any(function_node(src, f) is None or same_function(src, f, s) for f, s in neutral.items()):
        return None
    return to_neutral("filters.py", neutral, "keep_all_filters")(files, knobs, ctx)


def returns_messages(src: str) -> bool:
    """Whether prompt.py's make_prompt returns chat messages (a list) rather than text, read with ast."""
    node = function_node(src, "make_prompt")
    if node is None:
        return False
    if node.returns is not None and "list" in ast.unparse(node.returns).lower():
        return True
    return any(isinstance(n, ast.Return) and isinstance(n.value, (ast.List, ast.ListComp)) for n in ast.walk(node))


def neutral_moves(domain: str) -> list[Intervention]:
    """The moves back to the domain's neutral code (``evotrainer.domains.neutral.forms``): the evaluator's prompt,
    keep-all filters, the pass-through curriculum code. The prompt move needs the domain's published prompts."""
    published = forms(domain)
    filters = published.filters if published else KEEP_ALL
    curriculum = published.curriculum if published else PASS_THROUGH
    out = [
        Intervention(
            "keep_all_rollouts", 22, ("over_filtering",), "filters.keep_rollout", "kept_fraction", "up", False,
            "keep_rollout keeps every rollout (the neutral filter)", "a filter that drops rollouts the update "
            "needs starves it; the neutral filter lets every generated rollout train",
            to_neutral("filters.py", {"keep_rollout": filters["keep_rollout"]}, "keep_all_rollouts"), moves="neutral",
            no_mirror="a move back to a filter is code the evidence writes (a filter or an LLM edit), or undo"),
        Intervention(
            "keep_all_groups", 23, ("over_filtering",), "filters.keep_group", "kept_fraction", "up", False,
            "keep_group keeps every group (the neutral filter)", "a group filter that drops groups the update "
            "needs starves it", _keep_all_groups, moves="neutral",
            no_mirror="drop_zero_variance_groups and dynamic_sampling are the filters evidence asks for; or undo"),
        Intervention(
            "keep_all_filters", 24, ("over_filtering",), "filters.py", "kept_fraction", "up", False,
            "both filters keep everything (the neutral filters.py)", "filters that drop what the update needs "
            "starve it", functools.partial(_keep_all_filters, neutral=filters), moves="neutral",
            no_mirror="as keep_all_rollouts and keep_all_groups"),
        Intervention(
            "neutral_curriculum_code", 32, ("dead_groups", "train_eval_mismatch"),
            "curriculum.weights", "dead_group_ratio", "down", False,
            "curriculum.py passes harness.yaml's curriculum_weights through (the neutral curriculum)",
            "curriculum code that starves levels leaves the update the dead groups of the levels it keeps, and the "
            "levels it withholds untrained", to_neutral("curriculum.py", curriculum, "neutral_curriculum_code"),
            cause=_starved_levels, moves="neutral", no_mirror="curriculum code is what the evidence writes; or undo"),
    ]
    if published:
        def canonical(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
            src = files.get("prompt.py") or ""
            form = published.chat_prompt if returns_messages(src) else published.prompt
            return to_neutral("prompt.py", {"make_prompt": form}, "canonical_prompt")(files, knobs, ctx)

        out.append(Intervention(
            "canonical_prompt", 35, ("train_eval_mismatch", "format_failures"), "prompt.make_prompt",
            "format_failure_rate", "down", True, "training prompts are the evaluator's own (the neutral prompt)",
            "a policy trained on other prompts answers them, not the evaluator's; the answer form the evaluator "
            "reads is the one its own prompt elicits", canonical, moves="neutral",
            no_mirror="a prompt other than the evaluator's is code the evidence writes; or undo"))
    return out


# --- reward components, in turn -------------------------------------------------------------------------------
def _components_in_order(src: str, knobs: Knobs, ctx: dict) -> list[str]:
    """The reward components a move may take out or weigh less, in turn: those the diagnosis names as disagreeing
    with the verifier (most strongly first), then those that check no correctness (shaping: neither the task's answer
    nor the executor's verdict is read, ``move_kit.checks_correctness``). A component that checks correctness and
    that no evidence names is left alone, and so is the last one that checks it: a reward without one cannot tell
    right from wrong."""
    names = component_names(src) or []
    funcs = component_functions(src)
    seen = cited(ctx)
    named = {n.removeprefix(p): v for n, v in seen.items() for p in (CREDITS_WRONG, MISSES_RIGHT)
             if n.startswith(p) and v >= 0.5}
    checks = {c for c in names if c in funcs and checks_correctness(funcs[c])}
    out = [c for c in names if c in named or c not in checks]
    return sorted((c for c in out if checks - {c} or c not in checks), key=lambda c: (-named.get(c, 0.0), c))


def _remove_reward(files: Files, knobs: Knobs, ctx: dict) -> list[Intervention]:
    src = files.get("rewards.py") or ""
    names = component_names(src) or []
    if len(names) < 2:
        return []  # never the last component
    out = []
    for c in _components_in_order(src, knobs, ctx):
        def edit(files: Files, knobs: Knobs, ctx: dict, c: str = c) -> Files | None:
            out = {"rewards.py": drop_component(files["rewards.py"], c)}
            weights = remove_yaml_entry(files["harness.yaml"], "reward_weights", c)  # a weight left would name no
            if weights != files["harness.yaml"]:  # component: harness.yaml fails (a weight not listed is 1.0)
                out["harness.yaml"] = weights
            return out

        out.append(_concrete(REMOVE_REWARD, f"remove_reward:{c}", f"rewards.{c}", edit,
                             f"the reward component {c} is removed"))
    return out


def _lower_reward_weight(files: Files, knobs: Knobs, ctx: dict) -> list[Intervention]:
    src = files.get("rewards.py") or ""
    if len(component_names(src) or []) < 2:
        return []  # a lone component's weight is a constant factor the advantage's scaling divides out
    out = []
    for c in _components_in_order(src, knobs, ctx):
        weight = knobs.reward_weights.get(c, 1.0)
        if weight <= 0:
            continue
        new = weight / REWARD_WEIGHT_STEP

        def edit(files: Files, knobs: Knobs, ctx: dict, c: str = c, new: float = new) -> Files | None:
            return {"harness.yaml": set_yaml_entry(files["harness.yaml"], "reward_weights", c, fmt(new))}

        out.append(_concrete(LOWER_REWARD_WEIGHT, f"lower_reward_weight:{c}", f"rewards.{c}", edit,
                             f"the reward component {c} weighs {fmt(new)} (from {fmt(weight)})"))
    return out


def _concrete(template: Intervention, name: str, variable: str, edit, summary: str, **changes) -> Intervention:
    """One move a template stands for."""
    return replace(template, name=name, variable=variable, edit=edit, summary=summary, expand=None, **changes)


REWARD_WEIGHT_STEP = 10 ** 0.5  # a reward weight steps down on the learning rate's log grid: half a decade

REMOVE_REWARD = Intervention(
    "remove_reward", 55, ("reward_disagreement", "policy_stalled", "length_growth", "train_eval_mismatch"),
    "rewards.*", "reward_verified_auc", "up", False, "a reward component is removed",
    "a component that pays what the verifier does not (or outweighs the one that checks the answer) trains the "
    "policy toward it; without it the reward is nearer the verifier's", lambda files, knobs, ctx: None,
    moves="remove", no_mirror="adding a component is shaping the evidence asks for (its own moves), or undo",
    expand=_remove_reward)
LOWER_REWARD_WEIGHT = Intervention(
    "lower_reward_weight", 57, ("reward_disagreement", "length_growth"), "rewards.*", "reward_verified_auc", "up",
    False, "a reward component weighs less", "a component that disagrees with the verifier then moves the "
    "advantage less", lambda files, knobs, ctx: None, moves="down",
    no_mirror="no failure mode asks for a component to weigh more; undo restores a promoted re-weight",
    expand=_lower_reward_weight)


# --- undo any promotion ------------------------------------------------------------------------------------------
def _undo(files: Files, knobs: Knobs, ctx: dict) -> list[Intervention]:
    """``undo:<branch>`` for every promotion not undone yet (latest first), from ``ctx["repo"]``,
    ``ctx["base_sha"]`` and ``ctx["promotions"]`` (the Engineer's): the files as they would be on the base without
    that merge, whatever came after it (``HarnessRepo.taken_out``); not for an undo itself, a promotion whose
    effect was rolled back, or one git cannot take out."""
    repo, base, promotions = ctx.get("repo"), ctx.get("base_sha"), ctx.get("promotions") or []
    if repo is None or not base:
        return []
    undone = {p.candidate.intervention.removeprefix("undo:") for p in promotions
              if p.candidate.intervention.startswith("undo:")}
    out = []
    cache = ctx.get("cache", {})  # the Engineer's, shared by its diagnoses: one worktree per promotion and base
    for promo in reversed(promotions):
        c = promo.candidate
        if c.intervention.startswith("undo:") or promo.branch in undone or promo.reverted_sha:
            continue
        key = ("taken_out", promo.main_sha, base)
        without = cache[key] if key in cache else cache.setdefault(key, repo.taken_out(promo.main_sha, base))
        if without is None:
            continue
        restored = {f: repo.read(without, f) for f in c.files}
        edits = {f: t for f, t in restored.items() if t is not None and t != repo.read(base, f)}
        if not edits:
            continue

        def edit(files: Files, knobs: Knobs, ctx: dict, edits: dict = edits) -> Files | None:
            return dict(edits)

        out.append(_concrete(
            UNDO, f"undo:{promo.branch}", c.variable, edit, f"{c.variable} goes back to what it was before "
            f"{promo.branch} ({c.intervention})", target_metric=c.target_metric,
            direction="up" if c.direction == "down" else "down",
            because=f"the edit {c.intervention} has not paid off, or is what hurt"))
    return out


UNDO = Intervention(
    "undo", 1, ("edit_regression", "accuracy_regression", "policy_stalled"), "*", "verified_rate", "up", False,
    "a promoted edit is undone", "the policy got worse, or stopped moving, on an edit the loop promoted",
    lambda files, knobs, ctx: None, moves="undo", no_mirror="the undo of an undo is the promotion itself",
    expand=_undo)


# Generic moves. Priorities leave gaps so a domain's own interventions slot in between them (math:
# partial_credit_reward 20, format_reward 40, verifier_aligned_reward 45, numeric_answer_match 50; tools:
# tool_error_cost 42, repeat_call_cost 43; code: verifier_aligned_reward 45).
GENERIC: list[Intervention] = [
    UNDO,
    Intervention(
        "drop_zero_variance_groups", 10, ("diluted_batch", "dead_groups"), "filters.keep_group",
        "kept_dead_ratio", "down", False, "groups whose rewards are all equal stop training",
        "such groups carry zero advantage and only dilute the per-sequence loss", _drop_zero_variance,
        moves="add", no_mirror="keep_all_groups is the way back to the neutral filter"),
    Intervention(
        "dynamic_sampling", 15, ("diluted_batch", "dead_groups"), "filters.keep_group", "kept_dead_ratio", "down",
        True, "groups without reward spread stop training and each step samples more prompts to refill the batch",
        "every trained slot then carries signal, where a dead group carries none (DAPO)", _dynamic_sampling,
        moves="add", no_mirror="keep_all_groups is the way back (it turns the refill off with the filter)"),
    Intervention(
        "reweight_curriculum", 30, ("dead_groups",), "harness.yaml:curriculum_weights", "dead_group_ratio",
        "down", False, "levels are sampled in proportion to their share of groups with reward spread (a level "
        "the phase never sampled weighs as much as the best sampled one)", "levels that are all solved or all "
        "failed give no GRPO signal, and a level never sampled cannot be judged", _reweight_curriculum,
        cause=_starved_levels, moves="by evidence", no_mirror="equal_curriculum_weights is the way back to neutral"),
    Intervention(
        "equal_curriculum_weights", 31, ("dead_groups", "train_eval_mismatch"),
        "harness.yaml:curriculum_weights", "dead_group_ratio", "down", False, "every level weighs the same in "
        "harness.yaml (the neutral curriculum)", "weights that starve levels leave the update the dead groups of "
        "the levels they keep, and the evaluator scores every level alike", _equal_weights, cause=_starved_levels,
        moves="neutral", no_mirror="unequal weights are what the evidence writes (reweight_curriculum); or undo"),
    Intervention(
        "overlong_penalty", 70, ("truncation", "length_growth"), "rewards.overlong", "truncated_advantage",
        "down", False, "a completion cut at the length budget is penalised",
        "the policy then gains by ending its answers", reward_component("overlong", 0.5, _OVERLONG,
                                                                           "overlong_penalty"),
        moves="add", no_mirror="remove_reward:overlong is the way back"),
    REMOVE_REWARD,
    LOWER_REWARD_WEIGHT,
]


# --- the public API ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _merged(domain: str) -> tuple[Intervention, ...]:
    module_name = f"agents.domains.{domain}"
    try:
        own = list(importlib.import_module(module_name).INTERVENTIONS)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise  # the module exists but one of its imports is missing: that is a bug, not "no interventions"
        own = []
    generic = GENERIC + KNOB_MOVES + neutral_moves(domain)
    clash = {i.name for i in own} & {i.name for i in generic}
    if clash:
        raise ValueError(f"{module_name} redefines generic interventions {sorted(clash)}")
    names = [i.name for i in generic + own]
    if len(set(names)) != len(names):
        raise ValueError(f"two moves share a name: {sorted({n for n in names if names.count(n) > 1})}")
    return tuple(sorted(generic + own, key=lambda i: i.priority))


def for_domain(domain: str) -> list[Intervention]:
    """The generic moves, the knob table's, the domain's neutral forms and ``agents.domains.<domain>.INTERVENTIONS``,
    by priority. A domain without an interventions module gets the generic ones only. Names must be unique."""
    if not domain.isidentifier():
        raise ValueError(f"bad domain name {domain!r}")
    return list(_merged(domain))


def repairs_by_mode(domain: str) -> dict[str, list[str]]:
    """Each failure mode the playbook answers -> the moves that answer it, in the playbook's order (a template by
    its name: ``undo``, ``remove_reward`` ...): the names a diagnosis must carry for the built-in Engineer, the
    Critic's ranking and the resume rules to act on it (an LLM Diagnostician is told them)."""
    modes_: dict[str, list[str]] = {}
    for i in for_domain(domain):
        for mode in i.answers:
            modes_.setdefault(mode, []).append(i.name)
    return dict(sorted(modes_.items()))


def find(domain: str, name: str) -> Intervention | None:
    """The move called ``name`` among :func:`for_domain`'s, or None (a template's moves by the template's name)."""
    return next((i for i in for_domain(domain) if i.name == name), None)


def concrete(i: Intervention, files: Files, knobs: Knobs, ctx: dict) -> list[Intervention]:
    """The moves ``i`` stands for on these files: itself, or a template's expansion."""
    return i.expand(files, knobs, ctx) if i.expand else [i]
