"""The evaluator arbitrates a self-test that pins what it contradicts: found, confirmed, and rewritten.

A harness's own tests guard its code: a candidate that fails one of main's tests, changes it or deletes it is
rejected (``judge/safety.py``). But a test can pin a defect. A test asserting that a loose completion earns full
reward pins the reward's disagreement with the evaluator, and every repair of that reward then fails it; a test
asserting that a right answer in an unusual form earns nothing pins the opposite; a test asserting a prompt other
than the evaluator's pins that prompt, and the move back to the canonical prompt fails it; a test asserting that a
wrong answer's rollout is left out of training pins a filter that starves the update, and the move back to the neutral
filter fails it. A person would read the
test, see that it asserts what the evaluator denies, and fix the test with the edit. This module does that by
mechanism, for any test, any reward component, the prompt, and either direction, with no knowledge of the defect.

**The ruling** (:func:`rule`). A test of main's is run on main's code with every reward component and
``make_prompt`` recording its calls (the sandbox's ``record`` op: each sample a test scored or task it prompted, and
the answer). The test is *contradicted by the evaluator* under a candidate when at least one recorded call is
answered differently by the candidate's code, and on every call that is, the candidate's answer is the evaluator's
while main's is not. For a reward, the evaluator's answer pays exactly what the verifier accepts (value > 0 when
verified, else 0 or less), the verdict being the domain's on the harness's view of the task
(``Domain.verdict_on_view``: math's verifier reads the answer the view carries; code runs the program on the view's
visible tests, and a failing one settles it). For a prompt, it is the domain's canonical prompt. For a filter
(``keep_rollout``, ``keep_group``), it is the domain's neutral filter's decision (``evotrainer.domains.neutral``: every
rollout trains but what says nothing about the answer), settled only for a candidate whose filter *is* that neutral
form (the same code, comments aside): a test cannot forbid the comparison with the baseline every filter must beat,
which the trial then makes. A call the view cannot settle, a component the candidate no longer has, or a difference
the evaluator does not side with, leaves the test standing: the ruling never excuses a test on a guess.

**The rewrite** (:func:`rewrite`): the test, same name and file, asserting the evaluator-consistent answer (the
candidate's) to each recorded call. Assertions of the old test on anything else are not kept (its old text stays in
the harness history).

**Where it acts.** The loop amends a candidate whose own self-tests fail only on tests unchanged from main that the
evaluator contradicts (:func:`amend`, after the Engineer: any source's candidate, built-in, LLM or skill), rebuilding
its commit with the rewritten tests and an ``Arbitrated`` trailer. The gate does not trust the amendment: it rules
again itself on main's code and main's tests (:class:`Arbiter`) and excuses a changed, deleted or failing test of
main's only where the evaluator contradicts it and the candidate's version is exactly the rewrite. A test that
fails on main itself is no candidate's fault either (:attr:`evotrainer.judge.checks.Baseline.failing`).

Alone: ``python -m evotrainer.judge.arbitrate MAIN_DIR CANDIDATE_DIR [DOMAIN]`` rules on main's tests that fail
against the candidate's code and prints each ruling with its rewrite.
"""

from __future__ import annotations

import ast
import pprint
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from evotrainer.config import SandboxConfig
from evotrainer.contracts import Candidate
from evotrainer.domains import get_domain
from evotrainer.domains.execute import ExecLimits
from evotrainer.harness.repo import HarnessRepo, parse_trailers
from sandbox import HarnessError, HarnessWorker

PROMPT_CALL = "prompt.make_prompt"  # a recorded call of make_prompt (sandbox/runner.py's name for it)
FILTER_CALLS = ("filters.keep_rollout", "filters.keep_group")  # recorded filter calls (sandbox/runner.py's names)
TRAILER = "Arbitrated"  # the candidate commit's trailer naming the tests the evaluator's ruling rewrote


@dataclass
class Ruling:
    """The evaluator's word on one test of main's under one candidate."""

    test: str  # tests/FILE.py::NAME
    contradicted: bool
    why: str
    calls: list[dict] = field(default_factory=list)  # {component, sample, main, candidate, verified}

    def line(self) -> str:
        return f"{self.test}: {self.why}"


