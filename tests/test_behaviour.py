"""Target metrics are measured from rollout rows: every metric a move promises to move, in every domain, is a figure
the effect step computes (``evotrainer.judge.targets.measure``), and the behaviour figures (``evotrainer.behaviour``)
count what they say on synthetic rows, the same figure the Diagnostician alerts on."""

from __future__ import annotations

import pytest

from agents.playbook import for_domain
from evotrainer import behaviour
from evotrainer.domains import DOMAINS, get_domain
from evotrainer.judge.scoring import trained
from evotrainer.judge.targets import measure
from tests.conftest import rollouts
from tests.test_tool_modes import TASKS, found, tool_rows, tools_evidence, transcript


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_target_metric_a_move_of_the_domain_declares_is_measured_from_rollout_rows(domain):
    d = get_domain(domain)
    rows = [{**r, "trained": trained(r)} for r in rollouts([[("9", True), ("x", False)] * 2] * 8)]
    declared = {m.target_metric for m in for_domain(domain)}
    assert {"turn_cap_rate", "needless_call_share", "format_failure_rate"} <= declared or domain != "tools"
    unmeasured = sorted(m for m in declared if not isinstance(measure(m, rows, d), float))
    assert not unmeasured, f"{domain}: moves target metrics no rollout row measures: {unmeasured}"
    assert measure("no_such_metric", rows, d) is None  # the check can fail


def test_the_format_failure_rate_is_the_share_of_completions_without_a_readable_answer():
    math = get_domain("math")
    rows = rollouts([[("9", True), ("the answer is", False), ("", False), ("12", False)]] * 3)
    assert behaviour.figure("format_failure_rate", math)(rows) == pytest.approx(0.5)
    assert behaviour.figure("format_failure_rate", math)(rows[:1]) == 0.0
    assert behaviour.figure("format_failure_rate", math)([]) == 0.0


def _capped(kinds: list[str]) -> list[dict]:
    """tool rows of ``kinds``, where "loop" is a rollout the cap stopped while it repeated its calls."""
    rows = tool_rows(["capped" if k == "loop" else k for k in kinds])
    for r in rows:
        if kinds[r["sample_idx"]] == "loop":
            calls, _ = transcript(next(t for t in TASKS if t["id"] == r["task_id"]), "capped")
            r["completion"] = calls + calls
    return rows


def test_the_turn_cap_rate_counts_the_rollouts_stopped_short_not_those_looping():
    tools = get_domain("tools")
    rows = _capped(["right"] * 4 + ["capped"] * 2 + ["loop"] * 2)
    assert behaviour.figure("turn_cap_rate", tools)(rows) == pytest.approx(2 / 8)
    assert behaviour.figure("turn_cap_rate", tools)(tool_rows(["right"] * 8)) == 0.0
    single = rollouts([[("9", True)] * 4])  # a single-turn store: no turn fields, no cap
    assert behaviour.figure("turn_cap_rate", tools)(single) == 0.0


def test_the_needless_call_share_counts_repeats_and_calls_beyond_what_right_answers_make():
    tools = get_domain("tools")
    rows = tool_rows(["right"] * 5 + ["repeat"] + ["decoy"] * 2)  # right answers mostly call each key once
    calls = sum(r["tool_calls"] for r in rows)
    needless = sum(r["tool_calls"] // 2 for r in rows if r["sample_idx"] == 5) + sum(
        1 for r in rows if r["sample_idx"] in (6, 7))  # each repeat's second half; each decoy's extra call
    assert behaviour.figure("needless_call_share", tools)(rows) == pytest.approx(needless / calls)
    assert behaviour.figure("needless_call_share", tools)(tool_rows(["right"] * 8)) == 0.0
    assert behaviour.figure("needless_call_share", tools)(rollouts([[("9", True)] * 4])) == 0.0  # no call at all


@pytest.mark.parametrize("mode, figure, kinds", [
    ("turn_cap_hit", "turn_cap_rate", ["right"] * 3 + ["capped"] * 3 + ["loop"] * 2),
    ("tool_spam", "needless_call_share", ["right"] * 4 + ["repeat"] * 2 + ["decoy"] * 2),
])
def test_the_diagnostician_alerts_on_the_figure_the_effect_step_measures(mode, figure, kinds):
    rows = _capped(kinds)
    cited = found(tools_evidence(rows))[mode].evidence[0]
    assert cited.name == figure and cited.value == pytest.approx(measure(figure, rows, get_domain("tools")))


def test_a_behaviour_figure_without_its_domain_is_refused_in_one_line():
    with pytest.raises(ValueError, match="through their domain"):
        measure("turn_cap_rate", tool_rows(["right"]))
    with pytest.raises(KeyError, match="unknown behaviour figure"):
        behaviour.figure("kept_fraction", get_domain("tools"))


def test_the_effect_step_reports_a_raised_cap_s_realized_turn_cap_rate(tmp_path):
    """A promoted raise_max_turns judged on the phase it trained: the turn cap rate of the phase before against the
    phase after, read from the run's rollout store through the run's domain, not "not measurable"."""
    from evotrainer.config import Config
    from evotrainer.contracts import Candidate, EvalResult, PhaseResult, Promotion, Rollout
    from evotrainer.loop.effect import realized_effect
    from evotrainer.loop.evidence import EvidenceCache
    from evotrainer.rollouts import write_rollouts
    from evotrainer.rundir import RunDir

    rd = RunDir(tmp_path)
    for phase, kinds in ((1, ["right"] * 4 + ["capped"] * 4), (2, ["right"] * 7 + ["capped"])):
        write_rollouts([Rollout(**{**r, "phase": phase}) for r in _capped(kinds)], rd.rollout_file(phase))
    ev = EvalResult(accuracy=0.5, n=2, items={"dev-0": 1.0, "dev-1": 0.0})
    results = [PhaseResult(phase=p, harness_sha="a" * 40, steps=1, eval=ev, dev=ev, rollout_path="",
                           checkpoint_path="", wall_time_s=1.0, tokens=1) for p in (1, 2)]
    cand = Candidate(branch="c1", base_sha="a" * 40, sha="b" * 40, diagnosis_id="d1-1", intervention="raise_max_turns",
                     hypothesis="h", variable="harness.yaml:max_turns", target_metric="turn_cap_rate",
                     direction="down", expected="down", rollback="revert", files=["harness.yaml"])
    promo = Promotion(phase=1, branch="c1", sha="b" * 40, main_sha="c" * 40, candidate=cand)
    effect = realized_effect(EvidenceCache(rd, repo=None, cfg=Config(domain="tools")), promo, results)
    assert (effect["before"], effect["after"]) == (pytest.approx(0.5), pytest.approx(1 / 8))
    assert "turn_cap_rate 0.500 -> 0.125 (as promised)" in effect["summary"]
