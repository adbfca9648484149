"""What a runner's response may look like, checked before any framework code uses it.

The runner validates what harness code returns, but harness code runs in the runner's process and can write to
the protocol stream itself (a forged line of the wrong type, absurd nesting or size). So the worker trusts
nothing: every response is parsed with a depth limit and checked against its op's shape here -- types, lengths
that match the request, finite numbers, bounded strings and attempt records -- and anything else is a
``ResponseError`` (the worker turns it into a rejection of the harness call, never a crash of the caller).

Try it alone: ``python -c "from sandbox.responses import check; check('score', {'samples': [{}]}, [{'a': 1.0}])"``.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_TEXT = 64 << 20  # characters in one string of a result (a prompt, an error line, a help text)
MAX_NAMES = 1000  # reward components, diagnostics, levels
MAX_ATTEMPTS = 50


class ResponseError(ValueError):
    """A response that the runner cannot have sent: harness code forged it or corrupted the stream."""


def parse(line: bytes) -> dict:
    """A response line as a dict with a bool ``ok``; ResponseError for garbage, absurd nesting or another shape."""
    try:
        response = json.loads(line)
    except RecursionError:
        raise ResponseError("a response nested deeper than JSON can be read") from None
    except (ValueError, MemoryError) as exc:
        raise ResponseError(f"garbage instead of a protocol response: {line[:120].decode('utf-8', 'replace')!r}"
                            f" ({type(exc).__name__})") from None
    if not isinstance(response, dict) or type(response.get("ok")) is not bool:
        raise ResponseError(f"a response that is not an object with a boolean 'ok': {line[:120]!r}")
    return response


def attempts(response: dict) -> list[dict]:
    """The response's ``attempts``, each ``{kind, what, where}`` with short strings."""
    raw = response.get("attempts", [])
    if not isinstance(raw, list) or len(raw) > MAX_ATTEMPTS:
        raise ResponseError("'attempts' is not a list of at most 50 records")
    out = []
    for item in raw:
        if not (isinstance(item, dict) and all(isinstance(item.get(k), str) and len(item[k]) <= 400
                                               for k in ("kind", "what", "where"))):
            raise ResponseError(f"a malformed attempt record: {str(item)[:120]}")
        out.append({"kind": item["kind"], "what": item["what"], "where": item["where"]})
    return out


def _text(value: Any, what: str) -> str:
    if type(value) is not str or len(value) > MAX_TEXT:
        raise ResponseError(f"{what} is not a string of at most {MAX_TEXT} characters")
    return value


