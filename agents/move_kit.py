"""The pieces every harness move is built from: the move type, the text editors, and what moves read of the evidence.

A move (:class:`Intervention`) changes one variable of the harness files as a text edit that keeps the rest of each
file as it was. This module holds what the playbook (``agents/playbook.py``), the knob table
(``agents/knob_moves.py``) and a domain's own moves (``agents/domains/<domain>.py``) share, so none of them imports
another to get it: the type, the editors of Python and YAML text, and the readers of a diagnosis's cited figures.

Alone: ``python -c "from agents.move_kit import set_yaml_scalar; print(set_yaml_scalar('a: 1  # x', 'a', '2'))"``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Callable

import agents.modes as modes
from agents.diagnostician import CREDITS_WRONG, MISSES_RIGHT, THRESHOLDS
from evotrainer.contracts import Diagnosis
from evotrainer.harness.knobs import Knobs

Files = dict[str, str]

# evidence the Diagnostician's rules cite that moves size themselves from (agents/diagnostician.py)
EVALUATOR_BUDGET = "evaluator_budget"  # train_eval_mismatch: the evaluator's generation budget, in tokens
ZERO_ADVANTAGE = "zero_advantage_share"  # policy_stalled: the share of the phase's groups without reward spread
STALLED = modes.of_question("stalled")  # the policy does not move: a jump up (or down, for a brake) may be due
OVERSHOOT = modes.of_question("overshoot")  # the update moves the policy the wrong way: a collapse
COLLAPSE = 0.25  # a fall of this share of the best earlier dev accuracy, or more, is a collapse, not a regression


@dataclass(frozen=True)
class Intervention:
    name: str
    priority: int  # place in the Engineer's fallback order, lower first, across generic and domain interventions
    answers: tuple[str, ...]
    variable: str  # ending in ".*": the one variable the edit's diff changes (the evidence picks the target)
    target_metric: str
    direction: str  # which way target_metric should move
    needs_pilot: bool
    summary: str
    because: str
    edit: Callable[[Files, Knobs, dict], Files | None]  # None = not applicable to these files
    # True when the evidence shows the harness causes the diagnosis in a way this edit undoes (so it goes ahead of
    # the playbook's order for it: a cause before shaping that would mask its symptom); same arguments as ``edit``
    cause: Callable[[Files, Knobs, dict], bool] | None = None
    moves: str = ""  # what the edit does to its variable: up, down, jump up, jump down, to <value>, neutral, ...
    mirror: str = ""  # the move that takes the variable back the other way
    no_mirror: str = ""  # why there is none (a knob move needs a mirror or this)
    # a template: the concrete moves it stands for on these files (one per reward component or promotion)
    expand: Callable[[Files, Knobs, dict], list["Intervention"]] | None = None

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


def fmt(x: float) -> str:
    """A number as harness.yaml writes it, read back as a float by YAML (``1.0e-05``, not ``1e-05``)."""
    text = f"{x:.6g}"
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text


def remove_yaml_entry(text: str, section: str, key: str) -> str:
    """``text`` without the ``key: value`` line inside the top-level mapping ``section`` (other lines kept)."""
    lines = text.splitlines()
    inside = False
    for i, line in enumerate(lines):
        if re.match(rf"^{re.escape(section)}:", line):
            inside = True
            continue
        if inside and line.strip() and not line.startswith("  "):
            break
        m = re.match(r"^  (\"?)([^\":]+)\1:", line) if inside else None
        if m and m.group(2) == key:
            return "\n".join(lines[:i] + lines[i + 1:]) + "\n"
    return text


def cited(ctx: dict) -> dict[str, float]:
    """The figures the diagnosis an edit answers cites (``ctx["diagnosis"]``), by evidence name; none without one."""
    d = ctx.get("diagnosis")
    return {e.name: e.value for e in (d.evidence if d else [])}


def collapsed(ctx: dict) -> bool:
    """The evidence says the policy collapsed: the diagnosis is an overshoot (training makes it worse, or certain
    without reward: its size says nothing about how far the step overshoots), or it lost at least ``COLLAPSE`` of
    the dev accuracy it fell from."""
    d = ctx.get("diagnosis")
    if d is None:
        return False
    if d.failure_mode in OVERSHOOT:
        return True
    seen = cited(ctx)
    drop, before = seen.get("dev_accuracy_drop"), seen.get("dev_accuracy_before")
    return drop is not None and bool(before) and drop >= COLLAPSE * before


def stalled_with_signal(ctx: dict) -> bool:
    """The evidence says the policy does not move although the update has a signal to follow: a stall whose groups
    mostly have reward spread (``ZERO_ADVANTAGE`` at most the dead-group threshold; a stall that does not say counts).
    A stall without signal is answered by moves that make signal, not by a larger step."""
    d = ctx.get("diagnosis")
    if d is None or d.failure_mode not in STALLED:
        return False
    zero = cited(ctx).get(ZERO_ADVANTAGE)
    return zero is None or zero <= THRESHOLDS["dead_group_ratio"]


# --- functions of harness code, read with ast -------------------------------------------------------------------
def function_node(source: str, func: str) -> ast.FunctionDef | None:
    """The top-level function ``func`` of ``source``, or None (also when it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func), None)


