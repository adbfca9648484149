"""Domains: task generators plus the evaluator-owned verifier and held-out split (never part of the harness)."""

from evotrainer.domains.base import Domain, Task


def get_domain(name: str) -> Domain:
    if name == "math":
        from evotrainer.domains.math import MathDomain

        return MathDomain()
    raise ValueError(f"unknown domain {name!r} (available: math)")


__all__ = ["Domain", "Task", "get_domain"]
