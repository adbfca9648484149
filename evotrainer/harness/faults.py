"""The catalogue of seed-harness defects: realistic flaws of a first harness, each usable as a run's starting harness.

Each defect is a folder ``harness_repo/faults/<name>/``: an overlay of a domain's clean seed harness (only the files
that differ) and ``CARD.md``, which says what is wrong, what a practitioner would see and what removes it. The
catalogue is read from the shipped harness folders (the source checkout, then the installed data files: the roots
``seed_dir`` searches). ``materialize`` builds the faulty seed: the clean seed with the overlay copied over it (the
card stays behind, so nothing in the harness names the defect). ``evotrainer init --fault NAME`` starts a run
from it (``Config.fault``). The card's ``Mechanism:`` line (``mechanism``) names the failure modes of a diagnosis
that has found the defect: measurement data for the fault bench (``evotrainer/bench/faults.py``), which never
reaches the harness or the agents.

Generated defects (``evotrainer.harness.generated``: ``gen-SEED-K``, drawn from families across every layer) are
defects of the same kind: :func:`fault_dir` writes one's folder (overlay and card) on first use, and every function
here reads it as it reads a catalogued one. :func:`names` lists the catalogue only; :func:`known` says whether a name
is either.

Try it alone::

    python -m evotrainer.harness.faults                      # the catalogue, a line per defect
    python -m evotrainer.harness.faults truncation /tmp/h    # the faulty math seed in /tmp/h, then its card
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from evotrainer.harness.repo import seed_dir, shipped_roots

CARD = "CARD.md"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", CARD)


def _catalogue() -> dict[str, Path]:
    """Defect name -> its folder; a name in two roots is the first root's (the checkout before the installed)."""
    found: dict[str, Path] = {}
    for root in shipped_roots():
        for card in sorted((root / "faults").glob(f"*/{CARD}")):
            found.setdefault(card.parent.name, card.parent)
    return found


def names() -> list[str]:
    """The catalogued defects, sorted."""
    return sorted(_catalogue())


def known(name: str) -> bool:
    """A catalogued defect, or a generated one's name."""
    from evotrainer.harness import generated

    return name in _catalogue() or generated.is_name(name)


def fault_dir(name: str) -> Path:
    """The folder of a defect: its overlay files and card (a generated defect's written on first use); ValueError in
    one line for a name neither catalogued nor generated."""
    from evotrainer.harness import generated

    if generated.is_name(name):
        return generated.folder(name)
    catalogue = _catalogue()
    if name not in catalogue:
        raise ValueError(f"unknown fault {name!r} (known: {', '.join(sorted(catalogue)) or 'none'}, or a generated "
                         f"gen-SEED-K)")
    return catalogue[name]


def card(name: str) -> str:
    """The defect's card (Markdown): what is wrong, what a practitioner would see, what removes it."""
    return (fault_dir(name) / CARD).read_text()


def mechanism(name: str) -> list[str]:
    """The failure modes (``Diagnosis.failure_mode``) a diagnosis names when it has found the defect, from the card's
    ``Mechanism:`` line (e.g. ``Mechanism: `truncation`, `correct_but_truncated` ``); empty when the card has none.
    The fault bench's measure of a diagnosis, read from the card, so never by the agents."""
    found = re.search(r"^Mechanism:(.*)$", card(name), re.MULTILINE)
    return [m.strip(" `") for m in found.group(1).split(",") if m.strip(" `")] if found else []


def family(name: str) -> str | None:
    """The defect's family, the first word of the card's ``Family:`` line; None when the card has none."""
    found = re.search(r"^Family:\s*([\w-]+)", card(name), re.MULTILINE)
    return found.group(1) if found else None


def overlay(name: str) -> list[str]:
    """The files the defect puts over the clean seed, as paths relative to the harness folder, sorted."""
    folder = fault_dir(name)
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and p.name != CARD and "__pycache__" not in p.parts and p.suffix != ".pyc")


def materialize(domain: str, name: str, dest: Path | str) -> Path:
    """The faulty seed harness in ``dest`` (a folder that does not exist yet): the domain's clean seed with the
    defect's overlay copied over it. Returns ``dest``."""
    folder = fault_dir(name)  # an unknown name fails before anything is written
    dest = Path(dest)
    shutil.copytree(seed_dir(domain), dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(folder, dest, ignore=_IGNORE, dirs_exist_ok=True)
    return dest


def main(argv: list[str] | None = None) -> None:
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args:
        for name in names():
            wrong = card(name).split("## What is wrong", 1)[-1].strip().split("\n\n", 1)[0]
            print(f"{name:16} {' '.join(wrong.split())[:100]}")
        return
    name, dest = args[0], (args[1] if len(args) > 1 else f"faulty-{args[0]}")
    print(f"{materialize('math', name, dest)}: the math seed with {', '.join(overlay(name))} from the {name} overlay\n")
    print(card(name))


if __name__ == "__main__":
    main()