def _shape(node: ast.FunctionDef) -> tuple:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return [a.arg for a in node.args.posonlyargs + node.args.args], [ast.dump(s) for s in body]


def same_function(source: str, func: str, other: str) -> bool:
    """Whether ``func`` does the same in both sources: the same parameters and body (docstrings, comments and
    annotations aside)."""
    a, b = function_node(source, func), function_node(other, func)
    return a is not None and b is not None and _shape(a) == _shape(b)


def component_functions(src: str) -> dict[str, ast.FunctionDef]:
    """rewards.py's ``COMPONENTS``: component name -> the top-level function it names (entries that are not a plain
    function name are left out); empty when it does not parse."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return {}
    defined = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    node = components_node(tree)
    if node is None or not isinstance(node.value, ast.Dict):
        return {}
    return {k.value: defined[v.id] for k, v in zip(node.value.keys, node.value.values)
            if isinstance(k, ast.Constant) and isinstance(v, ast.Name) and v.id in defined}


def reads_the_answer(func: ast.FunctionDef) -> bool:
    """Whether a component function reads the task's answer (a ``["answer"]`` subscript): it checks correctness."""
    return any(isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "answer"
               for n in ast.walk(func))


def reads_the_execution(func: ast.FunctionDef) -> bool:
    """Whether a component function reads the executor's verdict on the body (``sample["execution"]`` or
    ``sample.get("execution")``): where answers are programs, that is what checks correctness."""
    return any(isinstance(n, ast.Constant) and n.value == "execution" for n in ast.walk(func))


def checks_correctness(func: ast.FunctionDef) -> bool:
    """Whether a component function checks correctness: it reads the task's answer, or the executor's verdict on a
    body (a domain whose answers are run)."""
    return reads_the_answer(func) or reads_the_execution(func)


def disagreeing_component(src: str, knobs: Knobs, ctx: dict, checks: Callable[[ast.FunctionDef], bool],
                          done: str) -> ast.FunctionDef | None:
    """The reward component of rewards.py (``src``) the diagnosis names as disagreeing with the verifier, to rewrite
    in place as the evaluator's rule; None when the evidence names none. Two directions, from the per-component
    evidence: a mostly rewarded-but-wrong disagreement names the components crediting at least half of those rollouts
    (``credits_wrong:<name>``: lenient); a mostly correct-but-unrewarded one those giving at least half of them 0
    (``misses_right:<name>``: strict), and only one that ``checks`` correctness is taken (a format or length
    component that misses right answers is not a correctness check to repair). Weight above 0, not already carrying
    the ``done`` marker; the one the evidence names most strongly."""
    seen = cited(ctx)
    lenient = seen.get("rewarded_but_wrong", 0.0) > seen.get("correct_but_unrewarded", 0.0)
    prefix = CREDITS_WRONG if lenient else MISSES_RIGHT
    funcs = component_functions(src)
    culprits = sorted((value, name.removeprefix(prefix)) for name, value in seen.items()
                      if name.startswith(prefix) and value >= 0.5)
    for _, name in reversed(culprits):
        func = funcs.get(name)
        if func is None or knobs.reward_weights.get(name, 0.0) <= 0 or not (lenient or checks(func)):
            continue
        if marker(done) in ast.get_source_segment(src, func):
            continue  # already rewritten
        return func
    return None


def component_names(src: str) -> list[str] | None:
    """The keys of rewards.py's ``COMPONENTS`` dict literal, in order; None when it is not one."""
    try:
        node = components_node(ast.parse(src))
    except SyntaxError:
        return None
    if node is None or not isinstance(node.value, ast.Dict):
        return None
    return [k.value for k in node.value.keys if isinstance(k, ast.Constant)]


def drop_component(source: str, name: str) -> str:
    """rewards.py with ``name`` taken out of ``COMPONENTS`` (its function stays, unregistered)."""
    node = components_node(ast.parse(source))
    keys = [ast.literal_eval(k) for k in node.value.keys]
    values = [ast.get_source_segment(source, v) for v in node.value.values]
    entries = ", ".join(f'"{k}": {v}' for k, v in zip(keys, values) if k != name)
    lines = source.splitlines(keepends=True)
    return "".join(lines[: node.lineno - 1]) + f"COMPONENTS = {{{entries}}}\n" + "".join(lines[node.end_lineno:])
