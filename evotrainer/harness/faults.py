"""The catalogue of seed-harness defects: realistic flaws of a first harness, each usable as a run's starting harness.

Each domain has its own catalogue: a defect is a folder ``harness_repo/faults/<domain>/<name>/``, an overlay of that
domain's clean seed harness (only the files that differ) and ``CARD.md``, which says what is wrong, what a
practitioner would see and what removes it. (The catalogue sits beside the seeds, not inside one: a seed folder is
copied whole into a run's harness repo.) A defect's name is unique over every domain, so a name alone finds it and
:func:`domain_of` says whose it is. The catalogue is read from the shipped harness folders (the source checkout, then
the installed data files: the roots ``seed_dir`` searches). ``materialize`` builds the faulty seed: its own domain's
clean seed with the overlay copied over it (the card stays behind, so nothing in the harness names the defect; another
domain's seed is refused). ``evotrainer init --fault NAME`` starts a run
from it (``Config.fault``). The card's ``Mechanism:`` line (``mechanism``) names the failure modes of a diagnosis
that has found the defect: measurement data for the fault bench (``evotrainer/bench/faults.py``), which never
reaches the harness or the agents.

Generated defects (``evotrainer.harness.generated``: ``gen-SEED-K``, drawn from a domain's families across every layer)
are defects of the same kind: :func:`fault_dir` writes one's folder (overlay and card) on first use, and every function
here reads it as it reads a catalogued one. :func:`names` lists the catalogue only; :func:`known` says whether a name is
either.

Try it alone::

    python -m evotrainer.harness.faults                      # the catalogue, a line per defect and its domain
    python -m evotrainer.harness.faults truncation /tmp/h    # its domain's faulty seed in /tmp/h, then its card
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from evotrainer.harness.repo import seed_dir, shipped_roots

CARD = "CARD.md"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", CARD)


def _catalogue() -> dict[str, Path]:
    """Defect name -> its folder (``faults/<domain>/<name>/``); a name in two roots is the first root's (the checkout
    before the installed); a name two domains of one root both catalogue is a ValueError in one line."""
    found: dict[str, Path] = {}
    for root in shipped_roots():
        mine: dict[str, Path] = {}
        for card in sorted((root / "faults").glob(f"*/*/{CARD}")):
            if (other := mine.setdefault(card.parent.name, card.parent)) != card.parent:
                raise ValueError(f"fault {card.parent.name!r} is catalogued for two domains ({other.parent.name} and "
                                 f"{card.parent.parent.name}): a defect's name must be unique")
        for name, folder in mine.items():
            found.setdefault(name, folder)
    return found


def names(domain: str | None = None) -> list[str]:
    """The catalogued defects, sorted: every domain's, or ``domain``'s only."""
    return sorted(name for name, folder in _catalogue().items() if domain is None or folder.parent.name == domain)


def domain_of(name: str) -> str:
    """The domain whose seed the defect ``name`` (catalogued or generated) is an overlay of; ValueError in one line
    for an unknown name."""
    from evotrainer.harness import generated

    if generated.is_name(name):
        return generated.domain_of(name)
    return fault_dir(name).parent.name


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
                         f"gen-[DOMAIN-]SEED-K)")
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


def check_domain(domain: str, name: str) -> None:
    """ValueError in one line unless the defect ``name`` is one of ``domain``'s (an overlay of another domain's seed
    would plant files that mean nothing there); an unknown name is a ValueError too."""
    owner = domain_of(name)
    if owner != domain:
        raise ValueError(f"fault {name!r} is a defect of the {owner} seed, not of {domain}'s (the {domain} catalogue: "
                         f"{', '.join(names(domain)) or 'none'})")


def materialize(domain: str, name: str, dest: Path | str) -> Path:
    """The faulty seed harness in ``dest`` (a folder that does not exist yet): the domain's clean seed with the
    defect's overlay copied over it; ValueError in one line for a defect of another domain. Returns ``dest``."""
    check_domain(domain, name)  # an unknown name, or another domain's, fails before anything is written
    folder = fault_dir(name)
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
            print(f"{name:16} {domain_of(name):8} {' '.join(wrong.split())[:90]}")
        return
    name, dest = args[0], (args[1] if len(args) > 1 else f"faulty-{args[0]}")
    domain = domain_of(name)
    print(f"{materialize(domain, name, dest)}: the {domain} seed with {', '.join(overlay(name))} from the {name} "
          "overlay\n")
    print(card(name))


if __name__ == "__main__":
    main()
