"""In-sandbox side of EvoTrainer's harness sandbox: loads untrusted harness code and serves calls into it.

Invoked as ``python -I runner.py HARNESS_DIR`` by ``sandbox.worker.HarnessWorker`` (as a local process,
under bwrap/unshare, or as the entry point of the Docker image built from ``sandbox/Dockerfile``).
Standard library only, and it never imports evotrainer nor the ``sandbox`` package around it (whose other
files are masked in the sandbox): it must run in a bare Python image.

Invoked as ``python -I runner.py HARNESS_DIR [--scratch DIR] [--private-tmp] [--max-procs N] [--forbid PATH]...
[--no-audit]``:
``--scratch`` is the writable working dir (default: the current dir), ``--private-tmp`` says /tmp belongs to
the sandbox (writable too), ``--max-procs`` sets RLIMIT_NPROC from inside the sandbox's user namespace (where it
counts the sandbox's processes only), ``--forbid`` names paths harness code must never touch, ``--no-audit``
leaves the audit hook out (only to measure the isolation beneath it).

Protocol (JSON lines): one request per line on stdin, one response per line on the *original* stdout.
While harness code runs, ``sys.stdout`` points at stderr and file descriptor 1 is a copy of stderr, so a
harness ``print`` (or even ``os.write(1, ...)``) cannot corrupt the protocol; stdin is /dev/null for harness
code. Responses are ``{"ok": true, "result": ..., "id": ...}`` or
``{"ok": false, "error": "<file:line ExceptionType: message>", "traceback": "...", "id": ...}``, where file:line
is the deepest frame inside HARNESS_DIR and ``id`` echoes the request's ``id`` (the worker rejects a response
that does not carry it: one harness code forged on the protocol stream). A response carries ``attempts`` when
harness code tried something it must never do (``guard.py``: network, env, forbidden paths, processes, signals,
native code; and processes left running after the op, which the runner, their subreaper, kills). Rows may come
as column frames (``frames.py``; then ``score`` answers with one too). Harness modules are imported lazily, on
first use.

Ops: ping, prompts, score, filter, curriculum, diagnostics, selftest, record, exit (see ``Runner``).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import math
import numbers
import os
import resource
import sys
import traceback
from typing import Any, Callable, BinaryIO

MAX_SUMMARY = 500  # characters of the one-line error summary
_ROWS = ("tasks", "samples", "groups", "rollouts")  # request fields that may come as column frames
MAX_TRACEBACK = 20_000  # characters of the traceback sent back
RECORD_CALLS = 200  # reward and prompt calls a test may record (op_record)
PROMPT_CALL = "prompt.make_prompt"  # op_record's name for a call of make_prompt (a component so named is not recorded)
FILTER_CALLS = ("filters.keep_rollout", "filters.keep_group")  # op_record's names for the filters' calls


class ContractError(Exception):
    """Harness code ran but broke the harness API (wrong type, non-finite number, missing level, ...)."""


class BadRequest(Exception):
    """The request itself is malformed (not harness code's fault)."""


def _one_line(text: str, limit: int = MAX_SUMMARY) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Runner:
    """Dispatches protocol requests to the harness modules found in ``harness_dir``."""

    OPS = ("ping", "prompts", "score", "filter", "curriculum", "diagnostics", "selftest", "record", "exit")

    def __init__(self, harness_dir: str) -> None:
        self.harness_dir = os.path.realpath(harness_dir)
        self.exiting = False
        self.frames = _load("frames")

    # ---------------------------------------------------------------- errors

    def _rel(self, filename: str) -> str | None:
        """``filename`` relative to the harness dir, or None when it lies outside it."""
        try:
            path = os.path.realpath(filename)
        except (TypeError, ValueError):
            return None
        if path.startswith(self.harness_dir + os.sep):
            return os.path.relpath(path, self.harness_dir)
        return None

    def where(self, fn: Any) -> str:
        """``file.py:LINE`` of a harness function's definition (for contract errors), else its name."""
        code = getattr(fn, "__code__", None)
        rel = self._rel(code.co_filename) if code is not None else None
        return f"{rel}:{code.co_firstlineno}" if rel else getattr(fn, "__qualname__", repr(fn))

    def summarize(self, exc: BaseException) -> str:
        """One line: ``file:line ExceptionType: message`` at the deepest frame inside the harness dir."""
        if isinstance(exc, (ContractError, BadRequest)):
            return _one_line(str(exc))
        name = type(exc).__name__
        message = str(exc)
        location, source = None, ""
        if isinstance(exc, SyntaxError) and exc.filename and self._rel(exc.filename):
            location = f"{self._rel(exc.filename)}:{exc.lineno}"
            message = exc.msg or message
        else:
            for frame in traceback.extract_tb(exc.__traceback__):
                rel = self._rel(frame.filename)
                if rel:
                    location, source = f"{rel}:{frame.lineno}", (frame.line or "").strip()
        if not message and source:  # e.g. a bare `assert x == 1` or MemoryError: show the failing line
            message = source
        text = f"{name}: {message}" if message else name
        return _one_line(f"{location} {text}" if location else text)

    def failure(self, exc: BaseException) -> dict:
        try:
            if isinstance(exc, BadRequest):  # the caller's mistake: the runner's own traceback is noise
                return {"ok": False, "error": self.summarize(exc), "traceback": ""}
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            return {"ok": False, "error": str(self.summarize(exc)), "traceback": str(tb[-MAX_TRACEBACK:])}
        except BaseException:  # noqa: BLE001 - an exception whose message itself raises
            return {"ok": False, "error": "harness code raised an exception whose message cannot be read",
                    "traceback": ""}

    # ---------------------------------------------------------------- harness access

    def module(self, name: str) -> Any:
        """Import a harness module by name (cached by Python after the first successful import)."""
        module = importlib.import_module(name)
        origin = getattr(module, "__file__", None) or ""
        if not self._rel(origin):
            raise ContractError(f"{name}.py not found in the harness directory (got {origin or 'a built-in'})")
        return module

    def attr(self, module_name: str, attr: str, kind: type | None = None) -> Any:
        value = getattr(self.module(module_name), attr, None)
        if value is None:
            raise ContractError(f"{module_name}.py does not define {attr}")
        if kind is callable and not callable(value):
            raise ContractError(f"{module_name}.{attr} is not callable")
        if kind not in (None, callable) and not isinstance(value, kind):
            raise ContractError(f"{module_name}.{attr} must be a {kind.__name__}, got {type(value).__name__}")
        return value

    @staticmethod
    def number(value: Any, what: str, *, allow_none: bool = False) -> float | None:
        """``value`` as a finite float, else a ContractError naming ``what``."""
        if value is None and allow_none:
            return None
        if not isinstance(value, numbers.Real):
            raise ContractError(f"{what} returned {type(value).__name__} {_one_line(repr(value), 80)}, "
                                "expected a finite number")
        out = float(value)
        if not math.isfinite(out):
            raise ContractError(f"{what} returned {out}, expected a finite number")
        return out

    # ---------------------------------------------------------------- ops

    def op_ping(self, req: dict) -> str:
        return "pong"

    def op_exit(self, req: dict) -> str:
        self.exiting = True
        return "bye"

    def op_prompts(self, req: dict) -> list:
        make_prompt = self.attr("prompt", "make_prompt", callable)
        out = []
        for task in _field(req, "tasks", list):
            prompt = make_prompt(task)
            messages = type(prompt) is list and prompt and all(
                type(m) is dict and set(m) == {"role", "content"} and m["role"] in ("system", "user", "assistant")
                and type(m["content"]) is str for m in prompt)
            if type(prompt) is not str and not messages:
                raise ContractError(f"{self.where(make_prompt)} make_prompt returned {type(prompt).__name__}, expected "
                                    f"str or a list of {{role: system|user|assistant, content: str}} messages")
            out.append(prompt)
        return out

    def op_score(self, req: dict) -> list[dict[str, float]]:
        components = self.attr("rewards", "COMPONENTS", dict)
        for name, fn in components.items():
            if not isinstance(name, str) or not callable(fn):
                raise ContractError(f"rewards.COMPONENTS must map names to functions; bad entry {name!r}")
        items = list(components.items())
        out = []
        for sample in _field(req, "samples", list):
            scores = {}
            for name, fn in items:
                value = fn(sample)
                # the common case first (a finite float), the labelled check only for anything else
                scores[name] = value if type(value) is float and math.isfinite(value) else \
                    self.number(value, f"{self.where(fn)} reward component {name!r}")
            out.append(scores)
        return out

    def op_filter(self, req: dict) -> list[list[bool]]:
        keep_rollout = self.attr("filters", "keep_rollout", callable)
        keep_group = self.attr("filters", "keep_group", callable)
        out = []
        for group in _field(req, "groups", list):
            if not isinstance(group, list):
                raise BadRequest("bad request: every group must be a list of rollouts")
            group_kept = bool(keep_group(group))
            out.append([bool(keep_rollout(rollout)) and group_kept for rollout in group])
        return out

    def op_curriculum(self, req: dict) -> dict[str, float]:
        weights = self.attr("curriculum", "weights", callable)
        levels = [str(level) for level in _field(req, "levels", list)]
        result = weights(levels, _field(req, "base", dict), _field(req, "history", dict))
        where = f"{self.where(weights)} curriculum.weights"
        if not isinstance(result, dict):
            raise ContractError(f"{where} returned {type(result).__name__}, expected a dict level -> weight")
        result = {str(k): v for k, v in result.items()}
        missing = [level for level in levels if level not in result]
        extra = sorted(set(result) - set(levels))
        if missing or extra:
            raise ContractError(f"{where} must return exactly the levels {levels}; "
                                f"missing {missing}, unexpected {extra}")
        out = {level: self.number(result[level], f"{where} for level {level!r}") for level in levels}
        if any(w < 0 for w in out.values()) or not any(w > 0 for w in out.values()):
            raise ContractError(f"{where} returned {out}: weights must be >= 0 with at least one > 0")
        return out

    def op_diagnostics(self, req: dict) -> dict[str, dict]:
        metrics = self.attr("diagnostics", "METRICS", dict)
        rollouts = _field(req, "rollouts", list)
        out = {}
        for name, spec in metrics.items():
            entry: dict[str, Any] = {"value": None, "min": None, "max": None, "help": "", "error": None}
            try:
                if not isinstance(spec, dict) or not callable(spec.get("fn")):
                    raise ContractError(f"diagnostics.METRICS[{name!r}] must be a dict with a callable 'fn'")
                entry["help"] = str(spec.get("help") or "")
                entry["min"] = self.number(spec.get("min"), f"metric {name!r} min", allow_none=True)
                entry["max"] = self.number(spec.get("max"), f"metric {name!r} max", allow_none=True)
                entry["value"] = self.number(spec["fn"](rollouts), f"{self.where(spec['fn'])} metric {name!r}")
            except Exception as exc:  # one broken metric must not hide the others
                entry["error"] = self.summarize(exc)
            out[str(name)] = entry
        return out

    def _test_files(self) -> list[str]:
        """The harness's test files (``test_*.py`` under ``tests/``), with ``tests/`` importable."""
        tests_dir = os.path.join(self.harness_dir, "tests")
        files = sorted(f for f in os.listdir(tests_dir) if f.startswith("test_") and f.endswith(".py")) \
            if os.path.isdir(tests_dir) else []
        if tests_dir not in sys.path:
            sys.path.append(tests_dir)  # lets tests import helper modules that sit beside them
        return files

    def _test_module(self, filename: str) -> Any:
        """Import ``tests/FILENAME`` afresh (removed from ``sys.modules`` by the caller)."""
        spec = importlib.util.spec_from_file_location(f"_harness_tests_{filename[:-3]}",
                                                      os.path.join(self.harness_dir, "tests", filename))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module

    def op_selftest(self, req: dict) -> dict:
        """Run every top-level ``test_*`` function of ``HARNESS_DIR/tests/test_*.py``; import errors fail."""
        passed: list[str] = []
        failed: list[dict] = []
        for filename in self._test_files():
            try:
                module = self._test_module(filename)
            except BaseException as exc:  # noqa: BLE001 - a test file's SystemExit is a failure too
                sys.modules.pop(f"_harness_tests_{filename[:-3]}", None)
                failed.append({"name": f"tests/{filename}", "error": self.summarize(exc)})
                continue
            for name, fn in list(vars(module).items()):
                if not (name.startswith("test_") and callable(fn) and hasattr(fn, "__code__")):
                    continue
                test_id = f"tests/{filename}::{name}"
                try:
                    fn()
                except BaseException as exc:  # noqa: BLE001
                    failed.append({"name": test_id, "error": self.summarize(exc)})
                else:
                    passed.append(test_id)
            sys.modules.pop(f"_harness_tests_{filename[:-3]}", None)
        return {"passed": passed, "failed": failed, "n": len(passed) + len(failed)}

    def op_record(self, req: dict) -> dict[str, list[dict]]:
        """Run the named tests (``tests/FILE.py::NAME``) with every reward component of ``rewards.COMPONENTS``,
        ``prompt.make_prompt`` and the filters recording their calls: ``{test: [{component, sample, value}]}``, what
        each test asked of the reward (a finite number), of the prompt (component ``PROMPT_CALL``, the task as sample,
        a text prompt as value) and of a filter (``FILTER_CALLS``: the rollout as sample, or ``{"group": [...]}`` for
        keep_group, a bool as value) and got. At most ``RECORD_CALLS`` calls a test; a sample that is not plain JSON,
        or a value of another kind, is left out. A test that fails still gives what it recorded; a test not found gives
        none. Everything is restored afterwards, in ``COMPONENTS`` and as the modules' names."""
        wanted = [t for t in _field(req, "tests", list) if isinstance(t, str)]
        rewards = self.module("rewards")
        components = self.attr("rewards", "COMPONENTS", dict)
        originals = dict(components)
        names = {name: attr for attr, value in vars(rewards).items() for name, fn in originals.items()
                 if value is fn}  # component -> the module name it is defined under, when one is
        calls: list[tuple[str, Any, Any]] = []
        prompt = self.module("prompt")
        make_prompt = getattr(prompt, "make_prompt", None)
        filters = self.module("filters")
        kept = {name: getattr(filters, name.partition(".")[2], None) for name in FILTER_CALLS}

        def recording(name: str, fn: Callable) -> Callable:
            def recorder(sample: Any, *args: Any, **kwargs: Any) -> Any:
                value = fn(sample, *args, **kwargs)
                if len(calls) < RECORD_CALLS:
                    try:
                        shown = {"group": sample} if name == "filters.keep_group" else sample
                        calls.append((name, json.loads(json.dumps(shown, allow_nan=False)), value))
                    except (TypeError, ValueError):
                        pass
                return value
            return recorder

        out: dict[str, list[dict]] = {}
        try:
            for name, fn in originals.items():
                if name == PROMPT_CALL:
                    continue
                components[name] = recording(name, fn)
                if name in names:
                    setattr(rewards, names[name], components[name])
            if callable(make_prompt):
                prompt.make_prompt = recording(PROMPT_CALL, make_prompt)
            for name, fn in kept.items():
                if callable(fn):
                    setattr(filters, name.partition(".")[2], recording(name, fn))
            files = set(self._test_files())
            for test_id in wanted:
                path, _, fname = test_id.partition("::")
                filename = path[len("tests/"):] if path.startswith("tests/") else ""
                out[test_id] = []
                if filename not in files:
                    continue
                calls.clear()
                try:
                    fn = getattr(self._test_module(filename), fname, None)
                    if callable(fn):
                        fn()
                except BaseException:  # noqa: BLE001 - a failing test still says what it asked of the reward
                    pass
                finally:
                    sys.modules.pop(f"_harness_tests_{filename[:-3]}", None)
                out[test_id] = [{"component": c, "sample": s, "value": v if c in (PROMPT_CALL, *FILTER_CALLS)
                                 else float(v)} for c, s, v in calls
                                if (c == PROMPT_CALL and isinstance(v, str)) or (c in FILTER_CALLS and type(v) is bool)
                                or (c not in (PROMPT_CALL, *FILTER_CALLS) and isinstance(v, numbers.Real)
                                    and math.isfinite(float(v)))]
        finally:
            components.clear()
            components.update(originals)
            for name, attr in names.items():
                setattr(rewards, attr, originals[name])
            if callable(make_prompt):
                prompt.make_prompt = make_prompt
            for name, fn in kept.items():
                if callable(fn):
                    setattr(filters, name.partition(".")[2], fn)
        return out

    # ---------------------------------------------------------------- dispatch

    def handle(self, line: bytes, guard: Any = None) -> dict:
        """One request line -> one response dict (never raises), with the request's id and any attempts."""
        req: Any = None
        attempts: list[dict] = []
        try:
            try:
                with self.frames.gc_paused():
                    req = json.loads(line)
            except ValueError as exc:
                raise BadRequest(f"malformed request: not valid JSON ({exc})") from None
            if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                raise BadRequest('malformed request: expected a JSON object with a string "op"')
            op = req["op"]
            if op not in self.OPS:
                raise BadRequest(f"unknown op {op!r}; expected one of {', '.join(self.OPS)}")
            try:  # rows sent as column frames (frames.py) become rows again
                req = {key: self.frames.decode(value) if key in _ROWS else value for key, value in req.items()}
            except ValueError as exc:
                raise BadRequest(f"malformed request: {exc}") from None
            handler: Callable[[dict], Any] = getattr(self, f"op_{op}")
            gc.freeze()  # the request's rows are not garbage: collections during the op need not scan them
            if guard is not None:
                guard.begin()
            try:
                result = handler(req)
                if op == "score" and req.get("frames"):
                    with self.frames.gc_paused():
                        result = self.frames.encode(result)
                response = {"ok": True, "result": result}
            except BaseException as exc:  # noqa: BLE001 - str() of a harness exception is harness code too
                response = self.failure(exc)
            finally:
                attempts = guard.end() if guard is not None else []
                gc.unfreeze()
        except BaseException as exc:  # noqa: BLE001 - harness SystemExit etc. must not end the runner
            response = self.failure(exc)
        attempts = attempts + (guard.stop_children() if guard is not None else [])
        if attempts:
            response["attempts"] = attempts
        if isinstance(req, dict) and "id" in req:
            response["id"] = req["id"]
        return response


def _field(req: dict, name: str, kind: type) -> Any:
    value = req.get(name)
    if not isinstance(value, kind):
        raise BadRequest(f"bad request for op {req.get('op')!r}: field {name!r} must be a {kind.__name__}")
    return value


def _protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """Keep private copies of stdin/stdout for the protocol; point fd 0 at /dev/null and fd 1 at stderr."""
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull, encoding="utf-8")
    sys.stdout = sys.stderr
    return proto_in, proto_out


