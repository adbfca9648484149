"""Search/replace blocks: how an LLM Engineer edits harness files, applied exactly or reported back.

A block names a file, the exact text to find (it must occur once) and its replacement; an empty ``search`` creates
a new file. :func:`apply_blocks` applies a candidate's blocks in order to the files at the base commit and says,
per block, why one does not apply (text not found, found twice, a path outside the harness), then checks the
result: Python files compile and ``harness.yaml`` validates. The Engineer sends the problems back to the model.

Try it alone::

    python -c "from agents.edits import Block, apply_blocks; \\
      print(apply_blocks([Block(file='a.py', search='x = 1', replace='x = 2')], lambda f: 'x = 1\\n'))"
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Callable

from pydantic import BaseModel, Field

from evotrainer.harness.knobs import KnobsError, parse_knobs


class Block(BaseModel):
    file: str = Field(description="harness file, relative to the harness root, e.g. rewards.py or tests/test_x.py")
    search: str = Field(description="exact text to replace, occurring once in the file (copy it, whitespace "
                        "included); empty to create a new file")
    replace: str = Field(description="the new text")


def _bad_path(name: str) -> str | None:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0].startswith(".git"):
        return "not a path inside the harness"
    if p.suffix not in (".py", ".yaml", ".yml", ".md", ".txt", ".json"):
        return "only text files (.py, .yaml, .md, .txt, .json) can be edited"
    return None


def _hint(text: str, search: str) -> str:
    first = next((line.strip() for line in search.splitlines() if line.strip()), "")
    if first and first in text:
        return f"its first line {first[:60]!r} is there, so a later line differs (whitespace counts)"
    return "copy the lines exactly from the file as shown"


def apply_blocks(blocks: list[Block], read: Callable[[str], str | None]) -> tuple[dict[str, str], list[str]]:
    """({file: new text}, problems). ``read(file)`` is the file at the base commit, or None when it does not exist."""
    files: dict[str, str | None] = {}
    problems: list[str] = []
    for i, b in enumerate(blocks, 1):
        bad = _bad_path(b.file)
        if bad:
            problems.append(f"block {i} ({b.file}): {bad}")
            continue
        if b.file not in files:
            files[b.file] = read(b.file)
        text = files[b.file]
        if text is None:
            if b.search:
                problems.append(f"block {i}: {b.file} does not exist (an empty search creates it)")
            else:
                files[b.file] = b.replace
            continue
        if not b.search:
            problems.append(f"block {i} ({b.file}): empty search text, but the file exists; quote the text to replace")
            continue
        count = text.count(b.search)
        if count != 1:
            problems.append(f"block {i} ({b.file}): the search text occurs {count} times, not once; "
                            + (_hint(text, b.search) if count == 0 else "quote more lines to make it unique"))
            continue
        files[b.file] = text.replace(b.search, b.replace, 1)
    changed = {f: t for f, t in files.items() if t is not None and t != read(f)}
    if not problems and not changed:
        problems.append("the blocks change nothing")
    for f, t in changed.items():
        problems += _broken(f, t)
    return changed, problems


def _broken(name: str, text: str) -> list[str]:
    if name.endswith(".py"):
        try:
            compile(text, name, "exec")
        except SyntaxError as err:
            return [f"{name} no longer compiles: line {err.lineno}: {err.msg}"]
    if name == "harness.yaml":
        try:
            parse_knobs(text)
        except KnobsError as err:
            return [str(err)]
    return []
