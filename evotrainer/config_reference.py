"""The configuration reference, generated from the config's own help text: every key of ``evotrainer/config.py``.

Walks the pydantic models of :class:`evotrainer.config.Config` (and the sections nested in it: ``policy.tiny``,
``sandbox.limits``, ``agents.*``, ...) and prints Markdown: one table per section, with the key (dotted), its type
and bounds, its default and its help text (each field's ``description``; ``tests/test_config.py`` checks that every
field has one). Sibling sections of one model (the five ``agents.<role>`` sections) share one table. Nothing here is
written by hand, so ``docs/config.md`` cannot drift from the code: ``tests/test_docs.py`` compares the two.

Run it alone (this is how ``docs/config.md`` is made)::

    python -m evotrainer.config_reference > docs/config.md
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from evotrainer.config import Config

# the word that stands for several sibling sections of one model in their shared table (agents.<role>.model)
PLACEHOLDER = {"RoleSettings": "role"}
HEADER = """# Configuration reference

Every key of a run's `config.yaml`, with its type, default and help text. Generated from `evotrainer/config.py`
(and `evotrainer/agents_config.py`, `sandbox/limits.py`, `evotrainer/domains/execute.py`) by
`python -m evotrainer.config_reference > docs/config.md`; do not edit it by hand (`tests/test_docs.py` fails when it
differs from what that command prints).

Set a key in a YAML file (`evotrainer init RUN_DIR --config FILE`) or on the command line
(`evotrainer init RUN_DIR --set training.steps_per_phase=100 --set phases=5`; the value is read as YAML). A wrong key
or value fails at start with one line naming the key and what is allowed.
"""


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a nested section (a field whose type is a pydantic model), else None."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def type_name(annotation: Any) -> str:
    """A type as a reader of YAML thinks of it: ``int``, ``auto | cpu | cuda``, ``list of str``, ``str or empty``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        text = " or ".join(type_name(a) for a in kinds)
        return f"{text} or empty" if len(kinds) < len(args) else text
    if origin in (list, tuple, set):
        inner = type_name(args[0]) if args else "any"
        return f"list of ({inner})" if " or " in inner or "|" in inner else f"list of {inner}"
    if origin is dict:
        return f"mapping {type_name(args[0])} -> {type_name(args[1])}" if args else "mapping"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "{" + ", ".join(annotation.model_fields) + "}"
    return getattr(annotation, "__name__", str(annotation))


def bounds(field) -> str:
    """The field's numeric bounds and minimum length, e.g. ``>= 1``, ``> 0, < 1``."""
    out = []
    for m in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if isinstance(m, getattr(annotated_types, attr.capitalize())):
                out.append(f"{sign} {getattr(m, attr)}")
        if isinstance(m, annotated_types.MinLen) and m.min_length > 0:
            out.append("not empty")
    return ", ".join(out)


def default_text(field) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if value is None or value == [] or value == {}:
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    """One table cell: one line, pipes escaped, and a ``<word>`` outside code spans kept from reading as HTML."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    return "`".join(re.sub(r"<(?=[A-Za-z/])", "&lt;", p) if i % 2 == 0 else p for i, p in enumerate(parts))


def sections(model: type[BaseModel] = Config, prefix: str = "") -> list[tuple[str, str, type[BaseModel], list]]:
    """(dotted key, help, model, rows) per section, depth first; rows are (key, type, default, help)."""
    rows, nested = [], []
    for name, field in model.model_fields.items():
        sub = _section_model(field.annotation)
        if sub is not None:
            nested.append((name, field, sub))
            continue
        kind = type_name(field.annotation)
        limits = bounds(field)
        if limits:
            kind = f"{kind} (if set: {limits})" if kind.endswith(" or empty") else f"{kind} ({limits})"
        rows.append((f"{prefix}{name}", kind, default_text(field), field.description or ""))
    out = [(prefix.rstrip(".") or "(top level)", "", model, rows)]
    seen: set[type[BaseModel]] = set()
    for name, field, sub in nested:
        if sub in seen:
            continue
        seen.add(sub)
        siblings = [(n, f) for n, f, s in nested if s is sub]
        if len(siblings) > 1:  # one table for sections of one model: agents.<role>
            key = f"{prefix}<{PLACEHOLDER.get(sub.__name__, 'name')}>"
            names = ", ".join(f"`{prefix}{n}`" for n, _ in siblings)
            first = sections(sub, key + ".")
            out.append((key, f"{names}: each as below ({sub.__name__})", sub, first[0][3]))
            out.extend(first[1:])
        else:
            out.extend((k, field.description if k == f"{prefix}{name}" else h, m, r)
                       for k, h, m, r in sections(sub, f"{prefix}{name}."))
    return out


def render() -> str:
    """docs/config.md, as this module prints it."""
    lines = [HEADER]
    for key, help_, _model, rows in sections():
        if not rows:
            continue
        lines.append(f"## `{key}`" if key != "(top level)" else "## Top level")
        lines.append("")
        if help_:
            lines.append(_cell(help_[0].upper() + help_[1:]) + ".")
            lines.append("")
        lines.append("| key | type | default | help |")
        lines.append("|---|---|---|---|")
        for k, kind, default, text in rows:
            lines.append(f"| `{k}` | {_cell(kind)} | {_cell(default)} | {_cell(text)} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
