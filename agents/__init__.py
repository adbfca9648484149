"""The five specialists of the evolution step, one module each, behind typed role interfaces.

    diagnostician.py   rollouts + history          -> Diagnosis[] with evidence
    critic.py          Diagnosis[] + evidence      -> confirmed / rejected (or: needs more evidence)
    engineer.py        confirmed Diagnosis[]       -> Candidate[] (one single-variable commit each)
    backtester.py      Candidate + retained rollouts -> BacktestReport (verdict promote | reject)
    librarian.py       outcomes                    -> Skills in Chroma; realized effect of promoted edits

Each role is picked by ``agents.<role>.model`` in the config. ``heuristic`` is the built-in deterministic
implementation (offline, no LLM); any other value is a litellm model and the role's LLM implementation answers
(``llm_diagnostician.py``, ``LLMCritic`` in ``critic.py``, ``llm_engineer.py``, ``LLMBacktester`` in
``backtester.py``, ``LLMLibrarian`` in ``librarian.py``; the call itself in ``llm.py``, prompts in ``prompts/``),
falling back to the built-in one per its ``fallbacks``. The interfaces take and return the pydantic contracts of
``evotrainer.contracts``, never free text, so an LLM-backed implementation can stand in for any role; the
interfaces and the evidence they read are in ``roles.py``. Beside them: ``modes.py`` (the one registry of failure
modes), ``playbook.py`` (the built-in Engineer's moves) with ``knob_moves.py`` (its table of harness.yaml knob moves) and ``move_kit.py`` (what every move is built from),
``edits.py`` (the LLM Engineer's search/replace blocks), ``evidence_tools.py`` (the LLM roles' SQL over rollouts),
``domains/`` (edits that know one domain's answer format). This module only builds the roles (:func:`build_agents`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.roles import Backtester, Critic, Diagnostician, Engineer, Librarian
from evotrainer.config import Config


@dataclass
class Agents:
    diagnostician: Diagnostician
    critic: Critic
    engineer: Engineer
    backtester: Backtester
    librarian: Librarian
    llm: Any = None  # the LLM roles' shared context (agents.llm.LLMContext), when any role is on an LLM

    def at_phase(self, phase: int) -> None:
        """The loop is at ``phase``: LLM calls are recorded under it (every role, resumed runs included)."""
        if self.llm is not None:
            self.llm.phase = phase


def build_agents(cfg: Config, skills_path: str, run_dir: Path | None = None) -> Agents:
    """Pick each role's implementation from ``agents.<role>.model``: the built-in one, or the LLM one around it
    (which falls back to it). With an LLM role, litellm's model lookup and key check run first (one line per
    problem, naming the role), and the run's price table is frozen into ``run_dir``."""
    from agents.backtester import HeuristicBacktester, LLMBacktester
    from agents.critic import HeuristicCritic, LLMCritic
    from agents.diagnostician import HeuristicDiagnostician
    from agents.engineer import HeuristicEngineer
    from agents.librarian import HeuristicLibrarian, LLMLibrarian

    builtin = {
        "diagnostician": HeuristicDiagnostician(),
        "critic": HeuristicCritic(max_confirmed=cfg.evolution.max_diagnoses),
        "engineer": HeuristicEngineer(max_candidates=cfg.evolution.max_candidates),
        "backtester": HeuristicBacktester(),
        "librarian": HeuristicLibrarian(skills_path, top_k=cfg.skills.top_k),
    }
    llm_roles = cfg.agents.uses_llm()
    if not llm_roles:
        return Agents(**builtin)
    from agents.llm import LLMContext, check_agents
    from agents.llm_diagnostician import LLMDiagnostician
    from agents.llm_engineer import LLMEngineer

    check_agents(cfg)
    ctx = LLMContext(cfg, run_dir)
    llm = {"diagnostician": LLMDiagnostician, "critic": LLMCritic, "engineer": LLMEngineer,
           "backtester": LLMBacktester, "librarian": LLMLibrarian}
    return Agents(**{r: llm[r](ctx, builtin[r]) if r in llm_roles else builtin[r] for r in builtin}, llm=ctx)
