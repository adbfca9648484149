"""A scripted LLM behind litellm's real call path: a litellm custom provider (``scripted/<name>``) whose answers a
test writes as a function of the conversation, so every LLM role runs through ``litellm.completion`` exactly as
with a hosted model (request building, response parsing, usage, cost, exceptions), offline.

    with scripted(lambda model, messages: '{"word": "hi"}') as calls:
        ...  # any role configured with model "scripted/x" gets that answer; `calls` records every request

An answer may be a string (the model's text) or an exception instance (raised as the provider's error: use
``litellm.Timeout`` / ``litellm.RateLimitError``). Usage is 10 prompt tokens and 5 per answer word.
"""

from __future__ import annotations

import contextlib
import json
from typing import Callable

from agents.llm import litellm

Answer = Callable[[str, list[dict]], "str | Exception"]


def role_of(messages: list[dict]) -> str:
    """Which role a conversation belongs to, from its system prompt ("You are the Engineer of ...")."""
    first = messages[0]["content"]
    for role in ("Diagnostician", "Critic", "Engineer", "Backtester", "Librarian"):
        if first.startswith(f"You are the {role}"):
            return role.lower()
    return "unknown"


def make_provider(answer: Answer, calls: list[dict]):
    lib = litellm()

    class Scripted(lib.CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            calls.append({"model": model, "messages": [dict(m) for m in messages], "api_base": kwargs.get("api_base"),
                          "response_format": kwargs.get("optional_params", {}).get("response_format")})
            out = answer(model, messages)
            if isinstance(out, Exception):
                raise out
            return lib.ModelResponse(
                model=model, choices=[{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": out}}],
                usage={"prompt_tokens": 10, "completion_tokens": 5 * len(out.split()),
                       "total_tokens": 10 + 5 * len(out.split())})

    return Scripted()


@contextlib.contextmanager
def scripted(answer: Answer, provider: str = "scripted"):
    """Register the provider for the block; yields the list of requests it received."""
    lib = litellm()
    from litellm.utils import custom_llm_setup

    calls: list[dict] = []
    saved = list(lib.custom_provider_map)
    lib.custom_provider_map = [*saved, {"provider": provider, "custom_handler": make_provider(answer, calls)}]
    custom_llm_setup()
    try:
        yield calls
    finally:
        lib.custom_provider_map = saved


def last_user(messages: list[dict]) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def dumps(obj) -> str:
    return json.dumps(obj)
