"""A run that stops on purpose and waits for someone: the human gate, or an LLM budget that is spent.

:class:`RunPaused` is raised inside a step (budget) and caught by ``evotrainer/run.py``, which records the run as
``paused`` with what it waits for; :func:`waiting_for` reads a LangGraph snapshot for an ``interrupt()`` (the human
gate) and says what the interrupt waits for. Both are shown by ``evotrainer status``.
"""

from __future__ import annotations

from typing import Any


class RunPaused(Exception):
    """The run stops here, keeps its state, and resumes with ``evotrainer run`` once ``waiting_for`` is met."""

    def __init__(self, waiting_for: str, detail: str):
        super().__init__(detail)
        self.waiting_for, self.detail = waiting_for, detail


def waiting_for(snapshot: Any) -> dict | None:
    """The payload of the graph's pending interrupt (the human gate's question), or None when none is pending."""
    for task in getattr(snapshot, "tasks", ()) or ():
        for intr in getattr(task, "interrupts", ()) or ():
            value = getattr(intr, "value", None)
            return value if isinstance(value, dict) else {"gate": str(value)}
    return None
