"""The run report: written by `evotrainer run` after every phase, rendered on demand, safe with hostile text, drawn
by a real browser; and the documented `--json` outputs of `status` and `log`.

One short real run (2 phases, FAST overrides, through the CLI and the real trainer service) is made for the module.
The browser test renders its report in Debian's Chromium (headless) and checks the screenshot: the charts drew.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from evotrainer.contracts import EvalResult, Rollout
from evotrainer.report import accuracy_change, write_quietly
from evotrainer.rollouts import read_rollouts, write_rollouts
from evotrainer.rundir import RunDir
from tests.conftest import FAST, ROOT, cli

HOSTILE = '</pre><script>alert("pwned")</script><img src=x onerror=alert(1)> "quoted" & \'single\''
PHASES = 2


@pytest.fixture(scope="module")
def env(policy_cache) -> dict:
    import os

    return {**os.environ, "EVOTRAINER_CACHE": str(policy_cache), "PYTHONPATH": str(ROOT), "COLUMNS": "200",
            "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, env) -> Path:
    run = tmp_path_factory.mktemp("report") / "run"
    cli(["init", str(run), *[a for o in [*FAST, f"phases={PHASES}"] for a in ("--set", o)]], env)
    cli(["run", str(run)], env)
    return run


@pytest.fixture(scope="module")
def hostile_run(run_dir, tmp_path_factory) -> Path:
    """A copy of the run whose phase-1 rollouts carry markup in the best completion, a prompt and a task id."""
    copy = tmp_path_factory.mktemp("hostile") / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("checkpoints", "policy"))
    shutil.copytree(run_dir / "checkpoints", copy / "checkpoints", ignore=shutil.ignore_patterns("*.safetensors"))
    path = copy / "rollouts" / "phase-0001.parquet"
    rows = read_rollouts(path)
    best = max(range(len(rows)), key=lambda i: (rows[i]["reward"], rows[i]["verified"], -rows[i]["completion_tokens"]))
    rows[best].update(completion=HOSTILE, prompt=HOSTILE, task_id='t"><script>x</script>', reward=99.0)
    write_rollouts([Rollout(**r) for r in rows], path)
    return copy


def _events(run: Path, kind: str) -> list[dict]:
    return [e for e in RunDir(run).events.read(kind)]


def test_the_run_writes_its_report_after_every_phase(run_dir: Path):
    written = _events(run_dir, "report")
    assert [e["phase"] for e in written] == list(range(1, PHASES + 1)) and not _events(run_dir, "report_error")
    assert all(e["bytes"] > 20_000 and e["seconds"] < 60 for e in written)
    assert (run_dir / "report.html").stat().st_size == written[-1]["bytes"]


def test_report_shows_phases_candidates_and_loads_nothing(run_dir: Path, env: dict, tmp_path: Path):
    out = tmp_path / "r.html"
    assert "wrote" in cli(["report", str(run_dir), "--out", str(out)], env).stdout
    page = out.read_text()
    assert page.count('<svg class="chart"') == 4  # accuracy, training, health, lineage
    for phase in range(1, PHASES + 1):
        assert f"<h3>phase {phase}</h3>" in page  # its sample rollouts
    assert "<td>start</td>" in page and ("paired bootstrap" in page)  # items logged by both sides: paired
    log = json.loads(cli(["log", str(run_dir), "--json"], env).stdout)
    assert log, "the FAST run makes candidates"
    for entry in log:
        anchor = "c-" + re.sub(r"[^A-Za-z0-9_-]", "-", entry["branch"])
        assert f'id="{anchor}"' in page and f'"#{anchor}"' in page  # a card, and a lineage node linking to it
        assert entry["state"] in page and entry["sha"][:8] in page
    assert 'id="skills"' in page and "<td>diagnostician</td>" in page and "<td>engineer</td>" in page
    # self-contained: no script, every src/href/url() stays inside the page
    assert "<script" not in page.lower()
    refs = re.findall(r'(?:src|href)\s*=\s*["\']?([^"\' >]+)', page) + re.findall(r"url\(([^)]*)\)", page)
    assert refs and all(r.startswith("#") for r in refs), [r for r in refs if not r.startswith("#")]


def test_a_bench_arm_shows_every_arm_of_its_seed_on_one_chart(run_dir: Path, env: dict, tmp_path: Path):
    """Two arms of a bench folder (copies of the finished run, so their curves coincide) and the bench's table."""
    from evotrainer import bench

    folder = tmp_path / "bench"
    for arm in ("static", "evotrainer"):
        shutil.copytree(run_dir, folder / bench.run_dir_name(arm, 0), ignore=shutil.ignore_patterns("*.safetensors"))
    outside = tmp_path / "lone" / "evotrainer-seed0"  # an arm-like name with no other arm beside it
    shutil.copytree(run_dir, outside, ignore=shutil.ignore_patterns("*.safetensors", "checkpoints", "policy"))
    assert bench.arms_beside(outside) == {} and bench.arms_beside(run_dir) == {}
    assert list(bench.arms_beside(folder / "evotrainer-seed0")) == ["static", "evotrainer"]

    cli(["report", str(folder / "evotrainer-seed0")], env)
    page = (folder / "evotrainer-seed0" / "report.html").read_text()
    assert page.count('<svg class="chart"') == 5 and 'data-chart="bench"' in page and 'href="#bench"' in page
    assert "this run is the <code>evotrainer</code> arm" in page and "evotrainer (this run)" in page
    assert "minus static" not in page  # no bench.json yet: the bench has not finished
    outcomes = {arm: {0: bench._outcome(RunDir(folder / bench.run_dir_name(arm, 0)))} for arm in ("static", "evotrainer")}
    (folder / "bench.json").write_text(json.dumps({**bench.summarize(outcomes, [0]), "seeds": [0]}))
    cli(["report", str(folder / "static-seed0")], env)
    page = (folder / "static-seed0" / "report.html").read_text()
    assert "static (this run)" in page and "minus static [95% paired]" in page and "+0.0% [+0.0%, +0.0%]" in page
    assert page.count('<svg class="chart"') == 5 and "<script" not in page.lower()