def rule(main: HarnessWorker, candidate: HarnessWorker, tests: list[str], domain: str,
         executor: ExecLimits | None = None) -> dict[str, Ruling]:
    """The ruling on each of main's ``tests`` under the candidate: ``main`` is a worker on main's code and tests,
    ``candidate`` one on the candidate's code (see the module's docstring for the rule). Never raises for what
    harness code does: a test that cannot be recorded or scored is not contradicted, and says why."""
    if not tests:
        return {}
    verifier = get_domain(domain, executor)
    try:
        recorded = main.record(list(tests))
    except HarnessError as err:
        return {t: Ruling(t, False, f"its reward calls could not be recorded: {err}") for t in tests}
    out: dict[str, Ruling] = {}
    for test in tests:
        calls = recorded.get(test, [])
        if not calls:
            out[test] = Ruling(test, False, "it asks nothing of rewards.COMPONENTS, make_prompt or the filters on "
                               "main")
            continue
        scored = [c for c in calls if c["component"] not in (PROMPT_CALL, *FILTER_CALLS)]
        asked = [c for c in calls if c["component"] == PROMPT_CALL]
        try:
            values = candidate.score([c["sample"] for c in scored]) if scored else []
            prompts = candidate.prompts([c["sample"] for c in asked]) if asked else []
        except HarnessError as err:
            out[test] = Ruling(test, False, f"the candidate's code could not answer its calls: {err}")
            continue
        mine = {id(c): v.get(c["component"]) for c, v in zip(scored, values)}
        mine.update({id(c): p for c, p in zip(asked, prompts)})
        for call in calls:  # a filter's answer is settled only where the candidate's filter is the neutral one
            if call["component"] in FILTER_CALLS and _neutral_filter(candidate, domain, call["component"]):
                mine[id(call)] = _verdict(verifier, call)
        rows, differ, sides = [], 0, True
        for call in calls:
            row = {"component": call["component"], "sample": call["sample"], "main": call["value"],
                   "candidate": mine.get(id(call)), "verified": None}
            rows.append(row)
            if row["candidate"] is not None and row["candidate"] == call["value"]:
                continue
            differ += 1
            row["verified"] = _verdict(verifier, call)
            if row["verified"] is None:  # a call the view cannot settle: no ruling on a guess
                sides = False
                continue
            sides = sides and _sides_with(row["candidate"], row["verified"]) \
                and not _sides_with(call["value"], row["verified"])
        if not differ:
            out[test] = Ruling(test, False, "the candidate's code answers its calls as main's does", rows)
        elif not sides:
            out[test] = Ruling(test, False, "the evaluator does not side with the candidate on every call it "
                               "answers otherwise", rows)
        else:
            out[test] = Ruling(test, True, f"pins what the evaluator contradicts: {_said(rows)}"[:400], rows)
    return out


def _neutral_source(domain: str, component: str) -> str | None:
    """The source of the domain's neutral form of a filter (``evotrainer.domains.neutral``), or None."""
    from evotrainer.domains.neutral import forms

    neutral = forms(domain)
    return neutral.filters.get(component.partition(".")[2]) if neutral is not None else None


def _neutral_filter(candidate: HarnessWorker, domain: str, component: str) -> bool:
    """Whether the candidate's filter is the domain's neutral one, as code (the same syntax tree: comments aside), so
    that the neutral form's answer, computed here from our own source, is the candidate's; any other filter's answer
    is not settled."""
    name = component.partition(".")[2]
    neutral = _neutral_source(domain, component)
    try:
        mine = function_text((candidate.harness_dir / "filters.py").read_text(), name)
        return mine is not None and neutral is not None and ast.dump(ast.parse(mine)) == ast.dump(ast.parse(neutral))
    except (OSError, ValueError, RecursionError, MemoryError):  # harness text the parser refuses: not the neutral form
        return False


def _verdict(verifier, call: dict) -> bool | str | None:
    """The evaluator's word on a recorded call: for a reward, the verdict on the sample's completion for the task
    as the harness sees it (``Domain.verdict_on_view``); for a prompt, the canonical prompt of the task; for a
    filter, the answer of the domain's neutral filter (every rollout trains but what says nothing about the answer:
    the evaluator's side of what a filter may withhold, as the canonical prompt is of what training is asked). None
    where the view cannot settle it."""
    sample = call["sample"]
    try:
        if call["component"] in FILTER_CALLS:
            source, ns = _neutral_source(verifier.name, call["component"]), {}
            if source is None:
                return None
            exec(source, ns)  # noqa: S102 - the domain's own published source, never harness code
            arg = sample["group"] if call["component"] == "filters.keep_group" else sample
            return bool(ns[call["component"].partition(".")[2]](arg))
        if call["component"] == PROMPT_CALL:
            return str(verifier.canonical_prompt(sample))
        return verifier.verdict_on_view(sample["task"], sample["completion"])
    except Exception:  # noqa: BLE001 - a sample without what the evaluator needs
        return None


def _sides_with(value, verdict: bool | str) -> bool:
    """Whether a call's answer is the evaluator's: a reward pays exactly what is verified (> 0 when verified, else
    0 or less); a prompt is the canonical one."""
    if isinstance(verdict, str) or isinstance(value, bool):  # a prompt, or a filter's decision
        return value == verdict
    return isinstance(value, (int, float)) and (value > 0) == verdict


