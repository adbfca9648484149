"""The console's phase summary says why a phase has no diagnoses: none found, or none looked for (a baseline)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from evotrainer.console import Reporter

SUMMARY = {"phase": 1, "accuracy": 0.0, "previous_accuracy": 0.0, "eval_n": 10, "change": None, "dev_accuracy": 0.0,
           "dev_n": 20, "harness_sha": "a" * 40, "train_s": 1.0, "reward_mean": 0.2, "dead_group_ratio": 0.4,
           "kept_fraction": 1.0, "truncation_rate": 0.0, "diagnoses": [], "candidates": [], "promoted": [],
           "effects": []}


@pytest.mark.parametrize(("mode", "waits", "said"), [
    ("evolve", False, "diagnoses: none (the Diagnostician named none, and no built-in rule fired)"),
    ("evolve", True, "diagnoses: not made yet: after the last phase the round waits"),
    ("static", False, "diagnoses: not made (evolution.mode static: no Diagnostician runs)"),
    ("keep_discard", False, "diagnoses: not made (evolution.mode keep_discard: no Diagnostician runs)"),
])
def test_a_phase_without_diagnoses_says_whether_anyone_looked(mode: str, waits: bool, said: str):
    """After the last phase no round runs unless a later phase would train on it: the demo's last phase said "no
    built-in rule fired" though nothing had looked."""
    out = io.StringIO()
    Reporter(Console(file=out, width=200)).phase_summary({**SUMMARY, "mode": mode, "round_waits": waits})
    assert said in out.getvalue()


def test_the_tolerant_score_is_printed_beside_held_out_accuracy_when_measured():
    change = {"change": 0.05, "low": 0.01, "high": 0.09, "method": "paired bootstrap"}
    out = io.StringIO()
    Reporter(Console(file=out, width=200)).phase_summary({**SUMMARY, "previous_label": "start",
                                                          "tolerant_accuracy": 0.45, "tolerant_change": change})
    assert "held-out tolerant score 45.0% (+5.0% vs start, 95% CI +1.0% to +9.0%)" in out.getvalue()
    assert "reports only" in out.getvalue()
    out = io.StringIO()
    Reporter(Console(file=out, width=200)).phase_summary({**SUMMARY, "tolerant_accuracy": None})  # not measured
    assert "tolerant" not in out.getvalue()
