"""LLM roles' plumbing, offline through litellm's real call path (a scripted custom provider): the agents config,
the start-of-run model and key check, typed answers with retries and fallbacks, the budget, the frozen prices."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import BaseModel

from agents.llm import Conversation, LLMContext, UseBuiltin, check_agents, litellm, parse_answer, redact
from evotrainer import config as C
from evotrainer.events import EventLog
from evotrainer.pause import RunPaused
from tests.scripted_llm import scripted


class Word(BaseModel):
    word: str
    n: int


def ctx_for(tmp_path, agents: dict) -> LLMContext:
    cfg = C.parse({"agents": agents})
    return LLMContext(cfg, tmp_path, EventLog(tmp_path / "events.jsonl"))


def calls_logged(tmp_path) -> list[dict]:
    return list(EventLog(tmp_path / "events.jsonl").read("llm_call"))


def test_roles_inherit_the_default_section_and_stay_heuristic_by_default():
    cfg = C.parse({})
    assert all(cfg.agents.role(r).model == "heuristic" for r in C.AgentsConfig.model_fields if r not in
               ("default", "budget")) and cfg.agents.uses_llm() == [] and cfg.gates == []
    cfg = C.parse({"agents": {"default": {"model": "openai/a", "temperature": 0.7, "params": {"top_p": 0.9}},
                              "engineer": {"model": "openai/b", "fallbacks": ["heuristic"], "params": {"seed": 1}}}})
    eng, critic = cfg.agents.role("engineer"), cfg.agents.role("critic")
    assert (eng.model, eng.temperature, eng.chain, eng.params) == ("openai/b", 0.7, ["openai/b", "heuristic"],
                                                                   {"top_p": 0.9, "seed": 1})
    assert (critic.model, critic.fallbacks) == ("openai/a", [])


def test_bad_agent_settings_fail_with_the_key_named():
    with pytest.raises(C.ConfigError, match=r"agents\.engineer\.fallbacks: .*'heuristic' may only be the last"):
        C.parse({"agents": {"engineer": {"fallbacks": ["heuristic", "openai/x"]}}})
    with pytest.raises(C.ConfigError, match=r"agents\.default\.params: .*api_key.*environment"):
        C.parse({"agents": {"default": {"params": {"api_key": "sk-123"}}}})
    with pytest.raises(C.ConfigError, match=r"agents\.budget\.on_exhausted"):
        C.parse({"agents": {"budget": {"on_exhausted": "panic"}}})
    with pytest.raises(C.ConfigError, match=r"gates\.0"):
        C.parse({"gates": ["after_train"]})


@pytest.mark.parametrize("agents, where", [
    ({"default": {"params": {"extra_headers": {"Authorization": "Bearer abcdefgh12345678"}}}},
     r"agents\.default\.params: value error, extra_headers\.authorization: keys come from the environment only"),
    ({"engineer": {"params": {"extra_headers": {"x-api-key": "abc"}}}}, r"agents\.engineer\.params: .*x-api-key"),
    ({"critic": {"params": {"extra_headers": {"api-key": "abc"}}}}, r"agents\.critic\.params: .*api-key"),
    ({"critic": {"params": {"extra_body": {"opts": ["x", "sk-proj-abcdefghijkl"]}}}},  # a key-like value, any name
     r"agents\.critic\.params: .*extra_body\.opts\.1: keys come"),
    ({"critic": {"api_base": "http://user:s3cr3t-pass@gpu-box:8000/v1"}}, r"agents\.critic\.api_base: .*user:password@"),
    ({"default": {"api_base": "https://x.example/v1?api-version=1&api-key=abc123"}},
     r"agents\.default\.api_base: .*query parameter 'api-key'"),
    ({"default": {"api_base": "https://x.example/v1?q=sk-abcdefgh12345678"}}, r"agents\.default\.api_base: .*'q'"),
    ({"critic": {"fallbacks": [{"model": "openai/x", "api_base": "http://u:s3cr3t-pass@h/v1"}, "heuristic"]}},
     r"agents\.critic\.fallbacks\.0\.Fallback\.api_base: .*user:password@"),
])
def test_credentials_anywhere_in_params_or_api_base_are_refused_in_one_line_without_the_value(
        tmp_path, agents, where):
    from evotrainer.rundir import RunDir

    with pytest.raises(C.ConfigError) as err:
        C.parse({"agents": agents})
    (line,) = str(err.value).splitlines()
    assert re.search(where, line) and "environment only" in line, line
    for secret in ("abcdefgh12345678", "sk-proj", "s3cr3t", "abc123", "'abc'"):
        assert secret not in line, line  # the error names where the key sits, never the key
    with pytest.raises(C.ConfigError):  # nor does it reach RUN_DIR/config.yaml through an override
        RunDir(tmp_path / "r").init(C.apply_overrides(C.parse({}), [f"agents={json.dumps(agents)}"]),
                                    log=lambda m: None)
    assert not (tmp_path / "r" / "config.yaml").exists()


def test_provider_params_and_servers_without_credentials_pass():
    agents = C.parse({"agents": {"default": {
        "api_base": "http://127.0.0.1:8080/v1?x=1", "fallbacks": [{"model": "openai/z", "api_base": "http://h:1/v1"}],
        "params": {"top_p": 0.9, "thinking": {"type": "enabled", "budget_tokens": 1024},
                   "extra_headers": {"X-Title": "evotrainer"}, "max_completion_tokens": 64}}}}).agents
    assert agents.role("critic").params["thinking"]["budget_tokens"] == 1024
    assert agents.role("critic").endpoints == [("heuristic", "http://127.0.0.1:8080/v1?x=1"), ("openai/z", "http://h:1/v1")]


def test_unknown_model_or_missing_key_fails_at_start_naming_the_role(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    cfg = C.parse({"agents": {"critic": {"model": "nosuchprovider/x"},
                              "engineer": {"model": "anthropic/claude-haiku-4-5"},
                              "backtester": {"model": "openai/no-such-model-anywhere"},
                              "librarian": {"model": "openai/my-local", "api_base": "http://127.0.0.1:9/v1"}}})
    with pytest.raises(C.ConfigError) as err:
        check_agents(cfg)
    lines = str(err.value).splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("agents.critic: model 'nosuchprovider/x': litellm does not know")
    assert lines[1] == "agents.engineer: model 'anthropic/claude-haiku-4-5': missing ANTHROPIC_API_KEY " \
                       "in the environment"
    assert lines[2].startswith("agents.backtester: model 'openai/no-such-model-anywhere': litellm has no model")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-1234567890")
    check_agents(C.parse({"agents": {"engineer": {"model": "anthropic/claude-haiku-4-5"}}}))


def test_malformed_json_then_a_valid_answer(tmp_path):
    answers = iter(['{"word": "hi", "n": ', '```json\n{"word": "hi"}\n```', '{"word": "hi", "n": 3}'])
    with scripted(lambda model, messages: next(answers)) as calls:
        conv = Conversation("critic", C.parse({}).agents.role("critic").model_copy(
            update={"model": "scripted/a", "retries": 2}), ctx_for(tmp_path, {}), "You are a test.")
        assert conv.ask("Say a word.", Word) == Word(word="hi", n=3)
    assert [c["outcome"] for c in calls_logged(tmp_path)] == ["invalid", "invalid", "ok"]
    assert "not valid JSON" in calls[1]["messages"][-1]["content"]  # the error went back to the model
    assert "n: Field required" in calls[2]["messages"][-1]["content"]
    assert calls[0]["response_format"]["type"] == "json_object" and "schema" in calls[0]["response_format"]
    # the accepted exchange stays in the conversation, the failed attempts do not
    assert [m["role"] for m in conv.messages] == ["system", "user", "assistant"]


def test_timeout_and_rate_limit_fall_through_the_chain_to_the_builtin_agent(tmp_path):
    lib = litellm()
    errors = {"scripted/slow": lib.Timeout(message="took too long", model="slow", llm_provider="scripted"),
              "scripted/busy": lib.RateLimitError(message="429 slow down", model="busy", llm_provider="scripted")}
    with scripted(lambda model, messages: errors[f"scripted/{model}"]):
        settings = C.parse({"agents": {"critic": {"model": "scripted/slow",
                                                  "fallbacks": ["scripted/busy", "heuristic"]}}}).agents.role("critic")
        conv = Conversation("critic", settings, ctx_for(tmp_path, {}), "You are a test.")
        with pytest.raises(UseBuiltin):
            conv.ask("Say a word.", Word)
    events = calls_logged(tmp_path)
    assert [(e["model"], e["outcome"]) for e in events] == [("scripted/slow", "error"), ("scripted/busy", "error"),
                                                            ("heuristic", "builtin")]
    assert "Timeout" in events[0]["error"] and "RateLimitError" in events[1]["error"]


def test_each_fallback_is_called_on_its_own_server(tmp_path):
    lib = litellm()

    def answer(model, messages):
        return lib.APIConnectionError(message="refused", model=model, llm_provider="scripted") if model == "down" \
            else '{"word": "ok", "n": 1}'

    cfg = C.parse({"agents": {"critic": {
        "model": "scripted/down", "api_base": "http://gpu-box:8000/v1",
        "fallbacks": [{"model": "scripted/up", "api_base": "http://127.0.0.1:8080/v1"}, "scripted/plain", "heuristic"]}}})
    settings = cfg.agents.role("critic")
    assert settings.chain == ["scripted/down", "scripted/up", "scripted/plain", "heuristic"]
    assert settings.endpoints[1] == ("scripted/up", "http://127.0.0.1:8080/v1") and settings.endpoints[2][1] is None
    with scripted(answer) as calls:
        assert Conversation("critic", settings, ctx_for(tmp_path, {}), "sys").ask("q", Word) == Word(word="ok", n=1)
    assert [(c["model"], c["api_base"]) for c in calls] == [("down", "http://gpu-box:8000/v1"),
                                                          ("up", "http://127.0.0.1:8080/v1")]
    with pytest.raises(C.ConfigError, match=r"agents\.critic\.fallbacks.*heuristic.*no api_base"):
        C.parse({"agents": {"critic": {"fallbacks": [{"model": "heuristic", "api_base": "http://x"}]}}})


def test_a_chain_without_heuristic_answers_nothing_and_a_valid_fallback_answers(tmp_path):
    def answer(model, messages):
        return "not json" if model == "bad" else '{"word": "ok", "n": 1}'

    with scripted(answer):
        s = C.parse({"agents": {"default": {"model": "scripted/bad", "retries": 1}}}).agents.role("critic")
        assert Conversation("critic", s, ctx_for(tmp_path, {}), "sys").ask("q", Word) is None
        s2 = s.model_copy(update={"fallbacks": ["scripted/good"]})
        assert Conversation("critic", s2, ctx_for(tmp_path, {}), "sys").ask("q", Word) == Word(word="ok", n=1)


@pytest.mark.parametrize("policy", ["fallback", "pause"])
def test_budget_exhaustion_falls_back_or_pauses(tmp_path, policy):
    with scripted(lambda model, messages: '{"word": "abc", "n": 1}'):
        ctx = ctx_for(tmp_path, {"budget": {"max_tokens": 40, "on_exhausted": policy},
                                 "critic": {"model": "scripted/a"}})
        conv = Conversation("critic", ctx.settings("critic"), ctx, "sys")
        conv.ask("q", Word)  # 10 + 5 * 4 = 30 tokens: under the budget
        conv.ask("q", Word)  # 60: the budget is spent after this call
        with pytest.raises(UseBuiltin if policy == "fallback" else RunPaused) as err:
            conv.ask("q", Word)
    assert "agents.budget.max_tokens=40 spent (60 tokens)" in str(err.value)
    assert json.loads((tmp_path / "llm_spend.json").read_text())["tokens"] == 60  # the ledger survives a resume
    assert LLMContext(C.parse({"agents": {"budget": {"max_tokens": 40}}}), tmp_path).ledger.exhausted()


def test_prices_are_frozen_into_the_run_directory_and_used_on_resume(tmp_path):
    lib = litellm()
    cfg = C.parse({"agents": {"engineer": {"model": "gpt-4o-mini"}}})
    LLMContext(cfg, tmp_path)
    table = json.loads((tmp_path / "prices.json").read_text())
    assert table["gpt-4o-mini"]["input_cost_per_token"] == lib.model_cost["gpt-4o-mini"]["input_cost_per_token"]
    # a run whose table holds another price (frozen earlier, or written by a user for a local model) prices by it
    price = {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002, "litellm_provider": "scripted",
             "mode": "chat"}
    (tmp_path / "prices.json").write_text(json.dumps({"scripted/priced": price}))
    with scripted(lambda model, messages: '{"word": "x", "n": 1}'):
        ctx = LLMContext(C.parse({"agents": {"critic": {"model": "scripted/priced"}}}), tmp_path)
        Conversation("critic", ctx.settings("critic"), ctx, "sys").ask("q", Word)
    call = calls_logged(tmp_path)[-1]
    assert call["cost_usd"] == pytest.approx(10 * 0.001 + 20 * 0.002)  # 10 prompt + 20 completion tokens


def test_keys_never_reach_events_or_the_sandbox(tmp_path, monkeypatch):
    from sandbox.processes import _scrubbed_env

    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-123456")
    assert "sk-secret-value-123456" not in json.dumps(_scrubbed_env(str(tmp_path)))
    assert redact("401: bad key sk-secret-value-123456") == "401: bad key ***"
    lib = litellm()
    with scripted(lambda model, messages: lib.AuthenticationError(
            message="invalid key sk-secret-value-123456", model=model, llm_provider="scripted")):
        ctx = ctx_for(tmp_path, {"critic": {"model": "scripted/a"}})
        assert Conversation("critic", ctx.settings("critic"), ctx, "sys").ask("q", Word) is None
    assert "sk-secret" not in (tmp_path / "events.jsonl").read_text()


def test_parse_answer_takes_the_first_json_object_and_says_what_is_wrong():
    assert parse_answer('Sure! {"word": "a", "n": 2} done', Word) == Word(word="a", n=2)
    with pytest.raises(ValueError, match="holds no JSON"):
        parse_answer("no", Word)
    with pytest.raises(ValueError, match=r"n: Input should be a valid integer"):
        parse_answer('{"word": "a", "n": "many"}', Word)


def test_init_refuses_an_llm_it_cannot_call_in_one_line_and_creates_nothing(tmp_path, cli_env):
    from tests.conftest import cli

    env = {k: v for k, v in cli_env.items() if k != "OPENAI_API_KEY"}
    proc = cli(["init", str(tmp_path / "r"), "--set", "agents.engineer.model=openai/gpt-4o-mini"], env, check=False)
    assert proc.returncode == 2 and not (tmp_path / "r").exists()
    assert "agents.engineer: model 'openai/gpt-4o-mini': missing OPENAI_API_KEY in the environment" in \
        " ".join(proc.stdout.split())


def test_length_bounds_are_checked_on_the_answer_but_not_sent_as_grammar():
    from agents.roles import MetricProposal
    from agents.critic import CriticStep
    from agents.llm import UNSENT_BOUNDS, wire_schema

    sent = json.dumps(wire_schema(CriticStep))
    assert not any(f'"{b}"' in sent for b in UNSENT_BOUNDS) and '"pattern"' in sent and '"reason"' in sent
    with pytest.raises(ValueError):  # still refused when the answer breaks one
        MetricProposal(name="too_long", help="h", code="def too_long(rollouts):\n    return 0.0\n", max=1.0,
                       reason="x" * 601)


def test_every_llm_role_records_its_calls_under_the_loops_phase(tmp_path):
    """The loop tells the agents its phase before each step (graph._logged): a Backtester or Librarian, which have
    no phase of their own, recorded the last phase another role had set, or 0 in a resumed run."""
    from agents import build_agents

    cfg = C.parse({"agents": {"default": {"model": "scripted/any"}}})
    with scripted(lambda model, messages: "{}"):
        agents = build_agents(cfg, str(tmp_path / "skills"), tmp_path)
        agents.at_phase(3)
        roles = [agents.diagnostician, agents.critic, agents.engineer, agents.backtester, agents.librarian]
        assert {r.ctx.phase for r in roles} == {3}

        class Nothing(BaseModel):
            pass

        roles[3].ask_once("judge x", "say nothing", Nothing)
    assert [e["phase"] for e in EventLog(tmp_path / "events.jsonl").read("llm_call")] == [3]
    assert build_agents(C.parse({}), str(tmp_path / "s2")).llm is None  # built-in agents: nothing to tell