def _said(rows: list[dict]) -> str:
    parts = []
    for r in rows:
        if r["verified"] is None:
            continue
        if r["component"] == PROMPT_CALL:
            parts.append(f"make_prompt {r['main']!r} -> {r['candidate']!r}, the evaluator's prompt")
        elif r["component"] in FILTER_CALLS:
            parts.append(f"{r['component'].partition('.')[2]} {r['main']} -> {r['candidate']}, the neutral filter's")
        else:
            parts.append(f"{r['component']}({r['sample'].get('completion', '')!r}) {r['main']:g} -> "
                         f"{r['candidate']:g}, {'verified' if r['verified'] else 'not verified'}")
    return "; ".join(parts)


def rewrite(source: str, ruling: Ruling) -> str:
    """The test file ``source`` with the ruled test replaced by one asserting the evaluator-consistent answer to
    each recorded call (the same name, at the same place)."""
    name = ruling.test.partition("::")[2]
    lines = source.splitlines(keepends=True)
    node = _function(ast.parse(source), name)
    if node is None:
        raise ValueError(f"{ruling.test} is not a top-level test function of its file")
    first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    checked = [(r["component"], r["sample"], r["candidate"]) for r in ruling.calls]
    body = (f"def {name}():\n"
            f'    """Rewritten by the evaluator\'s arbitration: the test it replaces asserted what the domain\'s\n'
            f'    evaluator contradicts. Each call it made, with the answer that agrees with the evaluator."""\n'
            f"    from filters import keep_group, keep_rollout\n"
            f"    from prompt import make_prompt\n"
            f"    from rewards import COMPONENTS\n\n"
            f"    checked = {textwrap.indent(pprint.pformat(checked, width=112), '    ').strip()}\n"
            f"    for component, sample, value in checked:\n"
            f"        if component == {PROMPT_CALL!r}:\n"
            f"            assert make_prompt(sample) == value, sample\n"
            f"        elif component == {FILTER_CALLS[0]!r}:\n"
            f"            assert keep_rollout(sample) is value, sample\n"
            f"        elif component == {FILTER_CALLS[1]!r}:\n"
            f"            assert keep_group(sample['group']) is value, sample\n"
            f"        else:\n"
            f"            assert COMPONENTS[component](sample) == value, (component, sample.get('completion'))\n")
    return "".join(lines[:first]) + body + "".join(lines[node.end_lineno:])


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """The top-level function ``name`` of a parsed file, or None."""
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def function_text(source: str | None, name: str) -> str | None:
    """The source of the top-level function ``name`` in ``source`` (None when absent or unparsable)."""
    if not source:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    node = _function(tree, name)
    return None if node is None else ast.get_source_segment(source, node)


def harness_tests(harness_dir: Path) -> dict[str, str]:
    """``tests/FILE.py::test_name`` -> AST dump of every top-level test function of a harness dir: what "the same
    test" means to the gate (``safety``: tests_kept) and to the amendment (:func:`amend_files`)."""
    out = {}
    for path in sorted((harness_dir / "tests").glob("test_*.py")):
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, ValueError, UnicodeDecodeError):
            out[f"tests/{path.name}"] = "<does not parse>"
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                out[f"tests/{path.name}::{node.name}"] = ast.dump(node)
    return out


class Arbiter:
    """The gate's own rulings for one candidate, each test ruled once: main's worker and tests (``main_dir``),
    the candidate's worker and tests (``cand_dir``)."""

    def __init__(self, main: HarnessWorker, main_dir: Path, candidate: HarnessWorker, cand_dir: Path, domain: str,
                 executor: ExecLimits | None = None):
        self.main, self.main_dir, self.candidate, self.cand_dir = main, main_dir, candidate, cand_dir
        self.domain, self.executor = domain, executor
        self.rulings: dict[str, Ruling] = {}

    def ruling(self, test: str) -> Ruling:
        if test not in self.rulings:
            self.rulings.update(rule(self.main, self.candidate, [test], self.domain, self.executor))
        return self.rulings[test]

    def excuses(self, test: str) -> bool:
        """Whether main's ``test`` may fail against, be changed by or be missing from the candidate: the evaluator
        contradicts it, and the candidate's version of it (if any) is exactly the rewrite."""
        path, _, name = test.partition("::")
        if not name or not (self.main_dir / path).is_file():
            return False
        ruling = self.ruling(test)
        if not ruling.contradicted:
            return False
        mine = self.cand_dir / path
        if not mine.is_file():
            return False
        expected = function_text(rewrite((self.main_dir / path).read_text(), ruling), name)
        return function_text(mine.read_text(), name) == expected

    def excused(self) -> list[Ruling]:
        return [r for t, r in self.rulings.items() if r.contradicted and self.excuses(t)]


