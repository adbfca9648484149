"""The registry of failure modes (agents/modes.py) against everything that must agree with it, and the rules that tell
apart two of its four questions about a run that does not learn: the policy does not move (policy_stalled), and what
trains is not what is evaluated (train_eval_mismatch). Each rule is shown firing on crafted rollouts and results, and
staying quiet where it must: a healthy learning phase, a plateau, a phase on the evaluator's own prompt and budget.

Run alone: ``.venv/bin/python -m pytest -q tests/test_modes.py``.
"""

from __future__ import annotations

import random
import typing
from pathlib import Path

import pytest

from agents import modes, roles
from agents.critic import HeuristicCritic
from agents.diagnostician import HeuristicDiagnostician
from agents.llm_diagnostician import modes_prompt
from agents.roles import PhaseEvidence
from evotrainer.contracts import Diagnosis, EvalResult, Layer, PhaseResult
from evotrainer.domains import get_domain
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import HarnessRepo
from tests.conftest import rollouts, tasks_for
from tests.test_tool_modes import tool_rows, tools_evidence

DEV = 2000  # dev items, as the default dev split


@pytest.fixture(scope="module")
def knobs(tmp_path_factory):
    return read_knobs(HarnessRepo.create(tmp_path_factory.mktemp("modes") / "harness", "math").path)


def dev(right: set[int], n: int = DEV, budget: int = 16) -> EvalResult:
    """A dev result whose items ``right`` (indices) the verifier accepted."""
    items = {f"dev-{i}": float(i in right) for i in range(n)}
    return EvalResult(accuracy=len(right) / n, n=n, items=items, ended_length={"n": 0, "budget": budget})


def result(phase: int, d: EvalResult, **fields) -> PhaseResult:
    return PhaseResult(phase=phase, harness_sha="0" * 40, steps=40, eval=d, dev=d, rollout_path="",
                       checkpoint_path="", wall_time_s=1.0, tokens=100, **fields)


def evidence(rows: list[dict], knobs, results: list[PhaseResult], baseline: EvalResult | None = None,
             tasks: dict | None = None, **fields) -> PhaseEvidence:
    return PhaseEvidence(phase=results[-1].phase, results=results, rollouts=rows, phases_in_view=[results[-1].phase],
                         registry={}, knobs=knobs, domain=get_domain("math"), baseline=baseline,
                         tasks=tasks if tasks is not None else tasks_for(rows), **fields)


