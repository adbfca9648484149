"""The project's packages form a tree, not a web: no import circle among the modules of ``evotrainer``, ``agents``
and ``sandbox`` (every import counts, the ones inside functions and under TYPE_CHECKING too; a name read from a
package's face, ``from sandbox import frames``, counts as an import of that package's ``__init__`` as well), and the
evaluator's side (``evotrainer/domains/``) and the judge (``evotrainer/judge/``) import nothing from ``agents``. The
checker is tested on a scratch tree with circles planted in it, so a checker that finds nothing cannot pass.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("evotrainer", "agents", "sandbox")


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the packages under ``root``."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports: ``from X import Y`` names X.Y when that is a module, else X; and X too
    when X is a package, even for a submodule Y: the name is read from the package's face (its ``__init__``, which
    may bind Y to anything), so a module that does so depends on what that face imports."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    out.add(sub)
                if base in known:  # the module X.Y, or the package X whose face Y is read from
                    out.add(base)
    out.discard(name)
    return out


def graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    known = modules(root, packages)
    return {name: imports(path, name, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_among_the_project_s_modules():
    found = circles(graph(ROOT))
    assert not found, "import circles (each a set of modules that import each other): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_the_evaluator_and_the_judge_import_nothing_from_the_agents():
    """What judges the agents' edits (the domains' verifiers, the backtest and ``evotrainer backtest REF``) reads the
    commits and the rollouts, never the agents' own account of them."""
    edges = graph(ROOT)
    bad = {m: sorted(t for t in to if t == "agents" or t.startswith("agents."))
           for m, to in edges.items() if m.startswith(("evotrainer.domains", "evotrainer.judge"))}
    assert not any(bad.values()), bad


def test_litellm_is_imported_in_one_place_which_keeps_its_price_table_offline():
    """``agents.llm.litellm`` sets LITELLM_LOCAL_MODEL_COST_MAP before the import (litellm reads it then): another
    import of litellm would need its own copy of that rule."""
    where = sorted(str(path.relative_to(ROOT)) for path in modules(ROOT).values()
                   for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "litellm" for a in node.names)
                   or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "litellm")
    assert where == ["agents/llm.py"], where


def test_the_checker_finds_a_circle_planted_in_a_scratch_tree(tmp_path: Path):
    for rel, text in {
        "evotrainer/__init__.py": "",
        "evotrainer/a.py": "from evotrainer.b import f\n",
        "evotrainer/b.py": "def f():\n    from evotrainer import c\n",  # a lazy import counts
        "evotrainer/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import g\n",
        "evotrainer/d.py": "import evotrainer.a\n",  # imports into the circle, not part of it
        "agents/__init__.py": "from agents.x import y\n",
        "agents/x.py": "from evotrainer.a import f\n",
        "sandbox/__init__.py": "",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert circles(graph(tmp_path)) == [["evotrainer.a", "evotrainer.b", "evotrainer.c"]]
    (tmp_path / "evotrainer/c.py").write_text("")  # the circle broken: a tree again
    assert circles(graph(tmp_path)) == []
    # a circle through a package's face: its __init__ imports a module that reads a sibling from the face
    (tmp_path / "sandbox/__init__.py").write_text("from sandbox.w import run\n")
    (tmp_path / "sandbox/w.py").write_text("from sandbox import f\n\ndef run():\n    pass\n")
    (tmp_path / "sandbox/f.py").write_text("")
    assert circles(graph(tmp_path)) == [["sandbox", "sandbox.w"]]
    (tmp_path / "sandbox/w.py").write_text("import sandbox.f\nfrom sandbox.f import __doc__\n")  # the defining module
    assert circles(graph(tmp_path)) == []
