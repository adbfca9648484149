"""harness_repo/README.md is the harness API the code uses: the seed, the framework and the sandbox runner agree.

The README's tables are parsed, and each test holds one side of the code to them: the seed harness defines every
required name with the documented parameters (read with ``ast``, never imported); filters and diagnostics get
exactly the documented rollout fields, rewards the documented sample fields, curriculum the documented history;
harness.yaml's keys are ``Knobs``' fields; the sandbox runner serves every documented module and fetches exactly
the documented names. Change the README and the code together, or one of these fails. :func:`check_seed_api` is the
seed's side as one call, which tests/test_domain_units.py runs on every registered domain's seed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from evotrainer.harness.knobs import Knobs
from evotrainer.harness.repo import HARNESS_FILES
from evotrainer.rollouts import HARNESS_VIEW, harness_view, level_history
from tests.conftest import ROOT, SEED, rollouts, tasks_for

README = ROOT / "harness_repo" / "README.md"
RUNNER = ROOT / "sandbox" / "runner.py"
CODE_MODULES = ("prompt.py", "rewards.py", "filters.py", "curriculum.py", "diagnostics.py")


def _tables() -> dict[str, list[list[dict[str, str]]]]:
    """Heading -> the tables under it, each a list of rows {column: cell} (backticks and escapes dropped)."""
    out: dict[str, list[list[dict[str, str]]]] = {}
    heading, header, rows = "", None, None
    for line in README.read_text().splitlines():
        if line.startswith("#"):
            heading, header = line.lstrip("#").strip(), None
        elif line.startswith("|"):
            cells = [c.strip().replace("`", "").replace("\\", "") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if header is None:
                header, rows = cells, []
                out.setdefault(heading, []).append(rows)
            elif not set("".join(cells)) <= set("-: "):
                rows.append(dict(zip(header, cells)))
        else:
            header = None
    return out


def table(heading: str, first_column: str) -> list[dict[str, str]]:
    """The rows of the table under ``heading`` (a prefix of it) whose first column is ``first_column``."""
    for title, tables in _tables().items():
        if title.startswith(heading):
            for rows in tables:
                if rows and next(iter(rows[0])) == first_column:
                    return rows
    raise AssertionError(f"README.md has no table '{first_column} | ...' under a heading '{heading}'")


def _params(call: str) -> tuple[str, ...]:
    """``weights(levels, base, history)`` -> ("levels", "base", "history")."""
    m = re.fullmatch(r"\w+\((.*)\)", call)
    assert m, f"README.md: bad call {call!r}"
    return tuple(p.strip() for p in m.group(1).split(",") if p.strip())


def _args(fn: ast.FunctionDef) -> tuple[str, ...]:
    return tuple(a.arg for a in fn.args.posonlyargs + fn.args.args)


def check_module(seed: Path, module: str) -> None:
    """``seed``'s ``module`` defines every name the README documents for it, with the documented parameters."""
    tree = ast.parse((seed / module).read_text())
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assigned = {t.id: n.value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    rows = table(module, "name")
    for row in rows:
        name, params = row["name"], _params(row["call"])
        if row["kind"] == "function":
            assert name in defs, f"{module} does not define {name}"
            assert _args(defs[name]) == params, f"{module}: {name}{_args(defs[name])}, documented {row['call']}"
            continue
        # a registry: a dict whose entries are functions (listed in the literal, or registered by a decorator)
        assert isinstance(assigned.get(name), ast.Dict), f"{module} does not assign a dict to {name}"
        entries = [defs[v.id] for v in assigned[name].values if isinstance(v, ast.Name) and v.id in defs]
        entries += [f for f in defs.values() if any(isinstance(d, ast.Call) for d in f.decorator_list)]
        assert entries, f"{module}: {name} has no entries"
        for fn in entries:
            assert _args(fn) == params, f"{module}: entry {fn.name}{_args(fn)}, documented {row['call']}"


def check_selftests(seed: Path) -> None:
    """``seed`` has self-tests, each of the documented form."""
    (row,) = table("tests/", "name")
    found = [fn for path in sorted((seed / "tests").glob("test_*.py")) for fn in ast.parse(path.read_text()).body
             if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")]
    assert found and all(_args(fn) == _params(row["call"]) for fn in found), f"{seed}: self-tests"


def check_seed_api(seed: Path) -> None:
    """The harness folder ``seed`` is the README's API: every code module's documented names, self-tests of the
    documented form, and a harness.yaml of documented knobs only."""
    for module in CODE_MODULES:
        check_module(seed, module)
    check_selftests(seed)
    documented = {r["key"] for r in table("harness.yaml", "key")}
    assert set(yaml.safe_load((seed / "harness.yaml").read_text())) <= documented, f"{seed}: harness.yaml"


@pytest.mark.parametrize("module", CODE_MODULES)
def test_the_seed_defines_every_documented_name_with_its_parameters(module):
    check_module(SEED, module)


def test_the_seed_has_self_tests_of_the_documented_form():
    check_selftests(SEED)


def test_filters_and_diagnostics_get_exactly_the_documented_rollout_view():
    view = table("The rollout view", "field")
    seen_by = {who: {r["field"] for r in view if who in r["seen by"].split(", ")} for who in ("filters", "diagnostics")}
    assert seen_by["filters"] == set(HARNESS_VIEW)
    assert seen_by["diagnostics"] == set(HARNESS_VIEW) | {"kept"}
    row = rollouts([[("9", True), ("8", False)]])[0]
    task = tasks_for([row])[row["task_id"]]
    assert set(harness_view(row, task)) == seen_by["filters"]
    assert set(harness_view(row, task, decided=True)) == seen_by["diagnostics"]


def test_curriculum_gets_exactly_the_documented_history():
    documented = {r["history field"] for r in table("curriculum.py", "history field")}
    rows = rollouts([[("9", True)] * 4, [("9", True), ("8", False)] * 2, [("8", False)] * 4, [("1", False)] * 4] * 2)
    history = level_history(rows)
    assert len(history) == 4
    for level, fields in history.items():
        assert set(fields) == documented, f"level {level}: level_history gives {sorted(fields)}"


def test_rewards_get_exactly_the_documented_sample():
    """Every sample dict the framework builds for rewards.py (in training and in replay) has the README's keys."""
    documented = {r["field"] for r in table("rewards.py", "field")}
    built = []
    for path in sorted((ROOT / "evotrainer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
                keys = {k.value for k in node.keys}
                if {"prompt", "completion", "task", "truncated"} <= keys:
                    built.append((path.relative_to(ROOT), keys))
    assert built, "no sample dict literal found under evotrainer/: point this test at where samples are built"
    for path, keys in built:
        assert keys == documented, f"{path} builds a sample with {sorted(keys)}"


def test_the_documented_knobs_are_harness_yaml():
    documented = [r["key"] for r in table("harness.yaml", "key")]
    assert sorted(documented) == sorted(Knobs.model_fields)
    assert set(yaml.safe_load((SEED / "harness.yaml").read_text())) <= set(documented)


def _runner_ops() -> dict[str, ast.FunctionDef]:
    cls = next(n for n in ast.parse(RUNNER.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "Runner")
    ops = next(ast.literal_eval(n.value) for n in cls.body
               if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "OPS")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    return {op: methods[f"op_{op}"] for op in ops}


def _constants(method: ast.FunctionDef) -> list:
    return [n.value for n in ast.walk(method) if isinstance(n, ast.Constant)]


def _fetched(method: ast.FunctionDef) -> set[tuple[str, str]]:
    """(module, name) of every ``self.attr("module", "name", ...)`` in a runner op."""
    return {(c.args[0].value, c.args[1].value) for c in ast.walk(method)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "attr"
            and len(c.args) >= 2 and all(isinstance(a, ast.Constant) for a in c.args[:2])}


def _spec_keys(method: ast.FunctionDef) -> set[str]:
    """Keys a runner op reads from a metric entry: ``spec.get("k")`` and ``spec["k"]``."""
    keys = set()
    for n in ast.walk(method):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" \
                and getattr(n.func.value, "id", None) == "spec":
            keys.add(n.args[0].value)
        if isinstance(n, ast.Subscript) and getattr(n.value, "id", None) == "spec" \
                and isinstance(n.slice, ast.Constant):
            keys.add(n.slice.value)
    return keys


def test_the_sandbox_runner_serves_every_documented_module_with_the_documented_names():
    modules = table("Modules", "file")
    assert {r["file"] for r in modules} == set(HARNESS_FILES) | {"tests/"}
    ops = _runner_ops()
    served = {op.strip(): r["file"] for r in modules if r["runner op"] != "-" for op in r["runner op"].split(",")}
    assert set(served) == set(ops) - {"ping", "exit"}
    for op, module in served.items():
        if module == "tests/":  # an op that runs the harness's tests reads them through the runner's one finder
            assert "_test_files" in {n.attr for n in ast.walk(ops[op]) if isinstance(n, ast.Attribute)}, op
            continue
        documented = {(module.removesuffix(".py"), r["name"]) for r in table(module, "name")}
        assert _fetched(ops[op]) == documented, f"op {op!r} fetches {sorted(_fetched(ops[op]))}"
    assert _spec_keys(ops["diagnostics"]) == {r["entry key"] for r in table("diagnostics.py", "entry key")}
