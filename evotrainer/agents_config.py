"""The ``agents`` section of the config: which LLM (or the built-in agent) plays each role, and the run's LLM budget.

    agents:
      default:   {model: heuristic, api_base: null, temperature: 0.2, max_tokens: 2048, timeout: 120,
                  retries: 2, fallbacks: [], params: {}, tool_rounds: 6}
      engineer:  {model: openai/gpt-4o-mini, fallbacks: [heuristic]}   # unset fields inherit agents.default
      critic:    {model: openai/qwen, api_base: "http://gpu-box:8000/v1",
                  fallbacks: [{model: openai/smollm2, api_base: "http://127.0.0.1:8080/v1"}, heuristic]}
      budget:    {max_usd: 5.0, max_tokens: null, on_exhausted: fallback}

``model`` is ``heuristic`` (the built-in deterministic agent, the offline default) or any litellm model string
(``openai/gpt-4o-mini``, ``anthropic/claude-...``, ``ollama/llama3``, ``openai/<name>`` with ``api_base`` for any
OpenAI-compatible server). API keys come from the environment only (``OPENAI_API_KEY``, ...): a credential anywhere
in ``params`` (a secret-like name at any depth, such as an ``Authorization`` or ``x-api-key`` header, or a key-like
value) or in an ``api_base`` URL (``user:pass@``, a key-like query parameter) is refused here, in one line that names
where it sits and never echoes it. Whether litellm knows each model and finds its key is checked at ``init``/``run`` start
by :func:`agents.llm.check_agents` (it needs litellm, which this module never imports).

Try it alone::

    python -c "from evotrainer.config import parse; \\
      print(parse({'agents': {'critic': {'model': 'openai/x'}}}).agents.role('critic'))"
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Callable, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag

ROLES = ("diagnostician", "critic", "engineer", "backtester", "librarian")
HEURISTIC = "heuristic"
# words that mark a name (provider parameter, HTTP header, URL query parameter, environment variable) as a secret;
# secrets come from the environment only. Read through secret_like().
SECRET_WORDS = ("key", "token", "secret", "password", "credential", "authorization")
# values that are credentials whatever they are called: HTTP credentials and the providers' key prefixes
KEY_VALUE = re.compile(r"(?i:\b(?:bearer|basic)\s+[\w.~+/=-]{8,})|\b(?:sk|pk|rk)-[\w-]{8,}|"
                       r"\b(?:hf|ghp|gho|ghs|ghu|glpat|xox[abprs])[-_][\w-]{10,}|\bAIza[\w-]{20,}|\bAKIA[0-9A-Z]{16}\b")
REFUSED = "keys come from the environment only (e.g. OPENAI_API_KEY), never from the config"


def secret_like(name: str) -> bool:
    """Whether ``name`` reads like a secret: it holds one of SECRET_WORDS (a count of tokens, such as max_tokens or
    budget_tokens, is not one)."""
    low = name.lower()
    return any(w in low for w in SECRET_WORDS) and not low.endswith("tokens")


# --- credentials are refused wherever they sit -------------------------------------------------------------
def params_secrets(value: Any, path: str = "") -> list[str]:
    """Where a ``params`` tree holds a credential: keys with a secret-like name (at any depth: a header such as
    ``extra_headers.Authorization``), and strings that look like a key."""
    if isinstance(value, dict):
        return [p for k, v in value.items()
                for p in ([f"{path}{k}"] if secret_like(str(k)) else params_secrets(v, f"{path}{k}."))]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in params_secrets(v, f"{path}{i}.")]
    return [path.rstrip(".") or "the value"] if isinstance(value, str) and KEY_VALUE.search(value) else []


def url_secrets(url: Any) -> list[str]:
    """Where an ``api_base`` URL holds a credential: a user or password (``user:pass@``), a query parameter with a
    secret-like name or a key-like value, or a key-like string anywhere in it."""
    if not isinstance(url, str) or not url:
        return []
    try:
        parts = urlsplit(url)
        if parts.username or parts.password:
            return ["its user:password@ part"]
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:  # not a URL pydantic or litellm can use either; nothing to refuse here
        return []
    found = [f"query parameter {name!r}" for name, value in query if secret_like(name) or KEY_VALUE.search(value)]
    return found or (["a key-like string in it"] if KEY_VALUE.search(url) else [])


class _Refused:
    """Stands in for a value refused as a credential, so the config's error line names where it sits but shows
    '***' where it would echo the value."""

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return "'***'"


def _raise_refused(v: Any) -> Any:
    if isinstance(v, _Refused):
        raise ValueError(v.why)
    return v


def _refusing(find: Callable[[Any], list[str]]) -> tuple[BeforeValidator, BeforeValidator]:
    """Validators (in Annotated order) that refuse a value in which ``find`` names a credential."""
    def mask(v: Any) -> Any:
        where = find(v)
        return _Refused(f"{', '.join(where)}: {REFUSED}") if where else v
    return BeforeValidator(_raise_refused), BeforeValidator(mask)  # the last runs first


_PARAMS, _API_BASE = _refusing(params_secrets), _refusing(url_secrets)
Params = Annotated[dict[str, Any], _PARAMS[0], _PARAMS[1]]  # (no star in a subscript: Python 3.10 reads this)
ApiBase = Annotated[str | None, _API_BASE[0], _API_BASE[1]]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Fallback(_Section):
    """A fallback on a server of its own (a bare model name in ``fallbacks`` uses its provider's endpoint)."""

    model: str = Field(min_length=1, description="a litellm model string")
    api_base: ApiBase = Field(None, description="URL of this model's server; empty = the provider's endpoint")


def _model_of(entry: "str | Fallback") -> str:
    return entry if isinstance(entry, str) else entry.model


def _entry_kind(v: Any) -> str:
    return "str" if isinstance(v, str) else "Fallback"


# a bare model name, or {model, api_base}; the discriminator validates each entry against its own kind only
Entry = Annotated[Annotated[str, Tag("str")] | Annotated[Fallback, Tag("Fallback")], Discriminator(_entry_kind)]


def _check_fallbacks(v: list | None) -> list | None:
    names = [_model_of(m) for m in v or []]
    if HEURISTIC in names[:-1]:
        raise ValueError("'heuristic' may only be the last fallback (nothing after it is ever tried)")
    if any(not m.strip() for m in names):
        raise ValueError("a fallback model is empty")
    if any(not isinstance(m, str) and m.model == HEURISTIC and m.api_base for m in v or []):
        raise ValueError("'heuristic' is the built-in agent: it has no api_base")
    return v


Models = Annotated[list[Entry], AfterValidator(_check_fallbacks)]


class LLMSettings(_Section):
    """How one role calls its LLM (``agents.default``, and every role once resolved)."""

    model: str = Field(HEURISTIC, min_length=1, description="'heuristic' = the built-in deterministic agent; or a "
                       "litellm model string, e.g. openai/gpt-4o-mini, anthropic/claude-haiku-4-5, "
                       "openai/<name> with api_base for an OpenAI-compatible server")
    api_base: ApiBase = Field(None, description="URL of the model's server (local or self-hosted); empty = the "
                              "provider's own endpoint; never with a key in it")
    temperature: float = Field(0.2, ge=0, le=2, description="sampling temperature of the role's calls")
    max_tokens: int = Field(2048, ge=16, description="most tokens one answer may have")
    timeout: float = Field(120, gt=0, description="seconds one call may take before the next fallback is tried")
    retries: int = Field(2, ge=0, description="times an invalid answer (bad JSON, schema, or an edit that does not "
                         "apply) is sent back with the error before the next fallback is tried")
    fallbacks: Models = Field(default_factory=list, description="models tried in order when one fails: a litellm "
                              "model string, or {model, api_base} for one on a server of its own; may end in "
                              "'heuristic' (then the built-in agent answers)")
    params: Params = Field(default_factory=dict, description="extra provider parameters passed to litellm "
                                   "(e.g. top_p, seed); never keys")
    tool_rounds: int = Field(6, ge=1, description="most tool calls (queries, samples) a role makes before it must "
                             "answer")


    @property
    def endpoints(self) -> list[tuple[str, str | None]]:
        """(model, api_base) in the order tried: the role's model on the role's api_base, then each fallback on its
        own api_base (none for a bare model name: its provider's endpoint)."""
        return [(self.model, self.api_base),
                *((f, None) if isinstance(f, str) else (f.model, f.api_base) for f in self.fallbacks)]

    @property
    def chain(self) -> list[str]:
        """The models tried in order: the role's model, then its fallbacks."""
        return [m for m, _ in self.endpoints]

    @property
    def uses_llm(self) -> bool:
        """Whether the role runs on an LLM (a ``heuristic`` model never reaches its fallbacks)."""
        return self.model != HEURISTIC


class RoleSettings(_Section):
    """One role's settings; a field left empty takes its value from ``agents.default``."""

    model: str | None = Field(None, min_length=1, description="the role's model (empty = agents.default.model)")
    api_base: ApiBase = Field(None, description="the role's server URL (empty = agents.default.api_base)")
    temperature: float | None = Field(None, ge=0, le=2, description="empty = agents.default.temperature")
    max_tokens: int | None = Field(None, ge=16, description="empty = agents.default.max_tokens")
    timeout: float | None = Field(None, gt=0, description="empty = agents.default.timeout")
    retries: int | None = Field(None, ge=0, description="empty = agents.default.retries")
    fallbacks: Models | None = Field(None, description="empty = agents.default.fallbacks")
    params: Params | None = Field(None, description="merged over agents.default.params")
    tool_rounds: int | None = Field(None, ge=1, description="empty = agents.default.tool_rounds")



class BudgetConfig(_Section):
    max_usd: float | None = Field(None, ge=0, description="most US dollars the run's LLM calls may cost (priced by "
                                  "litellm from the price table frozen in RUN_DIR/prices.json); empty = no limit")
    max_tokens: int | None = Field(None, ge=0, description="most tokens (prompt + completion) the run's LLM calls may "
                                   "use; empty = no limit")
    on_exhausted: Literal["fallback", "pause"] = Field(
        "fallback", description="when the budget is spent: 'fallback' = LLM roles use the built-in agents from then "
        "on; 'pause' = the run pauses (raise the budget in config.yaml, then `evotrainer run` resumes)")


class AgentsConfig(_Section):
    default: LLMSettings = Field(default_factory=LLMSettings, description="settings every role inherits")
    diagnostician: RoleSettings = Field(default_factory=RoleSettings, description="reads rollouts, diagnoses")
    critic: RoleSettings = Field(default_factory=RoleSettings, description="confirms or rejects diagnoses")
    engineer: RoleSettings = Field(default_factory=RoleSettings, description="turns diagnoses into harness edits")
    backtester: RoleSettings = Field(default_factory=RoleSettings, description="judges candidates on replay")
    librarian: RoleSettings = Field(default_factory=RoleSettings, description="keeps skills across phases")
    budget: BudgetConfig = Field(default_factory=BudgetConfig, description="the run's LLM budget")

    def role(self, name: str) -> LLMSettings:
        """The settings ``name`` runs with: its own fields over ``agents.default`` (params merged)."""
        own = getattr(self, name).model_dump(exclude_none=True)
        merged = {**self.default.model_dump(), **own}
        merged["params"] = {**self.default.params, **own.get("params", {})}
        return LLMSettings.model_validate(merged)

    def uses_llm(self) -> list[str]:
        """The roles that run on an LLM."""
        return [r for r in ROLES if self.role(r).uses_llm]