def test_rollout_text_is_escaped(hostile_run: Path, env: dict):
    cli(["report", str(hostile_run)], env)
    page = (hostile_run / "report.html").read_text()
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;/pre&gt;&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page
    assert "&quot;quoted&quot; &amp; &#x27;single&#x27;" in page
    assert "t&quot;&gt;&lt;script&gt;x&lt;/script&gt;" in page


def test_a_failing_report_is_an_event_not_a_stop(hostile_run: Path, tmp_path: Path):
    broken = tmp_path / "run"
    shutil.copytree(hostile_run, broken)
    (broken / "checkpoints" / "phase-0001" / "result.json").write_text("{not json")
    write_quietly(RunDir(broken), phase=1)  # must not raise
    errors = _events(broken, "report_error")
    assert len(errors) == 1 and errors[0]["phase"] == 1 and "ValidationError" in errors[0]["error"]


def test_accuracy_change_is_paired_when_both_sides_have_items():
    before = EvalResult(accuracy=0.5, n=200, items={f"t{i}": float(i % 2) for i in range(200)})
    same = accuracy_change(before, before)
    assert same["method"] == "paired bootstrap" and same["change"] == same["low"] == same["high"] == 0.0
    flips = dict(before.items, **{f"t{i}": 1.0 for i in range(0, 20, 2)})  # 10 items fixed, nothing broken
    after = EvalResult(accuracy=0.55, n=200, items=flips)
    paired = accuracy_change(before, after)
    unpaired = accuracy_change(EvalResult(accuracy=0.5, n=200), after)
    assert unpaired["method"] == "unpaired normal" and paired["change"] == pytest.approx(0.05)
    assert 0 < paired["low"] < 0.05 < paired["high"]  # 10 of 200 fixed, none broken: clearly a gain when paired
    assert unpaired["low"] < 0 < paired["low"]  # the same change is within noise when the pairing is ignored


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (.ci/run installs Debian's chromium)")
def test_the_report_draws_in_a_real_browser(run_dir: Path, tmp_path: Path):
    import numpy as np
    from PIL import Image

    page = (run_dir / "report.html").resolve().as_uri()
    base = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'p'}"]
    shot = tmp_path / "report.png"
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1400,3000", page], capture_output=True,
                   timeout=120, check=True)
    dom = subprocess.run([*base, "--dump-dom", page], capture_output=True, text=True, timeout=120, check=True).stdout
    source = (run_dir / "report.html").read_text()
    assert dom.count('<svg class="chart"') == 4 and dom.count("<path") == source.count("<path") > 100  # all parsed
    img = Image.open(shot).convert("RGB")
    assert img.size == (1400, 3000)
    pixels = np.asarray(img).reshape(-1, 3).astype(int)

    def near(rgb: tuple[int, int, int], tol: int = 30) -> int:
        return int((np.abs(pixels - np.array(rgb)).max(axis=1) <= tol).sum())

    assert near((0x15, 0x65, 0xC0)) > 3000  # the charts' blue: accuracy line, lineage's main, health series
    assert near((0xDC, 0xE8, 0xF6), tol=8) > 20_000  # the accuracy chart's Wilson band (pale blue fill)
    assert near((0x2E, 0x7D, 0x32)) + near((0xEF, 0x6C, 0x00)) + near((0xC6, 0x28, 0x28)) > 300  # candidates
    white = near((255, 255, 255), tol=0)
    assert 0.3 < white / len(pixels) < 0.97  # neither blank nor garbage


