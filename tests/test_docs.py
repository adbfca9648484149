"""The documentation cannot drift from the code: each test fails when a page and the tree disagree.

    config_reference   docs/config.md is exactly what ``python -m evotrainer.config_reference`` prints now
    readme_length      README.md stays a user guide: at most 260 lines (measurements go to docs/results.md)
    code_map           the README's code map names every evotrainer/*.py, every package under evotrainer/ and
                       every top-level folder, listed from the filesystem (a new module fails until it is mapped)
    package_docstrings each package whose __init__ docstring lists its modules lists all of them
    links              every relative link of README.md and docs/*.md reaches a file (and a heading, for #anchors)

Run alone: ``python -m pytest -q tests/test_docs.py`` (a second or two; nothing is trained).
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
REGENERATE = "python -m evotrainer.config_reference > docs/config.md"


def test_config_reference_is_what_the_config_says():
    from evotrainer.config_reference import render

    page = (ROOT / "docs" / "config.md").read_text()
    assert page == render(), f"docs/config.md differs from evotrainer/config.py's help text: run `{REGENERATE}`"


def test_readme_is_a_guide_of_at_most_260_lines():
    lines = len(README.read_text().splitlines())
    assert lines <= 260, f"README.md has {lines} lines (at most 260): move reference or results to docs/"


# --- the README's code map ------------------------------------------------------------------------------------
def _code_map() -> list[str]:
    """The lines of the first fenced block under the README's '## Code map' heading."""
    text = README.read_text()
    match = re.search(r"^## Code map\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, "README.md has no '## Code map' section"
    block = re.search(r"^```[^\n]*\n(.*?)^```", match.group(1), re.MULTILINE | re.DOTALL)
    assert block, "README.md's code map has no fenced block"
    return block.group(1).splitlines()


def _names(line: str) -> list[str]:
    """The names a map line maps: the first column, before two spaces (``state.py runtime.py  what they do``)."""
    first = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
    words = first.split()
    return words if all(re.fullmatch(r"[\w.-]+(\.py|/)", w) for w in words) else []


def mapped() -> tuple[set[str], set[str]]:
    """(top-level folders, names under evotrainer/) as the README's code map gives them."""
    top, inner, section = set(), set(), None
    for line in _code_map():
        if not line.strip():
            continue
        if not line[0].isspace():
            names = _names(line)
            top.update(n for n in names if n.endswith("/"))
            section = names[0] if names else None
        elif section == "evotrainer/":
            inner.update(_names(line))
    return top, inner


def _ignored(name: str) -> bool:
    patterns = [p.strip().rstrip("/") for p in (ROOT / ".gitignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    return name.startswith(".") or any(fnmatch.fnmatch(name, p) for p in patterns)


def on_disk() -> tuple[set[str], set[str]]:
    """(top-level folders, evotrainer's modules and packages) as the tree has them now."""
    top = {f"{p.name}/" for p in ROOT.iterdir() if p.is_dir() and not _ignored(p.name)}
    pkg = ROOT / "evotrainer"
    inner = {p.name for p in pkg.glob("*.py") if p.name != "__init__.py"}
    inner |= {f"{p.name}/" for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    return top, inner


def test_readme_code_map_names_every_module_package_and_folder():
    (top_map, inner_map), (top_disk, inner_disk) = mapped(), on_disk()
    assert {"agents/", "sandbox/", "harness_repo/", "benchmarks/", "tests/", "docs/"} <= top_disk  # the walk works
    assert {"config.py", "loop/", "trainer/"} <= inner_disk
    missing = sorted(top_disk - top_map) + sorted(f"evotrainer/{n}" for n in inner_disk - inner_map)
    assert not missing, f"README.md's code map does not name: {', '.join(missing)} (add a line for each)"
    gone = sorted(top_map - top_disk) + sorted(f"evotrainer/{n}" for n in inner_map - inner_disk)
    assert not gone, f"README.md's code map names what is not there: {', '.join(gone)}"


# --- package docstrings ----------------------------------------------------------------------------------------
def _packages() -> list[Path]:
    return sorted([*(p for p in (ROOT / "evotrainer").iterdir() if (p / "__init__.py").is_file()),
                   ROOT / "agents", ROOT / "sandbox"])


def _docstring(pkg: Path) -> str:
    return ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""


def _modules(pkg: Path) -> list[str]:
    return sorted(p.name for p in pkg.glob("*.py") if p.name != "__init__.py")


def _named(doc: str, module: str) -> bool:
    return re.search(rf"(?<![\w/]){re.escape(module)}\b", doc) is not None


def listing_packages() -> list[Path]:
    """The packages whose docstring lists their modules: it names at least two of them."""
    return [p for p in _packages() if sum(_named(_docstring(p), m) for m in _modules(p)) >= 2]


def test_the_listing_packages_are_the_expected_ones():
    names = {str(p.relative_to(ROOT)) for p in listing_packages()}
    expected = {f"evotrainer/{p}" for p in ("loop", "judge", "harness", "report", "policy", "bench")}
    expected |= {"agents", "sandbox"}
    assert expected <= names, f"these package docstrings no longer list their modules: {sorted(expected - names)}"


@pytest.mark.parametrize("pkg", listing_packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_package_docstring_names_every_module(pkg: Path):
    doc = _docstring(pkg)
    missing = [m for m in _modules(pkg) if not _named(doc, m)]
    where = pkg.relative_to(ROOT)
    assert not missing, f"{where}/__init__.py's docstring does not name {', '.join(missing)}"


# --- links ------------------------------------------------------------------------------------------------------
def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def links(page: Path) -> list[str]:
    """The relative links of a page (outside code blocks): ``[text](target)``, no URL, no bare #anchor."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    targets = re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_pages_have_links_to_check():
    readme = links(README)
    for page in ("docs/design.md", "docs/results.md", "docs/config.md", "docs/reference.md", "harness_repo/README.md"):
        assert page in readme, f"README.md does not link {page}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file(page: Path):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve()
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {', '.join(broken)}"
