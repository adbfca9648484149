"""What an edit changes, named as variables, and whether that is the one variable its candidate declares.

A candidate changes one variable (``Candidate.variable``): ``filters.keep_group``, ``rewards.closeness``,
``harness.yaml:temperature``, ``harness.yaml:curriculum_weights``, ``tests/test_harness.py::test_x`` ... The
names of what a diff between two commits changes:

    harness.yaml           harness.yaml:KEY per top-level key (harness.yaml:KEY.SUB inside a mapping)
    MODULE.py              MODULE.NAME per top-level function, class or assignment (MODULE.<imports> for imports;
                           the docstring and comments are nothing); MODULE.py when it does not parse
    tests/FILE.py          tests/FILE.py::NAME per top-level test function or helper, tests/FILE.py otherwise
    any other path         the path itself

A declared variable covers what it names and what belongs to it: ``harness.yaml:KEY`` its sub-keys; a module
(``filters.py`` or ``filters``) every name in it, ``tests`` every test; ``MODULE.NAME`` also the module's imports
and its private helpers (names starting with ``_``); ``rewards.NAME`` also ``rewards.COMPONENTS`` and
``harness.yaml:reward_weights.NAME`` (a reward component is registered and weighed there); ``filters.NAME`` also
``harness.yaml:oversample`` (dynamic sampling is a filter plus the refill of what it drops: one variable). Try it alone:
``python -m evotrainer.judge.variables RUN_DIR/harness BASE REF [DECLARED]``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from evotrainer.harness.files import load_yaml
from evotrainer.harness.repo import HarnessRepo


def _yaml_names(before: str | None, after: str | None) -> set[str]:
    try:
        old, new = load_yaml(before or "") or {}, load_yaml(after or "") or {}
    except yaml.YAMLError:
        return {"harness.yaml"}
    if not isinstance(old, dict) or not isinstance(new, dict):
        return {"harness.yaml"}
    out = set()
    for key in set(old) | set(new):
        a, b = old.get(key), new.get(key)
        if a == b and (key in old) == (key in new):
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            subs = {f"harness.yaml:{key}.{sub}" for sub in set(a) | set(b) if a.get(sub) != b.get(sub)
                    or (sub in a) != (sub in b)}
            out |= subs or {f"harness.yaml:{key}"}
        else:
            out.add(f"harness.yaml:{key}")
    return out


def _definitions(source: str) -> dict[str, str]:
    """Top-level name -> AST dump (functions, classes, assignments; all imports as one '<imports>')."""
    tree = ast.parse(source)
    out: dict[str, str] = {}
    body = tree.body[1:] if tree.body and isinstance(tree.body[0], ast.Expr) and \
        isinstance(getattr(tree.body[0], "value", None), ast.Constant) else tree.body
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = ["<imports>"]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)] or ["<statements>"]
        else:
            names = ["<statements>"]
        for name in names:
            out[name] = out.get(name, "") + ast.dump(node)
    return out


def _python_names(prefix: str, before: str | None, after: str | None, whole: str) -> set[str]:
    try:
        old, new = _definitions(before or ""), _definitions(after or "")
    except (SyntaxError, ValueError, RecursionError):
        return {whole}
    return {f"{prefix}{name}" for name in set(old) | set(new) if old.get(name) != new.get(name)}


def file_names(path: str, before: str | None, after: str | None) -> set[str]:
    """The variables a change of ``path`` from ``before`` to ``after`` (None = absent) touches."""
    if path == "harness.yaml":
        return _yaml_names(before, after)
    if path.startswith("tests/") and path.endswith(".py"):
        return _python_names(f"{path}::", before, after, path) or {path}
    if "/" not in path and path.endswith(".py"):
        return _python_names(f"{path[:-3]}.", before, after, path) or {path}
    return {path}


def changed(repo: HarnessRepo, base: str, ref: str) -> set[str]:
    """Every variable the diff from ``base`` to ``ref`` changes."""
    out: set[str] = set()
    for path in repo.changed_files(base, ref):
        out |= file_names(path, repo.read(base, path), repo.read(ref, path))
    return out


def covers(declared: str, name: str) -> bool:
    """Whether the declared variable accounts for the changed variable ``name``."""
    declared = declared.strip()
    if not declared:
        return False
    if name == declared or name.startswith(declared + ".") or name.startswith(declared + "::"):
        return True
    if declared == "tests":
        return name.startswith("tests/")
    module = declared[:-3] if declared.endswith(".py") and "/" not in declared else declared
    if "." not in module and ":" not in module and "/" not in module:  # a whole module: "filters" or "filters.py"
        return name.startswith(module + ".") or name == module + ".py"
    head, _, tail = declared.partition(".")
    if ":" in head or "/" in head or not tail:
        return False
    own = name.startswith(head + ".") and name[len(head) + 1:] in ("<imports>", "<statements>") or \
        name.startswith(head + "._")
    reward = head == "rewards" and name in ("rewards.COMPONENTS", f"harness.yaml:reward_weights.{tail}")
    refill = head == "filters" and name == "harness.yaml:oversample"  # dynamic sampling refills what filters drop
    return own or reward or refill


def uncovered(declared: str, names: set[str]) -> list[str]:
    """The changed variables that ``declared`` does not account for."""
    return sorted(n for n in names if not covers(declared, n))


def infer(names: set[str]) -> str:
    """The one variable a diff changes when nothing was declared ("" when it changes none, or several): the
    most specific of its names (or of their harness.yaml parent keys) that covers all of them."""
    options = set(names) | {"harness.yaml:" + n[len("harness.yaml:"):].split(".", 1)[0]
                            for n in names if n.startswith("harness.yaml:")}
    for option in sorted(options, key=lambda o: (-len(o), o)):
        if not uncovered(option, names):
            return option
    return ""


if __name__ == "__main__":
    import sys

    found = changed(HarnessRepo(Path(sys.argv[1])), sys.argv[2], sys.argv[3])
    print("changes:", ", ".join(sorted(found)) or "nothing")
    if len(sys.argv) > 4:
        print("not covered by", sys.argv[4] + ":", ", ".join(uncovered(sys.argv[4], found)) or "none")