def _number(value: Any, what: str, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ResponseError(f"{what} is not a finite number: {str(value)[:60]}")
    return float(value)


def _list(value: Any, n: int | None, what: str) -> list:
    if type(value) is not list or (n is not None and len(value) != n):
        raise ResponseError(f"{what} is not a list" + (f" of {n} entries" if n is not None else ""))
    return value


def _mapping(value: Any, what: str) -> dict:
    if type(value) is not dict or len(value) > MAX_NAMES:
        raise ResponseError(f"{what} is not an object of at most {MAX_NAMES} entries")
    for key in value:
        _text(key, f"a key of {what}")
    return value


def _sizes(value: Any) -> list[int]:
    """Group sizes of a request's groups, sent plain or as a grouped frame (``frames.py``)."""
    if type(value) is dict and "frame" in value:
        return list(value["sizes"])
    return [len(group) for group in value]


def _count(value: Any) -> int:
    """Number of rows of a request's rows, sent plain or as a frame."""
    return value["frame"]["n"] if type(value) is dict and "frame" in value else len(value)


def check(op: str, request: dict, result: Any) -> Any:
    """``result`` if it has the shape ``op`` returns for ``request``, else ResponseError."""
    if op == "score":
        for scores in _list(result, _count(request["samples"]), "the scores"):
            for value in _mapping(scores, "a sample's scores").values():
                if type(value) is not float or not math.isfinite(value):
                    _number(value, "a reward component")
    elif op == "filter":
        sizes = _sizes(request["groups"])
        groups = _list(result, len(sizes), "the filter decisions")
        for flags, size in zip(groups, sizes):
            if type(flags) is not list or len(flags) != size or any(type(f) is not bool for f in flags):
                raise ResponseError("the filter decisions of a group are not one boolean per rollout")
    elif op == "prompts":
        for prompt in _list(result, _count(request["tasks"]), "the prompts"):
            if type(prompt) is list:  # chat messages
                for message in _list(prompt, None, "a prompt's messages")[:MAX_NAMES]:
                    if type(message) is not dict or set(message) != {"role", "content"} \
                            or message["role"] not in ("system", "user", "assistant"):
                        raise ResponseError("a prompt message is not {role: system|user|assistant, content: str}")
                    _text(message["content"], "a prompt message's content")
                if not prompt or len(prompt) > MAX_NAMES:
                    raise ResponseError(f"a prompt has no messages or more than {MAX_NAMES}")
            else:
                _text(prompt, "a prompt")
    elif op == "curriculum":
        weights = _mapping(result, "the curriculum weights")
        if sorted(weights) != sorted(str(level) for level in request["levels"]):
            raise ResponseError("the curriculum weights do not name exactly the requested levels")
        for value in weights.values():
            _number(value, "a curriculum weight")
    elif op == "diagnostics":
        for entry in _mapping(result, "the diagnostics").values():
            if type(entry) is not dict or set(entry) != {"value", "min", "max", "help", "error"}:
                raise ResponseError("a diagnostics entry is not {value, min, max, help, error}")
            for key in ("value", "min", "max"):
                _number(entry[key], f"a diagnostic's {key}", allow_none=True)
            _text(entry["help"], "a diagnostic's help")
            if entry["error"] is not None:
                _text(entry["error"], "a diagnostic's error")
    elif op == "selftest":
        if type(result) is not dict or set(result) != {"passed", "failed", "n"}:
            raise ResponseError("the self-test result is not {passed, failed, n}")
        passed = [_text(p, "a passed test's name") for p in _list(result["passed"], None, "passed")]
        failed = _list(result["failed"], None, "failed")
        for item in failed:
            if type(item) is not dict or set(item) != {"name", "error"}:
                raise ResponseError("a failed test is not {name, error}")
            _text(item["name"], "a failed test's name")
            _text(item["error"], "a failed test's error")
        if type(result["n"]) is not int or result["n"] != len(passed) + len(failed):
            raise ResponseError("the self-test count does not add up")
    elif op == "record":
        recorded = _mapping(result, "the recorded reward calls")
        if sorted(recorded) != sorted(request["tests"]):
            raise ResponseError("the recorded reward calls do not name exactly the requested tests")
        for calls in recorded.values():
            for call in _list(calls, None, "a test's recorded reward calls")[:MAX_NAMES]:
                if type(call) is not dict or set(call) != {"component", "sample", "value"} \
                        or type(call["sample"]) is not dict:
                    raise ResponseError("a recorded reward call is not {component, sample: object, value}")
                _text(call["component"], "a recorded call's component")
                if call["component"] == "prompt.make_prompt":  # the runner's PROMPT_CALL: a text prompt
                    _text(call["value"], "a recorded prompt")
                elif call["component"].startswith("filters."):  # the runner's FILTER_CALLS: a filter's decision
                    if type(call["value"]) is not bool:
                        raise ResponseError("a recorded filter call's value is not a bool")
                else:
                    _number(call["value"], "a recorded call's value")
    elif op in ("ping", "exit"):
        _text(result, "the answer")
    return result


def error(response: dict) -> tuple[str, str]:
    """A failure response's one-line error and traceback, bounded."""
    message, tb = response.get("error"), response.get("traceback")
    message = message if type(message) is str else "unknown harness error"
    tb = tb if type(tb) is str else ""
    return message[:2000], tb[-20_000:]
