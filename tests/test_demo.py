"""The demo's last words: the evolved run against the same faulty seed left alone, paired per held-out task, and the
defect named plainly (from its card) before anything trains."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer import demo
from evotrainer.contracts import EvalResult, PhaseResult
from evotrainer.harness import faults
from evotrainer.rundir import RunDir


def _write_phases(root: Path, finals: list[list[float]], tolerant: list[list[float]] | None = None) -> None:
    rd = RunDir(root)
    for phase, items in enumerate(finals, 1):
        scores = {f"held_out-{i}": s for i, s in enumerate(items)}
        lenient = (tolerant or [])[phase - 1:phase]
        ev = EvalResult(accuracy=sum(items) / len(items), n=len(items), items=scores, **({
            "tolerant_accuracy": sum(lenient[0]) / len(items),
            "tolerant_items": {f"held_out-{i}": s for i, s in enumerate(lenient[0])}} if lenient else {}))
        result = PhaseResult(phase=phase, harness_sha="a" * 40, steps=1, eval=ev, dev=ev, rollout_path="",
                             checkpoint_path="", wall_time_s=1.0, tokens=1)
        rd.checkpoint(phase).mkdir(parents=True)
        (rd.checkpoint(phase) / "result.json").write_text(result.model_dump_json())


def test_the_summary_compares_the_evolved_run_with_the_faulty_seed_left_alone(tmp_path: Path):
    run = tmp_path / "demo"
    n = 400
    _write_phases(run, [[1.0] * 200 + [0.0] * 200, [1.0] * 240 + [0.0] * 160])  # 60% after phase 2
    _write_phases(demo.static_dir(run), [[0.0] * n, [1.0] * 20 + [0.0] * 380])  # 5% after phase 2
    assert demo.static_dir(run) == tmp_path / "demo-static"
    c = demo.comparison(run)
    assert c["phases"] == 2 and c["evotrainer"] == pytest.approx(0.60) and c["static"] == pytest.approx(0.05)
    assert c["gain"]["diff"] == pytest.approx(0.55) and 0.45 < c["gain"]["low"] < 0.55 < c["gain"]["high"] < 0.65
    lines = demo.summary_lines(run, "divergence")
    assert "planted defect, divergence" in lines[0] and "EvoTrainer 60.0%" in lines[0] and "left alone 5.0%" in lines[0]
    assert "+55.0%" in lines[1] and "paired on 400 held-out tasks" in lines[1]
    _write_phases(tmp_path / "short", [[1.0] * n])
    _write_phases(tmp_path / "short-static", [[0.0] * n, [0.0] * n])
    assert demo.comparison(tmp_path / "short")["phases"] == 1  # compared after the phases both trained


def test_the_summary_says_the_tolerant_score_beside_the_strict_one_when_both_runs_measured_it(tmp_path: Path):
    run, n = tmp_path / "demo", 400
    _write_phases(run, [[0.0] * n], tolerant=[[1.0] * 300 + [0.0] * 100])  # strict 0%, tolerant 75%
    _write_phases(demo.static_dir(run), [[0.0] * n], tolerant=[[1.0] * 100 + [0.0] * 300])  # tolerant 25%
    t = demo.comparison(run)["tolerant"]
    assert t["evotrainer"] == pytest.approx(0.75) and t["static"] == pytest.approx(0.25)
    assert t["gain"]["diff"] == pytest.approx(0.5) and t["gain"]["low"] > 0.4
    lines = demo.summary_lines(run, "divergence")
    assert len(lines) == 3 and "tolerant score" in lines[2] and "+50.0%" in lines[2] and "+0.0%" in lines[1]
    _write_phases(tmp_path / "old", [[0.0] * n])  # evaluations from before the tolerant score: said nothing of it
    _write_phases(tmp_path / "old-static", [[0.0] * n], tolerant=[[1.0] * n])
    assert demo.comparison(tmp_path / "old")["tolerant"] is None and len(demo.summary_lines(tmp_path / "old", "x")) == 2


def test_the_demo_s_defect_is_catalogued_and_said_plainly():
    from evotrainer.domains import DOMAINS

    assert demo.DEFAULT_FAULT in faults.names("math") and demo.DEFAULT_FAULT == demo.default_fault("math")
    for domain in DOMAINS:  # each domain's demo plants one of its own defects, or none
        assert demo.default_fault(domain) in ["none", *faults.names(domain)], domain
    for name in faults.names():
        said = demo.what_is_wrong(name)
        assert 40 < len(said) < 800 and "\n" not in said and not said.startswith("#"), (name, said)


def test_the_demo_help_names_each_domain_s_demo_defect():
    import inspect

    from evotrainer import cli
    from evotrainer.domains import DOMAINS

    said = " ".join(inspect.signature(cli.demo).parameters["fault"].default.help.split())
    for domain in DOMAINS:  # `evotrainer demo --help` says the defect the registry plants by default
        fault = demo.default_fault(domain)
        assert fault == "none" or f"{domain}'s {fault}" in said or f"{domain}' {fault}" in said, (domain, said)
    assert demo.default_fault("tools") in faults.names("tools")  # every domain has a demo defect


def test_demo_bench_and_init_take_any_registered_domain_and_refuse_another_in_one_line(tmp_path: Path, cli_env):
    from tests.conftest import cli

    for args in (["demo", str(tmp_path / "d")], ["bench", str(tmp_path / "b"), "--faults", "all"],
                 ["init", str(tmp_path / "i")]):
        proc = cli([*args, "--domain", "chess"], cli_env, check=False)
        out = (proc.stdout + proc.stderr).strip()
        assert proc.returncode == 2 and len(out.splitlines()) == 1 and "unknown domain 'chess' (registered: math" in out
    assert list(tmp_path.iterdir()) == []
