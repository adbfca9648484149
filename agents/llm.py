"""One typed LLM call through litellm, for any role: schema, validation, retries, fallbacks, budget, audit.

A :class:`Conversation` asks the role's model for an answer of a pydantic type. Each attempt sends the schema as
the response format where the provider takes one (``json_schema`` for models litellm says support it,
``{"type": "json_object", "schema": ...}`` for servers at an ``api_base`` such as llama.cpp's), and always in the
system prompt; the answer is parsed and validated, and may be checked further (``check`` returns an error text).
An invalid answer goes back to the model with the error (``retries`` times), then the next model of
``[model, *fallbacks]`` is tried from where the conversation stands; a timeout, rate limit or other API error
moves to the next model at once. Reaching ``heuristic`` raises :class:`UseBuiltin` (the role's built-in agent
answers); a chain that ends without it returns ``None`` (the role answers nothing). Nothing here stops a run,
except a spent budget with ``on_exhausted: pause`` (:class:`~evotrainer.pause.RunPaused`).

Every attempt is one ``llm_call`` event (role, model, tokens, cost from litellm, latency, outcome, the raw
answer); spend is kept in ``RUN_DIR/llm_spend.json`` so the budget holds across resumes, and the price table of the
configured models is frozen into ``RUN_DIR/prices.json`` at start (:func:`freeze_prices`) so a resumed run prices
the same. litellm is imported lazily (about 3 s), only when a role uses an LLM.

Try it alone (any OpenAI-compatible server)::

    python -c "from agents.llm import Conversation; from evotrainer.agents_config import LLMSettings; \\
      from pydantic import BaseModel; A = type('A', (BaseModel,), {'__annotations__': {'word': str}}); \\
      print(Conversation('demo', LLMSettings(model='openai/x', api_base='http://127.0.0.1:8080/v1'), None, \\
      'Answer in JSON.').ask('Say a word.', A))"
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from pydantic import BaseModel, ValidationError

from evotrainer.agents_config import HEURISTIC, ROLES, BudgetConfig, LLMSettings, secret_like
from evotrainer.atomic import write_text
from evotrainer.config import Config, ConfigError
from evotrainer.events import EventLog
from evotrainer.pause import RunPaused

T = TypeVar("T", bound=BaseModel)
ANSWER_CHARS = 4000  # of each raw answer kept in events.jsonl
PLACEHOLDER_KEY = "sk-no-key"  # sent to servers at an api_base when the environment has no key for them


class UseBuiltin(Exception):
    """The chain reached ``heuristic`` (or the budget fell back): the role's built-in agent answers."""