def amend_files(main_dir: Path, cand_dir: Path, failed: list[str], main: HarnessWorker, candidate: HarnessWorker,
                domain: str, executor: ExecLimits | None = None) -> tuple[dict[str, str], list[Ruling]]:
    """(the test files rewritten, path -> text; the rulings that rewrote them) for a candidate whose self-tests
    ``failed``: each failed test unchanged from main's that the evaluator contradicts is rewritten."""
    main_tests, cand_tests = harness_tests(main_dir), harness_tests(cand_dir)
    unchanged = [t for t in failed if "::" in t and t in main_tests and cand_tests.get(t) == main_tests[t]]
    rulings = [r for r in rule(main, candidate, unchanged, domain, executor).values() if r.contradicted]
    files: dict[str, str] = {}
    for r in rulings:
        path = r.test.partition("::")[0]
        files[path] = rewrite(files.get(path) or (cand_dir / path).read_text(), r)
    return files, rulings


def amend(repo: HarnessRepo, candidate: Candidate, *, sandbox: SandboxConfig, hide: list[str], domain: str,
          test_timeout_s: float, executor: ExecLimits | None = None) -> tuple[Candidate, list[Ruling]]:
    """``candidate``, its commit rebuilt with the tests the evaluator contradicts rewritten (same branch, base,
    message and trailers, a paragraph and an ``Arbitrated`` trailer more), and the rulings; the candidate unchanged
    and no rulings when it leaves rewards.py, prompt.py and filters.py alone, its self-tests pass or fail only on tests
    the evaluator does not contradict, or the commit deletes a file (rebuilt commits only write files)."""
    base = candidate.base_sha
    paths = repo.changed_files(base, candidate.sha)
    edits = {p: repo.read(candidate.sha, p) for p in paths}
    if not {"rewards.py", "prompt.py", "filters.py"} & set(paths) or any(text is None for text in edits.values()):
        return candidate, []  # only an edit of these files changes what a recorded call answers
    limits = sandbox.limits.model_copy(update={"call_timeout_s": test_timeout_s})
    with tempfile.TemporaryDirectory(prefix="evo-arbitrate-") as tmp:
        main_dir = repo.export(base, Path(tmp) / "main")
        cand_dir = repo.export(candidate.sha, Path(tmp) / "candidate")
        with HarnessWorker(cand_dir, limits=limits, backend=sandbox.backend, image=sandbox.image, hide=hide) as cw:
            try:
                failed = [f["name"] for f in cw.selftest()["failed"]]
            except HarnessError:
                return candidate, []
            if not failed:
                return candidate, []
            with HarnessWorker(main_dir, limits=limits, backend=sandbox.backend, image=sandbox.image,
                               hide=hide) as mw:
                files, rulings = amend_files(main_dir, cand_dir, failed, mw, cw, domain, executor)
    if not files:
        return candidate, []
    message = repo.message(candidate.sha)
    trailers = parse_trailers(message)
    subject, _, rest = message.strip().partition("\n")
    body, last = rest.strip(), message.strip().split("\n\n")[-1]  # the last paragraph holds the trailers
    if trailers and body.endswith(last):
        body = body[: len(body) - len(last)].strip()
    said = "\n".join(f"- {r.line()}" for r in rulings)
    body += ("\n\nThe evaluator's arbitration rewrote main's self-test(s) this edit failed, each asserting what the "
             f"domain's evaluator contradicts (evotrainer/judge/arbitrate.py):\n{said}")
    trailers = {**trailers, TRAILER: ", ".join(r.test for r in rulings)}
    sha = repo.commit_candidate(candidate.branch, base, {**edits, **files}, subject, body, trailers)
    return candidate.model_copy(update={"sha": sha, "files": sorted(set(candidate.files) | set(files))}), rulings


if __name__ == "__main__":
    import sys

    main_dir, cand_dir = Path(sys.argv[1]), Path(sys.argv[2])
    domain = sys.argv[3] if len(sys.argv) > 3 else "math"
    with HarnessWorker(main_dir) as mw, HarnessWorker(cand_dir) as cw:
        failing = [f["name"] for f in cw.selftest()["failed"]]
        for r in rule(mw, cw, failing, domain).values():
            print(("REWRITE " if r.contradicted else "stands  ") + r.line())
        for path, text in amend_files(main_dir, cand_dir, failing, mw, cw, domain)[0].items():
            print(f"--- {path}\n{text}")