def flat(steps: int = 40, level: float = 0.3, rise: float = 0.0, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [level + rise * i / (steps - 1) + rng.gauss(0, 0.02) for i in range(steps)]


def learning_groups(n: int = 160, start: int = 1, end: int = 5) -> list[list[tuple[str, bool]]]:
    """``n`` groups of 8 (4 a step, so ``n // 4`` steps) whose right answers rise from ``start`` to ``end`` of 8."""
    out = []
    for g in range(n):
        k = round(start + (end - start) * g / (n - 1))
        out.append([("9", True)] * k + [("1", False)] * (8 - k))
    return out


def found(ev: PhaseEvidence) -> dict[str, Diagnosis]:
    return {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(ev)}


# --- the registry and what reads it ----------------------------------------------------------------------------
def scenarios(knobs) -> list[PhaseEvidence]:
    """Crafted phases on which, together, every rule of the built-in Diagnostician fires (the tool-use rules on tools
    transcripts: rollouts stopped by the turn cap, calls the environment answers with an error, calls repeated)."""
    dead = rollouts([[("9", True), ("1", False)] * 4 if g % 4 == 0 else [("1", False)] * 8 for g in range(60)])
    cut = rollouts([[("9", True), ("1+1+", False)] * 4 for _ in range(60)], truncated=True)
    hacked = rollouts([[("9", True), ("1", False)] * 4 for _ in range(60)])
    for r in hacked:
        r["reward"] = 1.0  # wrong answers paid too
    starved = rollouts([[("9", True), ("1", False)] * 4 for _ in range(60)])
    for r in starved[40:]:
        r["kept"] = False
    third = set(range(0, DEV, 3))
    before, fell = result(1, dev(third), train={"verified_rate": 0.0626, "reward_mean": 0.0626,
                                                "completion_length": 2.0}, completions=15360), dev(set(range(0, DEV, 5)))
    after = result(2, fell, train={"verified_rate": 0.0477, "reward_mean": 0.0477, "completion_length": 4.0},
                   completions=15360, trajectory={"entropy": flat(level=0.69, rise=-0.2), "reward": flat()})
    stalled = result(1, dev(third), trajectory={"reward": flat(), "grad_norm": flat(level=0.01)})
    long = rollouts([[("4 + 5 = 9", True), ("1", False)] * 4 for _ in range(60)])
    for r in long:
        r["prompt"] = "Q: 4 + 5\nA:"
    return [evidence(dead, knobs, [result(1, dev(third))]),
            evidence(cut, knobs, [result(1, dev(third))]),
            evidence(hacked, knobs, [result(1, dev(third))]),
            evidence(starved, knobs, [result(1, dev(third))]),
            evidence(dead, knobs, [before, after], last_promotion={"branch": "b", "intervention": "x"}),
            evidence(dead, knobs, [stalled], baseline=dev(third)),
            evidence(long, knobs, [result(1, dev(third, budget=6))]),
            *(tools_evidence(tool_rows(["right"] * 4 + [kind] * 3 + ["wrong"])) for kind in ("capped", "error",
                                                                                               "repeat"))]


def test_every_mode_the_diagnostician_emits_is_registered_with_its_layer_and_every_registered_one_is_emitted(knobs):
    emitted: set[str] = set()
    for ev in scenarios(knobs):
        for d in HeuristicDiagnostician().diagnose(ev):
            assert d.failure_mode in modes.MODES, d.failure_mode
            assert d.layer == modes.MODES[d.failure_mode].layer, d.failure_mode
            emitted.add(d.failure_mode)
    assert emitted == set(modes.MODES)


def test_every_registered_mode_has_a_contract_layer_and_a_question():
    layers = set(typing.get_args(Layer))
    for m in modes.MODES.values():
        assert m.layer in layers and m.question in modes.QUESTIONS and m.reads and m.help, m.name
    assert {m.question for m in modes.MODES.values()} == set(modes.QUESTIONS)  # every question is answered
    with pytest.raises(ValueError, match="unknown failure mode 'nope'"):
        modes.get("nope")


def test_roles_tiers_are_the_registrys():
    assert roles.OBJECTIVE_MODES == modes.of_question("objective") == {"reward_disagreement"}
    assert roles.OVERSHOOT_MODES == modes.of_question("overshoot")
    for m in modes.MODES.values():
        d = Diagnosis(id="d", layer=m.layer, failure_mode=m.name, statement="s", severity=0.5, confidence=0.5)
        assert roles.urgency(d)[0] == m.tier


def test_the_llm_roles_prompts_list_every_mode():
    for role in ("diagnostician", "critic"):
        text = modes_prompt(role)
        for m in modes.MODES.values():
            assert f"- {m.name} ({m.layer}, {m.question})" in text


# --- the policy does not move ----------------------------------------------------------------------------------
def stall_case(knobs, changed: int = 0, reward: list[float] | None = None, rows=None, accuracy: float = 0.3,
               **fields) -> PhaseEvidence:
    """Phase 1 from a starting policy right on ``accuracy`` of the dev items; at its end ``changed`` verdicts flipped,
    half each way."""
    right = set(range(round(accuracy * DEV)))
    now = (right - set(range(changed // 2))) | set(range(DEV - changed + changed // 2, DEV))
    rows = rows if rows is not None else rollouts([[("1", False)] * 8 for _ in range(160)])
    phase = result(1, dev(now), trajectory={"reward": reward or flat(), "grad_norm": flat(level=0.0, seed=1)})
    return evidence(rows, knobs, [phase], baseline=dev(right), **fields)


def test_a_policy_whose_dev_verdicts_do_not_change_and_whose_reward_has_no_trend_is_stalled(knobs):
    d = found(stall_case(knobs))["policy_stalled"]
    e = d.evidence[0]
    assert (e.name, e.value, e.n) == ("dev_items_changed", 0.0, DEV) and e.high < 0.01 and d.layer == "score"
    assert "does not move" in d.statement and "100% of its groups have no reward spread" in d.statement
    assert [x.name for x in d.evidence] == ["dev_items_changed", "reward_shift", "zero_advantage_share",
                                            "grad_norm_mean"]
    assert HeuristicCritic().critique([d], stall_case(knobs), 0).diagnoses[0].status == "confirmed"


def test_a_stall_with_reward_spread_is_laid_to_the_step_not_the_signal(knobs):
    spread = rollouts([[("9", True), ("1", False)] * 4 for _ in range(160)])
    d = found(stall_case(knobs, rows=spread))["policy_stalled"]
    assert "has a signal that the step" in d.statement and f"learning rate {knobs.learning_rate:g}" in d.statement


@pytest.mark.parametrize("case", ["learning", "plateau", "reward_moves", "few_steps", "unpaired", "saturated"])
def test_a_policy_that_moves_or_cannot_be_told_is_not_stalled(knobs, case):
    """Healthy learning (verdicts change, the reward rises), a plateau (accuracy flat but 5% of verdicts change both
    ways: the policy still moves), a reward that moves within the phase while dev does not, too few steps to tell a
    trend, dev results without items to pair, and a policy with nothing left to gain by the band."""
    ev = {"learning": lambda: stall_case(knobs, changed=300, reward=flat(rise=0.2)),
          "plateau": lambda: stall_case(knobs, changed=100),
          "reward_moves": lambda: stall_case(knobs, reward=flat(rise=0.2)),
          "few_steps": lambda: stall_case(knobs, reward=flat(steps=7)),
          "unpaired": lambda: stall_case(knobs),
          "saturated": lambda: stall_case(knobs, accuracy=0.995)}[case]()
    if case == "unpaired":
        ev.baseline = ev.baseline.model_copy(update={"items": {}})
    assert "policy_stalled" not in found(ev)


def test_a_stall_is_judged_from_the_checkpoint_the_phase_trained_from(knobs):
    """Phase 2 trained on from the starting policy (``PhaseEvidence.start``), not from phase 1's checkpoint: its dev
    verdicts equal the starting policy's (stalled) though they differ from phase 1's."""
    right = set(range(600))
    rows = rollouts([[("1", False)] * 8 for _ in range(160)], phase=2)
    first, second = result(1, dev(set(range(900)))), result(2, dev(right), trajectory={"reward": flat()})
    ev = evidence(rows, knobs, [first, second], baseline=dev(right))
    assert "policy_stalled" not in found(ev)
    ev.start = ev.baseline
    assert "since the starting policy" in found(ev)["policy_stalled"].statement


# --- what trains is not what is evaluated ----------------------------------------------------------------------
def long_answers(knobs, budget: int, completion: str = "4 + 5 = 9") -> PhaseEvidence:
    rows = rollouts([[(completion, True), ("9", True), ("1", False), ("1", False)] * 2 for _ in range(60)])
    ev = evidence(rows, knobs, [result(1, dev(set(range(600)), budget=budget))])
    ev.knobs = knobs.model_copy(update={"max_completion_length": 12})
    return ev


def test_right_answers_the_evaluators_shorter_budget_cuts_are_a_mismatch(knobs):
    d = found(long_answers(knobs, budget=6))["train_eval_mismatch"]
    e = d.evidence[0]
    assert (e.name, e.value, e.n) == ("correct_cut_by_evaluator", 0.5, 240) and d.confidence == 0.9
    assert [x.value for x in d.evidence if x.name == "evaluator_budget"] == [6]
    assert "max_completion_length 12" in d.statement and "at 6 tokens" in d.statement


@pytest.mark.parametrize("budget, completion", [(16, "4 + 5 = 9"), (6, "9\nas 4 + 5 makes 9")])
def test_answers_the_evaluators_budget_keeps_are_no_mismatch(knobs, budget, completion):
    """A budget they fit in, or one that cuts a completion after its answer line (the evaluator still reads 9)."""
    assert "train_eval_mismatch" not in found(long_answers(knobs, budget, completion))


def prompt_case(knobs, prompt: str, dev_gain: int = 0) -> PhaseEvidence:
    """A phase whose training verified share rises from 1 to 5 in 8 over 40 steps, on ``prompt``; dev gains
    ``dev_gain`` items from the starting policy's 600 of 2000."""
    rows = rollouts(learning_groups())
    for r in rows:
        r["prompt"] = prompt
    phase = result(1, dev(set(range(600 + dev_gain))), trajectory={"reward": flat(rise=0.4)})
    return evidence(rows, knobs, [phase], baseline=dev(set(range(600))))


def test_training_gains_on_a_prompt_the_evaluator_does_not_show_that_do_not_reach_dev_are_a_mismatch(knobs):
    ev = prompt_case(knobs, "Q: 4 + 5\nA:")
    d = found(ev)["train_eval_mismatch"]
    assert d.evidence[0].name == "train_dev_divergence" and d.evidence[0].low > 0
    assert d.evidence[1].name == "prompt_not_evaluators" and d.evidence[1].value == 1.0
    assert "'4+5='" in d.statement and "does not reach the evaluator" in d.statement
    assert "policy_stalled" not in found(ev)  # training moves: not the same question
    assert HeuristicCritic().critique([d], ev, 0).diagnoses[0].status == "confirmed"


@pytest.mark.parametrize("prompt, dev_gain", [("4+5=", 0), ("user: What is 4 + 5? Reply with only the number.", 0),
                                              ("Q: 4 + 5\nA:", 800)])
def test_no_mismatch_on_the_evaluators_prompt_or_when_dev_follows_training(knobs, prompt, dev_gain):
    """The canonical prompt and its chat form (training's sampled share rising while greedy dev stands still is a
    policy sharpening, not a mismatch), and another prompt whose gains reach dev (+40 points against training's +37)."""
    assert "train_eval_mismatch" not in found(prompt_case(knobs, prompt, dev_gain))


def test_a_healthy_learning_phase_on_the_clean_seed_confirms_neither_new_mode(knobs):
    """Training's right answers rise, dev verdicts change and accuracy rises with them, on the evaluator's prompt
    and within its budget: neither the policy-stalled nor the mismatch rule fires."""
    rows = rollouts(learning_groups())
    right = set(range(600))
    phase = result(1, dev(right | set(range(1000, 1500))), trajectory={"reward": flat(rise=0.4),
                                                                        "grad_norm": flat(level=0.5)})
    got = found(evidence(rows, knobs, [phase], baseline=dev(right)))
    assert not {"policy_stalled", "train_eval_mismatch"} & set(got)



def test_the_agents_doc_lists_every_mode():
    text = (Path(__file__).parents[1] / "docs" / "agents.md").read_text()
    assert [m for m in modes.MODES if f"`{m}`" not in text] == []
