"""What a harness tree may hold, and how its files are read without trusting them.

A harness commit is written by an agent (or a person) and is untrusted. Before any of it is loaded:

* the tree holds regular files only (no symbolic link, which would point the sandbox or the trainer at a file
  outside the harness; no submodule), each at most ``MAX_FILE_BYTES``, at most ``MAX_FILES`` of them and
  ``MAX_TREE_BYTES`` in all (:func:`tree_problems` names every entry that breaks a rule);
* :func:`export_tree` writes only the entries that keep the rules (read blob by blob, so an oversize file is
  never even loaded), and returns the problems; the backtest's ``harness_tree`` check rejects the candidate
  with them, so a bad tree is a rejection, never a crash of the gate;
* ``harness.yaml`` is parsed by :func:`load_yaml`: the safe loader (no Python objects), at most
  ``MAX_YAML_BYTES``, ``MAX_YAML_ALIASES`` aliases (an alias bomb expands exponentially) and ``MAX_YAML_DEPTH``
  levels of nesting; a breach is a ``yaml.YAMLError`` naming it.

Try it alone: ``python -m evotrainer.harness.files RUN_DIR/harness main`` (the problems of a commit's tree).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import git
import yaml

MAX_FILE_BYTES = 1024 * 1024
MAX_TREE_BYTES = 8 * 1024 * 1024
MAX_FILES = 500
MAX_YAML_BYTES = 64 * 1024
MAX_YAML_ALIASES = 16
MAX_YAML_DEPTH = 20
_REGULAR = {"100644": 0o644, "100755": 0o755}


class HarnessTreeError(ValueError):
    """A harness tree that breaks the rules above (one readable line naming the entries)."""


def _entries(repo: git.Repo, ref: str) -> list[tuple[str, str, str, int, str]]:
    """(mode, type, sha, size, path) of every entry of ``ref``'s tree, recursively."""
    out = []
    listing = repo.git.ls_tree("-r", "-l", "-z", "--full-tree", ref)
    for line in filter(None, listing.split("\0")):
        meta, _, path = line.partition("\t")
        mode, kind, sha, size = meta.split()
        out.append((mode, kind, sha, int(size) if size.isdigit() else 0, path))
    return out


def tree_problems(repo: git.Repo, ref: str) -> list[str]:
    """Every entry of ``ref``'s tree that a harness must not hold, as ``path: why``; empty when it is fine."""
    problems, total = [], 0
    entries = _entries(repo, ref)
    for mode, kind, _, size, path in entries:
        if mode == "120000":
            problems.append(f"{path}: a symbolic link (harness files must be regular files)")
        elif kind == "commit":
            problems.append(f"{path}: a submodule (harness files must be regular files)")
        elif mode not in _REGULAR:
            problems.append(f"{path}: not a regular file (git mode {mode})")
        elif size > MAX_FILE_BYTES:
            problems.append(f"{path}: {size} bytes, over the {MAX_FILE_BYTES}-byte limit of a harness file")
        else:
            total += size
    if len(entries) > MAX_FILES:
        problems.append(f"{len(entries)} files, over the limit of {MAX_FILES}")
    if total > MAX_TREE_BYTES:
        problems.append(f"{total} bytes in all, over the limit of {MAX_TREE_BYTES}")
    return problems


def check_tree(repo: git.Repo, ref: str) -> None:
    """Raise HarnessTreeError naming the problems of ``ref``'s tree, if any."""
    problems = tree_problems(repo, ref)
    if problems:
        raise HarnessTreeError(f"harness tree at {ref}: " + "; ".join(problems[:5])
                               + (f"; and {len(problems) - 5} more" if len(problems) > 5 else ""))


def export_tree(repo: git.Repo, ref: str, dest: Path) -> list[str]:
    """Write the regular files of ``ref`` that keep the rules into ``dest``; return the problems (skipped)."""
    problems = tree_problems(repo, ref)
    bad = {p.split(": ", 1)[0] for p in problems}
    wanted = [(mode, sha, path) for mode, kind, sha, size, path in _entries(repo, ref)
              if mode in _REGULAR and path not in bad]
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if not wanted:
        return problems
    batch = subprocess.run(["git", "-C", str(repo.working_tree_dir or repo.git_dir), "cat-file", "--batch"],
                           input=b"".join(f"{sha}\n".encode() for _, sha, _ in wanted), capture_output=True,
                           check=True).stdout
    pos = 0
    for mode, sha, path in wanted:
        header_end = batch.index(b"\n", pos)
        size = int(batch[pos:header_end].split()[2])
        data = batch[header_end + 1: header_end + 1 + size]
        pos = header_end + 1 + size + 1
        target = (dest / path).resolve()
        if not str(target).startswith(str(dest.resolve()) + os.sep):  # git never stores such a path; be sure
            problems.append(f"{path}: outside the harness dir")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(_REGULAR[mode])
    return problems


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, counting aliases and nesting as it composes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent, index):  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_YAML_ALIASES} aliases (an alias bomb?)")
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.YAMLError(f"nested deeper than {MAX_YAML_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str) -> object:
    """``text`` parsed by the safe loader within the size, alias and depth limits (``yaml.YAMLError`` if not)."""
    if len(text.encode("utf-8", "replace")) > MAX_YAML_BYTES:
        raise yaml.YAMLError(f"over {MAX_YAML_BYTES} bytes")
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise yaml.YAMLError(f"nested deeper than {MAX_YAML_DEPTH} levels") from None


if __name__ == "__main__":
    import sys

    found = tree_problems(git.Repo(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "main")
    print("\n".join(found) or "the tree keeps every rule")
