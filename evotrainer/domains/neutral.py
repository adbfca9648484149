"""The neutral form of each harness code layer: what a layer does when it adds nothing of its own.

A domain publishes its neutral forms in one place, ``evotrainer/domains/<domain>/neutral.py`` (a module-level
``NEUTRAL``, a :class:`Neutral`); the Engineer's moves back to neutral (``agents/playbook.py``) read it with
:func:`forms` and are not applicable where a file is already neutral. Each form is the source of one harness
function, written as harness code (it runs in the sandbox and cannot import this module):

    prompt.py      make_prompt   the evaluator's own prompt (``Domain.canonical_prompt``; ``Domain.instruction`` as
                                 one user message for a chat-template policy): training sees what is evaluated
    filters.py     keep_rollout, keep_group   keep everything: every generated rollout trains
    curriculum.py  weights       harness.yaml's curriculum_weights, unchanged: the knob decides (a level it does
                                 not name weighs 1.0, as a reward component reward_weights does not name)

The filters and the curriculum are the same for every domain (:data:`KEEP_ALL`, :data:`PASS_THROUGH`); a domain
names its prompts. The reward layer has no one neutral form: its moves remove or re-weight each component in turn.
``tests/test_moves.py`` holds a domain's neutral prompt to its evaluator's prompts. Alone:
``python -c "from evotrainer.domains.neutral import forms; print(forms('math'))"``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

KEEP_ALL = {
    "keep_rollout": "def keep_rollout(rollout: dict) -> bool:\n    return True\n",
    "keep_group": "def keep_group(group: list[dict]) -> bool:\n    return True\n",
}
PASS_THROUGH = {
    "weights": "def weights(levels: list[str], base: dict[str, float], history: dict[str, dict]) -> dict[str, float]:"
               "\n    return {level: float(base.get(level, 1.0)) for level in levels}\n",
}


@dataclass(frozen=True)
class Neutral:
    """A domain's neutral harness code: harness file -> {function name: its source}.

    ``prompt`` is prompt.py's ``make_prompt`` for a plain policy (the canonical text), ``chat_prompt`` the one for a
    chat-template policy (the instruction as one user message): which of the two is neutral follows the form the
    harness's prompt already has (text or messages), since the harness cannot see which policy trains."""

    prompt: str
    chat_prompt: str
    filters: dict[str, str] = field(default_factory=lambda: dict(KEEP_ALL))
    curriculum: dict[str, str] = field(default_factory=lambda: dict(PASS_THROUGH))

    def files(self, chat: bool = False) -> dict[str, dict[str, str]]:
        """harness file -> {function: neutral source}, with the prompt of the given form."""
        return {"prompt.py": {"make_prompt": self.chat_prompt if chat else self.prompt},
                "filters.py": dict(self.filters), "curriculum.py": dict(self.curriculum)}


def forms(domain: str) -> Neutral | None:
    """``evotrainer.domains.<domain>.neutral.NEUTRAL``, or None for a domain that publishes none."""
    if not domain.isidentifier():
        raise ValueError(f"bad domain name {domain!r}")
    name = f"evotrainer.domains.{domain}.neutral"
    try:
        return importlib.import_module(name).NEUTRAL
    except ModuleNotFoundError as err:
        if err.name not in (name, f"evotrainer.domains.{domain}"):
            raise  # the module exists but one of its imports is missing: a bug, not "no neutral forms"
        return None
