"""Rules about the text of a harness edit that the loop and the Engineers must agree on.

:func:`subtraction_problem` says whether an edit offered as a subtraction is one: the stalled run's escalation
(``evotrainer/loop/escalation.py``) asks the Engineers for a subtraction, and both the built-in and the LLM Engineer
hold their answers to this one rule. Alone: ``python -c "from evotrainer.harness.edits import only_deletes;
print(only_deletes('a\\nb', 'a'))"``.
"""

from __future__ import annotations

from typing import Callable

from evotrainer.contracts import Promotion
from evotrainer.harness.repo import HarnessRepo


def only_deletes(before: str | None, after: str) -> bool:
    """Whether ``after`` is ``before`` with some lines removed and none added or changed (order kept)."""
    if before is None:
        return False
    old, new = [line.rstrip() for line in before.splitlines()], [line.rstrip() for line in after.splitlines()]
    rest = iter(old)
    return len(new) < len(old) and all(line in rest for line in new)


def subtraction_problem(repo: HarnessRepo, edits: dict[str, str], before: Callable[[str], str | None],
                        promotions: list[Promotion]) -> str | None:
    """Why an edit offered as a subtraction is not one, or None when it is: it reverts an earlier promotion (every
    file it changes goes back to its text before that promotion's merge), or it only deletes (every file it
    changes loses lines and gains or changes none: changing a value, even by deleting characters, is no
    subtraction). ``edits`` is {file: new text}; ``before(file)`` the file at the base."""
    for promo in reversed(promotions):
        restored = repo.files_before(promo.main_sha, promo.candidate.files)
        if all(f in restored and restored[f] == t for f, t in edits.items()):
            return None
    grows = sorted(f for f, t in edits.items() if not only_deletes(before(f), t))
    if not grows:
        return None
    return (f"it neither reverts an earlier promotion nor only deletes lines: it adds or changes lines in (or removes "
            f"none from) {', '.join(grows)}; a subtraction deletes lines or undoes a promoted edit")