def litellm():
    """litellm, imported on first use, with its price table read from the installed package (nothing fetched). The
    one place the project imports litellm, so the one place that says so (before the import, which reads it)."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm as lib

    lib.suppress_debug_info = True
    lib.telemetry = False
    return lib


def redact(text: str) -> str:
    """``text`` with the value of every secret-like environment variable (the config's rule) masked: errors can
    echo headers."""
    for name, value in os.environ.items():
        if len(value) >= 8 and secret_like(name):
            text = text.replace(value, "***")
    return text


# --- start-of-run checks and the frozen price table ------------------------------------------------------------
def check_agents(cfg: Config) -> None:
    """Every LLM a role may call is known to litellm and has its key: else one ConfigError line per problem."""
    roles = cfg.agents.uses_llm()
    if not roles:
        return
    lib = litellm()
    problems = []
    for role in roles:
        s = cfg.agents.role(role)
        for model, api_base in (e for e in s.endpoints if e[0] != HEURISTIC):
            problem = _model_problem(lib, model, api_base)
            if problem:
                problems.append(f"agents.{role}: model {model!r}: {problem}")
    if problems:
        raise ConfigError("\n".join(dict.fromkeys(problems)))


def _model_problem(lib, model: str, api_base: str | None) -> str | None:
    try:
        _, provider, _, _ = lib.get_llm_provider(model)
    except Exception:
        return "litellm does not know this model's provider (write it as provider/model, e.g. openai/gpt-4o-mini)"
    if api_base:  # a server of the user's own: litellm cannot know its models, nor whether it needs a key
        return None
    if provider not in lib._custom_providers:
        try:
            lib.get_model_info(model)
        except Exception:
            return (f"litellm has no model of this name for provider {provider!r} (check the name, or set api_base "
                    "for a self-hosted server)")
    env = lib.validate_environment(model)
    if not env.get("keys_in_environment", True):
        return f"missing {', '.join(env.get('missing_keys') or ['its API key'])} in the environment"
    return None


def _price_key(lib, model: str) -> str | None:
    for key in (model, model.split("/", 1)[-1]):
        if key in lib.model_cost:
            return key
    return None


def freeze_prices(cfg: Config, run_dir: Path) -> dict:
    """Write the configured models' litellm prices to ``RUN_DIR/prices.json`` once; register that table on resume."""
    path = Path(run_dir) / "prices.json"
    lib = litellm()
    if path.exists():
        table = json.loads(path.read_text())
    else:
        models = {m for r in cfg.agents.uses_llm() for m in cfg.agents.role(r).chain if m != HEURISTIC}
        table = {k: lib.model_cost[k] for k in sorted(filter(None, (_price_key(lib, m) for m in models)))}
        path.write_text(json.dumps(table, indent=1, sort_keys=True))
    if table:
        lib.register_model(table)
    return table


# --- spend ---------------------------------------------------------------------------------------------------
class Ledger:
    """What the run's LLM calls have cost so far (``RUN_DIR/llm_spend.json``; in memory without a run directory)."""

    def __init__(self, run_dir: Path | None, budget: BudgetConfig):
        self.path = Path(run_dir) / "llm_spend.json" if run_dir else None
        self.budget = budget
        self.spent = {"usd": 0.0, "tokens": 0, "calls": 0}
        if self.path and self.path.exists():
            self.spent.update(json.loads(self.path.read_text()))

    def add(self, usd: float, tokens: int) -> None:
        self.spent = {"usd": self.spent["usd"] + usd, "tokens": self.spent["tokens"] + tokens,
                      "calls": self.spent["calls"] + 1}
        if self.path:
            write_text(self.path, json.dumps(self.spent))

    def exhausted(self) -> str | None:
        b = self.budget
        if b.max_usd is not None and self.spent["usd"] >= b.max_usd:
            return f"agents.budget.max_usd={b.max_usd} spent (${self.spent['usd']:.4f})"
        if b.max_tokens is not None and self.spent["tokens"] >= b.max_tokens:
            return f"agents.budget.max_tokens={b.max_tokens} spent ({self.spent['tokens']} tokens)"
        return None


class LLMContext:
    """What every role's calls share in one run: its event log, its ledger and the budget policy."""

    def __init__(self, cfg: Config, run_dir: Path | None = None, events: EventLog | None = None):
        self.cfg, self.run_dir = cfg, Path(run_dir) if run_dir else None
        self.events = events or (EventLog(self.run_dir / "events.jsonl") if self.run_dir else None)
        self.ledger = Ledger(self.run_dir, cfg.agents.budget)
        self.phase = 0
        if self.run_dir and cfg.agents.uses_llm():
            freeze_prices(cfg, self.run_dir)

    def emit(self, kind: str, **fields: Any) -> None:
        if self.events:
            self.events.emit(kind, phase=self.phase, **fields)

    def settings(self, role: str) -> LLMSettings:
        assert role in ROLES, role
        return self.cfg.agents.role(role)


# --- one conversation ----------------------------------------------------------------------------------------
def schema_text(schema: type[BaseModel]) -> str:
    return json.dumps(schema.model_json_schema(), separators=(",", ":"))


def parse_answer(text: str, schema: type[T]) -> T:
    """The first JSON object in ``text`` (code fences allowed), validated as ``schema``; ValueError says why not."""
    m = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    body = (m.group(1) if m else text).strip()
    start = body.find("{")
    if start < 0:
        raise ValueError("the answer holds no JSON object")
    try:
        data, _ = json.JSONDecoder(strict=False).raw_decode(body[start:])  # raw newlines in strings are fine
    except json.JSONDecodeError as err:
        raise ValueError(f"the answer is not valid JSON: {err}") from None
    try:
        return schema.model_validate(data)
    except ValidationError as err:
        lines = [f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in err.errors()[:6]]
        raise ValueError("the JSON does not match the schema: " + "; ".join(lines)) from None


class Conversation:
    """A role's exchange with its model chain; the model that answered last keeps the turn."""

    def __init__(self, role: str, settings: LLMSettings, ctx: LLMContext | None, system: str,
                 purpose: str = ""):
        self.role, self.s, self.ctx, self.purpose = role, settings, ctx, purpose
        self.messages: list[dict] = [{"role": "system", "content": system}]
        self.index = 0  # position in the chain
        self._schema = ""  # the schema last written into the conversation
        self.chain = settings.endpoints  # (model, api_base), in the order tried
        self.ledger = ctx.ledger if ctx else Ledger(None, BudgetConfig())

    def ask(self, prompt: str, schema: type[T], check: Callable[[T], str | None] | None = None) -> T | None:
        """Send ``prompt`` and return a valid answer, or None when every model failed and none is ``heuristic``."""
        said = schema_text(schema)  # sent once per conversation: later turns point back to it
        self.messages.append({"role": "user", "content": f"{prompt}\n\nAnswer with one JSON object matching " + (
            f"this JSON schema, nothing else:\n{said}" if said != self._schema else "the JSON schema given above.")})
        self._schema = said
        while self.index < len(self.chain):
            model, api_base = self.chain[self.index]
            if model == HEURISTIC:
                self._emit(model, 0, "builtin", 0.0, {}, 0.0)
                raise UseBuiltin(f"{self.role}: chain reached heuristic")
            answer = self._try_model(model, api_base, schema, check)
            if answer is not None:
                return answer
            self.index += 1
        return None

    def note(self, text: str) -> None:
        """Add what a tool returned (or other context) to the conversation, as the user's next turn."""
        self.messages.append({"role": "user", "content": text})

    def _try_model(self, model: str, api_base: str | None, schema: type[T], check) -> T | None:
        lib = litellm()
        start = len(self.messages)
        for attempt in range(1, self.s.retries + 2):
            spent = self.ledger.exhausted()
            if spent:
                self._over_budget(model, spent)
            t0 = time.time()
            usage: dict = {}
            cost = 0.0
            try:
                resp = lib.completion(**self._request(lib, model, api_base, schema))
                text = resp.choices[0].message.content or ""
                u = getattr(resp, "usage", None)
                usage = {"prompt_tokens": getattr(u, "prompt_tokens", 0) or 0,
                         "completion_tokens": getattr(u, "completion_tokens", 0) or 0}
                try:
                    cost = float(lib.completion_cost(completion_response=resp, model=model) or 0.0)
                except Exception:  # no price known for this model: its calls count tokens only
                    cost = 0.0
            except Exception as err:
                self.ledger.add(0.0, 0)
                self._emit(model, attempt, "error", time.time() - t0, usage, cost,
                           error=redact(f"{type(err).__name__}: {err}")[:400])
                break
            self.ledger.add(cost, sum(usage.values()))
            try:
                answer = parse_answer(text, schema)
                problem = check(answer) if check else None
                if problem:
                    raise ValueError(problem)
            except ValueError as err:
                self._emit(model, attempt, "invalid", time.time() - t0, usage, cost, error=str(err)[:600],
                           answer=text[:ANSWER_CHARS])
                self.messages += [{"role": "assistant", "content": text},
                                  {"role": "user", "content": f"That answer was not accepted: {err}\nAnswer again "
                                   "with one JSON object that fixes this."}]
                continue
            self._emit(model, attempt, "ok", time.time() - t0, usage, cost, answer=text[:ANSWER_CHARS])
            del self.messages[start:]  # keep the accepted exchange only, not the failed attempts
            self.messages.append({"role": "assistant", "content": text})
            return answer
        del self.messages[start:]
        return None

    def _request(self, lib, model: str, api_base: str | None, schema: type[BaseModel]) -> dict:
        s = self.s
        req: dict[str, Any] = {"model": model, "messages": list(self.messages), "temperature": s.temperature,
                               "max_tokens": s.max_tokens, "timeout": s.timeout, "num_retries": 0,
                               "drop_params": True, "response_format": _response_format(lib, model, schema, api_base),
                               **s.params}
        if api_base:
            req["api_base"] = api_base
            _, provider, _, _ = lib.get_llm_provider(model)
            if not lib.validate_environment(model).get("keys_in_environment", True) and provider == "openai":
                req["api_key"] = PLACEHOLDER_KEY  # a local server that needs no key still wants the header
        return req

    def _over_budget(self, model: str, why: str) -> None:
        self._emit(model, 0, "budget", 0.0, {}, 0.0, error=why)
        if self.ctx and self.ctx.cfg.agents.budget.on_exhausted == "pause":
            raise RunPaused("budget", f"LLM budget spent: {why}; raise it in config.yaml, then `evotrainer run` "
                            "resumes")
        raise UseBuiltin(why)

    def _emit(self, model: str, attempt: int, outcome: str, seconds: float, usage: dict, cost: float,
              **extra: Any) -> None:
        if self.ctx:
            self.ctx.emit("llm_call", role=self.role, purpose=self.purpose, model=model, attempt=attempt,
                          outcome=outcome, latency_s=round(seconds, 3), cost_usd=cost,
                          prompt_tokens=usage.get("prompt_tokens", 0),
                          completion_tokens=usage.get("completion_tokens", 0), **extra)


# Length bounds stay in the pydantic models (every answer is validated against them) but are not sent: a grammar
# engine unrolls ``maxLength: 600`` into 600 nested optional rules, which llama.cpp's server refuses ("number of
# rules ... exceeds sane defaults") and then aborts on, and providers' strict schema modes reject some of them.
UNSENT_BOUNDS = frozenset({"minLength", "maxLength", "minItems", "maxItems"})


def wire_schema(schema: type[BaseModel]) -> dict:
    """The JSON schema sent to a model: ``schema``'s, less the length bounds (checked on the answer instead)."""
    def strip(node):
        if isinstance(node, dict):  # a schema node; the keys of its "properties" and "$defs" are names, kept
            return {k: ({n: strip(sub) for n, sub in v.items()} if k in ("properties", "$defs") else strip(v))
                    for k, v in node.items() if k not in UNSENT_BOUNDS}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    return strip(schema.model_json_schema())


def _response_format(lib, model: str, schema: type[BaseModel], api_base: str | None) -> dict:
    """The schema in the form the provider takes: json_schema where litellm says it is supported, the json_object
    form with the schema (llama.cpp's server, custom providers) for a server of one's own, else plain JSON mode."""
    js = wire_schema(schema)
    provider = lib.get_llm_provider(model)[1]
    if api_base or provider in lib._custom_providers:
        return {"type": "json_object", "schema": js}
    try:
        if lib.supports_response_schema(model=model):
            return {"type": "json_schema", "json_schema": {"name": schema.__name__, "schema": js}}
    except Exception:  # unknown to litellm's table: plain JSON mode
        pass
    return {"type": "json_object"}


def prompt_text(role: str) -> str:
    """The role's system prompt: ``agents/prompts/<role>.md`` (users may edit it)."""
    return (Path(__file__).parent / "prompts" / f"{role}.md").read_text()


class LLMRole:
    """What every LLM-backed role shares: its settings, the run's context, and its built-in agent to fall back on."""

    role = ""

    def __init__(self, ctx: LLMContext, builtin: Any):
        self.ctx, self.builtin = ctx, builtin
        self.settings = ctx.settings(self.role)
        self.name = self.settings.model

    def conversation(self, purpose: str, extra_system: str = "") -> Conversation:
        system = prompt_text(self.role) + (f"\n\n{extra_system}" if extra_system else "")
        return Conversation(self.role, self.settings, self.ctx, system, purpose)

    def ask_once(self, purpose: str, prompt: str, schema: type[T]) -> T | None:
        """One question; None when the built-in agent should answer or no model answered (the caller keeps its
        own result then)."""
        try:
            return self.conversation(purpose).ask(prompt, schema)
        except UseBuiltin:
            return None
