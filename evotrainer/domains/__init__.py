"""Domains: each one registered unit: its evaluator (tasks in the four splits, the verifier, the canonical prompt:
``evotrainer/domains/<name>/``, a :class:`Domain`), its seed harness (``harness_repo/<seed>/``) and what the
framework derives from them (the Engineer's moves, the neutral forms, the reward pentest's null probes).

A domain package registers itself here with one :func:`register` call (name, the module and class of its evaluator,
its seed folder); :func:`get_domain`, :data:`DOMAINS` and the config's ``domain`` check read only this registry, so
a new domain is one package and one line below, and every test that iterates :data:`DOMAINS` covers it. What the
domains share: ``base.py`` (the :class:`Domain` interface), ``draws.py`` (the four splits drawn from a level's space),
``neutral.py`` (each code layer's neutral form), ``execute.py`` and ``execute_worker.py`` (the policy-code
executor). Alone::

    python -c "from evotrainer.domains import DOMAINS, spec; print([spec(d) for d in DOMAINS])"
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from evotrainer.domains.base import Domain, Task
from evotrainer.domains.execute import ExecLimits


@dataclass(frozen=True)
class DomainSpec:
    """A registered domain: ``module``'s ``cls`` is its evaluator (imported when first asked for: the trainer and
    the harness never import a domain they do not run), ``seed`` the folder of its seed harness in harness_repo/
    (its defect catalogue is ``harness_repo/faults/<name>/``: ``evotrainer.harness.faults``), ``demo_fault`` the
    catalogue defect ``evotrainer demo --domain NAME`` plants unless told otherwise (None: the clean seed)."""

    name: str
    module: str
    cls: str
    seed: str
    demo_fault: str | None = None


_REGISTRY: dict[str, DomainSpec] = {}


def register(name: str, module: str, cls: str, seed: str | None = None, demo_fault: str | None = None) -> DomainSpec:
    """Register domain ``name`` (its seed folder is ``seed``, by default the name); a name registered twice with
    another spec is a ValueError."""
    new = DomainSpec(name=name, module=module, cls=cls, seed=seed or name, demo_fault=demo_fault)
    old = _REGISTRY.setdefault(name, new)
    if old != new:
        raise ValueError(f"domain {name!r} is registered twice ({old.module}.{old.cls} and {module}.{cls})")
    return new


def spec(name: str) -> DomainSpec:
    """The registered domain ``name``; ValueError in one line naming the registered ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown domain {name!r} (registered: {', '.join(_REGISTRY)})") from None


def get_domain(name: str, limits: ExecLimits | None = None) -> Domain:
    """A fresh evaluator of the registered domain ``name``; ``limits`` are those of the policy code it runs (the
    run's ``executor`` section; default: ``ExecLimits()``), read by a domain that runs policy code (code)."""
    s = spec(name)
    return getattr(importlib.import_module(s.module), s.cls)(limits)


register("math", "evotrainer.domains.math", "MathDomain", demo_fault="reward_hacking")
# the tools demo: a turn cap one turn short of the two-key questions' transcripts (the Diagnostician reads turn_cap_hit
# off the capped rollouts' new calls, and raise_max_turns lifts the cap by the answer's turn)
register("tools", "evotrainer.domains.tools", "ToolsDomain", demo_fault="short_cap")
# the code demo: a reward that pays every body that runs, test failures included (the Diagnostician sees it from the
# first phase, the pentest rejects it, and the code domain's verifier_aligned_reward rewrites it to the evaluator's
# rule; its self-tests pin no leniency, so the repair passes them)
register("code", "evotrainer.domains.code", "CodeDomain", demo_fault="exit_status")

DOMAINS = tuple(_REGISTRY)  # every registered domain (tests that must hold for every domain iterate over it)

__all__ = ["DOMAINS", "Domain", "DomainSpec", "Task", "get_domain", "register", "spec"]