def _send(out: BinaryIO, response: dict) -> None:
    try:
        data = json.dumps(response, allow_nan=False)
    except (TypeError, ValueError) as exc:  # results are validated, so this means a runner bug
        data = json.dumps({"ok": False, "error": f"unserializable response: {exc}", "traceback": ""})
    out.write(data.encode("utf-8") + b"\n")
    out.flush()


def _load(name: str) -> Any:
    """``name``.py beside this file (guard, frames), loaded by path: the package around the runner is not
    importable in the sandbox."""
    path = os.path.join(os.path.dirname(os.path.realpath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_evotrainer_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="runner.py", description="serves harness code over JSON lines")
    parser.add_argument("harness_dir")
    parser.add_argument("--scratch", default=os.getcwd(), help="the writable working dir")
    parser.add_argument("--private-tmp", action="store_true", help="/tmp belongs to the sandbox")
    parser.add_argument("--max-procs", type=int, default=0, help="RLIMIT_NPROC, set inside the sandbox")
    parser.add_argument("--forbid", action="append", default=[], help="a path harness code must never touch")
    parser.add_argument("--no-audit", action="store_true", help="no audit hook (to measure what is beneath it)")
    opts = parser.parse_args(argv[1:])
    if not os.path.isdir(opts.harness_dir):
        parser.error(f"{opts.harness_dir} is not a directory")
    return opts


def main(argv: list[str]) -> int:
    opts = _parse(argv)  # exits with status 2 and a usage line on bad arguments
    sys.dont_write_bytecode = True  # never litter the harness repo with __pycache__
    if opts.max_procs:  # inside a user namespace this counts the sandbox's own processes only
        resource.setrlimit(resource.RLIMIT_NPROC, (opts.max_procs, opts.max_procs))
    runner = Runner(opts.harness_dir)
    proto_in, proto_out = _protocol_streams()
    sys.path.insert(0, runner.harness_dir)
    guard = _load("guard").Guard(runner.harness_dir, opts.scratch, opts.private_tmp, tuple(opts.forbid))
    guard.adopt_orphans()
    if not opts.no_audit:
        guard.install()
    for line in proto_in:
        if not line.strip():
            continue
        sys.stdout = sys.stderr  # harness code may have replaced it
        _send(proto_out, runner.handle(line, None if opts.no_audit else guard))
        if runner.exiting:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