def _documented_keys(section: str) -> list[str]:
    readme = (ROOT / "README.md").read_text()
    start = readme.index(section)
    table = readme[start:].split("\n\n")[1]
    return re.findall(r"^\| `([a-z_]+)` \|", table, re.M)


def test_json_outputs_keep_their_documented_keys(run_dir: Path, env: dict):
    status = json.loads(cli(["status", str(run_dir), "--json"], env).stdout)
    assert list(status) == _documented_keys("`evotrainer status RUN_DIR --json` prints")
    entries = json.loads(cli(["log", str(run_dir), "--json"], env).stdout)
    assert entries and all(list(e) == _documented_keys("`evotrainer log RUN_DIR --json` prints") for e in entries)


def test_agent_usage_counts_calls_tokens_and_cost_per_role_when_logged(tmp_path: Path):
    from evotrainer.report import agent_usage

    rd = RunDir(tmp_path)
    ev = rd.events
    ev.emit("node_end", node="diagnose", agent="diagnostician", model="heuristic", seconds=0.5)
    ev.emit("verdict", agent="backtester", model="heuristic")  # no seconds, no tokens: still an action
    ev.emit("llm_call", role="engineer", model="m1", outcome="ok", prompt_tokens=100, completion_tokens=20,
            cost_usd=0.002)
    ev.emit("llm_call", role="engineer", model="m1", outcome="invalid", prompt_tokens=50, cost_usd=0.001)
    ev.emit("llm_call", role="engineer", model="heuristic", outcome="builtin")
    ev.emit("node_end", node="engineer", agent="engineer", model="m1", seconds=2.0, tokens=7)
    ev.emit("candidate", branch="candidates/phase-1-1", skills_used=["s1"])
    rows, used_by = agent_usage(rd)
    by = {r["role"]: r for r in rows}
    assert by["diagnostician"]["actions"] == 1 and by["diagnostician"]["seconds"] == 0.5
    assert by["backtester"]["actions"] == 1 and by["backtester"]["tokens"] == 0
    eng = by["engineer"]
    assert (eng["llm_calls"], eng["failed_calls"], eng["fallbacks"], eng["tokens"]) == (2, 1, 1, 177)
    assert eng["cost_usd"] == pytest.approx(0.003) and eng["models"] == ["m1"]
    assert used_by == {"s1": ["candidates/phase-1-1"]}


def test_a_run_without_phases_has_a_report_too(tmp_path: Path, env: dict):
    run = tmp_path / "fresh"
    cli(["init", str(run), *[a for o in FAST for a in ("--set", o)]], env)
    cli(["report", str(run)], env)
    page = (run / "report.html").read_text()
    assert "no phase yet" in page and "no candidate harness edits yet" in page and "<script" not in page
    bad = cli(["report", str(tmp_path / "nowhere")], env, check=False)
    assert bad.returncode == 2 and "not a run directory" in bad.stdout


def test_an_edit_that_showed_no_effect_on_main_is_not_retried_on_the_same_main(run_dir: Path, env: dict):
    """Phase 1's "no effect" rejection is remembered in the run's state: phase 2's Engineer, on the same main,
    proposes something else (a different intervention, or nothing)."""
    verdicts = _events(run_dir, "verdict")
    cands = {e["branch"]: e for e in _events(run_dir, "candidate")}
    dud = [(cands[v["branch"]]["base_sha"], cands[v["branch"]]["intervention"]) for v in verdicts
           if v["phase"] == 1 and any(r.startswith("effect: no effect") for r in v["reasons"])]
    assert dud, "the FAST run's first edit (drop zero-variance groups) changes no update"
    later = [(c["base_sha"], c["intervention"]) for c in cands.values() if c["phase"] == 2]
    assert not set(dud) & set(later), (dud, later)
