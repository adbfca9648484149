"""Domains: task generators plus the evaluator-owned verifier and held-out split (never part of the harness)."""

from evotrainer.domains.base import Domain, Task

DOMAINS = ("math",)  # every domain get_domain knows (tests that must hold for every domain iterate over it)


def get_domain(name: str) -> Domain:
    if name == "math":
        from evotrainer.domains.math import MathDomain

        return MathDomain()
    raise ValueError(f"unknown domain {name!r} (available: {', '.join(DOMAINS)})")


__all__ = ["DOMAINS", "Domain", "Task", "get_domain"]
