"""The run report: written by `evotrainer run` after every phase, rendered on demand, safe with hostile text, drawn
by a real browser; and the documented `--json` outputs of `status` and `log`.

One short real run (2 phases, FAST overrides, through the CLI and the real trainer service) is made for the module;
the other runs are copies of it, edited the way a longer run would have changed them (a promotion that moved main,
candidates and a skill carrying markup or dollar signs, LLM calls). The browser test renders the report in
Debian's Chromium (headless, driven over its DevTools pipe) and screenshots each chart on its own: every chart
drew, and a blanked one is caught. Without Chromium that test is skipped, unless EVOTRAINER_REQUIRE_CHROMIUM=1
(set by .ci/run once it has installed Chromium), which makes it fail.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from evotrainer.contracts import EvalResult, Rollout, Skill
from evotrainer.harness.repo import HarnessRepo
from evotrainer.metrics import accuracy_change
from evotrainer.report.html import write_quietly
from evotrainer.report.history import phase_results
from evotrainer.rollouts import read_rollouts, write_rollouts
from evotrainer.rundir import RunDir
from tests.conftest import FAST, ROOT, cli

HOSTILE = '</pre><script>alert("pwned")</script><img src=x onerror=alert(1)> "quoted" & \'single\''
PHASES = 2
# the report reads what a run wrote; the fault bench's second Engineer round and counterfactual phases add nothing
# it shows that one round does not (evolved_run plants a realized effect); they only cost the fixture time
LIGHT = ("evolution.max_engineer_rounds=1", "evolution.counterfactual=false")
# RUN_SLOW: the tests that read run_dir (or a copy of it) are slow tests: the fixture is a whole two-phase `evotrainer
# run` (73 s of the fast suite's 727 s at stop 44, over its 10 minutes); CI's `make test-slow` runs them. The report's
# fast tests build what they read by hand.


@pytest.fixture(scope="module")
def env(policy_cache) -> dict:
    import os

    return {**os.environ, "EVOTRAINER_CACHE": str(policy_cache), "PYTHONPATH": str(ROOT), "COLUMNS": "200",
            "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, env) -> Path:
    run = tmp_path_factory.mktemp("report") / "run"
    cli(["init", str(run), *[a for o in [*FAST, f"phases={PHASES}", *LIGHT] for a in ("--set", o)]], env)
    cli(["run", str(run)], env)
    return run


@pytest.mark.slow  # a whole `evotrainer run` (the trainer service started, nothing left to train)
def test_a_finished_run_run_again_writes_its_report(run_dir: Path, env: dict, tmp_path: Path):
    """The run writes the report after each phase's Librarian; one killed between the two still gets its page when
    it is run again (nothing left to train), as does a finished run whose page was deleted."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "report.html").unlink()
    cli(["run", str(copy)], env)
    assert (copy / "report.html").is_file()
    assert [e for e in map(json.loads, (copy / "events.jsonl").read_text().splitlines())][-2]["kind"] == "report"


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


MATH = ("a $\\frac$ b", "$x$")  # matplotlib would read these as mathtext: the first raised, the second drew an italic x
LLM_CALLS = [("engineer", {"prompt_tokens": 1000, "completion_tokens": 200, "cost_usd": 0.01}),
             ("engineer", {"prompt_tokens": 30, "completion_tokens": 4, "cost_usd": 0.0023}),
             ("critic", {"tokens": 500, "cost_usd": 0.002})]


@pytest.fixture(scope="module")
def evolved_run(run_dir, tmp_path_factory, env) -> Path:
    """A copy of the run as a longer one would have left it: phase 1's first candidate promoted (main moved, phase 2
    trained on the merge, the realized effect noted), a phase-2 candidate whose trailers, diff, backtest reasons, trial
    and subject carry markup, two whose variables carry dollar signs, a skill with a record (markup in its text) that
    the hostile candidate used, and LLM calls of two roles. Its report is written by the CLI."""
    copy = tmp_path_factory.mktemp("evolved") / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("checkpoints", "policy"))
    shutil.copytree(run_dir / "checkpoints", copy / "checkpoints", ignore=shutil.ignore_patterns("*.safetensors"))
    repo, rd = HarnessRepo(copy / "harness"), RunDir(copy)
    first = "candidates/phase-1-1"
    new_main = repo.promote(first, f"Promote {first}", "", {"Candidate": first})
    repo.add_note(repo.sha(first), {"summary": f"held-out +2.5% (95% CI -1.0% to +6.0%) {HOSTILE}"}, ref="effect")
    result = copy / "checkpoints" / "phase-0002" / "result.json"
    result.write_text(json.dumps({**json.loads(result.read_text()), "harness_sha": new_main}))
    prompt = repo.show_file(new_main, "prompt.py")
    sha = repo.commit_candidate("candidates/phase-2-7", new_main, {"prompt.py": f"{prompt}# {HOSTILE}\n"},
                                f"prompt: {HOSTILE}", "", {"Diagnosis": HOSTILE, "Hypothesis": HOSTILE,
                                                            "Variable": f"prompt.{HOSTILE}", "Expected": HOSTILE})
    trial = {"name": "trial:probe_accuracy", "base": 0.125, "candidate": 0.375, "threshold": None, "passed": False,
             "detail": f"gain +0.2500 {HOSTILE}"}
    repo.add_note(sha, {"verdict": "reject", "reasons": [HOSTILE], "checks": [trial], "pilot_log": HOSTILE})
    for k, label in enumerate(MATH, start=8):
        sha = repo.commit_candidate(f"candidates/phase-2-{k}", new_main, {"prompt.py": f"{prompt}# {k}\n"},
                                    f"prompt: {label}", "", {"Variable": f"prompt.{label}", "Hypothesis": label})
        repo.add_note(sha, {"verdict": "reject", "reasons": [f"no gain for {label}"], "checks": []})
    from evotrainer.skills import SkillStore  # its embedder loads once per process: test_skills then has it

    SkillStore(copy / "skills").add(Skill(id="skill-hostile", trigger=HOSTILE, failure_mode="dead_groups",
                                          intervention=HOSTILE, expected_outcome=HOSTILE, validation=HOSTILE,
                                          domains=["math"], uses=3, wins=2))
    rd.events.emit("candidate", phase=2, branch="candidates/phase-2-7", skills_used=["skill-hostile"])
    for role, figures in LLM_CALLS:
        rd.events.emit("llm_call", phase=2, role=role, model=f"m-{role}", outcome="ok", **figures)
    cli(["report", str(copy)], env)
    return copy


def _events(run: Path, kind: str) -> list[dict]:
    return [e for e in RunDir(run).events.read(kind)]


def _page(run: Path) -> str:
    return (run / "report.html").read_text()


def _chart(page: str, name: str) -> str:
    """One chart's inline SVG."""
    return re.search(rf'<svg class="chart" data-chart="{name}".*?</svg>', page, re.S).group(0)


def _texts(svg: str) -> list[str]:
    """The text a chart draws (svg.fonttype none keeps it as text), unescaped."""
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]


def _card(page: str, branch: str) -> str:
    anchor = "c-" + re.sub(r"[^A-Za-z0-9_-]", "-", branch)
    return re.search(rf'<article [^>]*id="{anchor}">.*?</article>', page, re.S).group(0)


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_the_run_writes_its_report_after_every_phase(run_dir: Path):
    written = _events(run_dir, "report")
    assert [e["phase"] for e in written] == list(range(1, PHASES + 1)) and not _events(run_dir, "report_error")
    assert all(e["bytes"] > 20_000 and e["seconds"] < 60 for e in written)
    assert (run_dir / "report.html").stat().st_size == written[-1]["bytes"]


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
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
        assert f'"#{anchor}" target=' not in page  # ... which jumps to it in place, not in a new tab
        assert entry["state"] in page and entry["sha"][:8] in page
    assert 'id="skills"' in page and "<td>diagnostician</td>" in page and "<td>engineer</td>" in page
    # self-contained: no script, every src/href/url() stays inside the page
    assert "<script" not in page.lower()
    refs = re.findall(r'(?:src|href)\s*=\s*["\']?([^"\' >]+)', page) + re.findall(r"url\(([^)]*)\)", page)
    assert refs and all(r.startswith("#") for r in refs), [r for r in refs if not r.startswith("#")]


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_a_bench_arm_shows_every_arm_of_its_seed_on_one_chart(run_dir: Path, env: dict, tmp_path: Path):
    """Two arms of a bench folder (copies of the finished run, so their curves coincide) and the bench's table."""
    from evotrainer.bench import arms as bench_arms
    from evotrainer.bench import runner as bench

    folder = tmp_path / "bench"
    arms = ("static", "static_rerun", "static_rerun2", "evotrainer")
    for arm in (*arms, "static_rerun1"):  # static_rerun1 is no arm's name (rerun 1 is static_rerun): not shown
        shutil.copytree(run_dir, folder / bench_arms.run_dir_name(arm, 0), ignore=shutil.ignore_patterns("*.safetensors"))
    outside = tmp_path / "lone" / "evotrainer-seed0"  # an arm-like name with no other arm beside it
    shutil.copytree(run_dir, outside, ignore=shutil.ignore_patterns("*.safetensors", "checkpoints", "policy"))
    assert bench_arms.arms_beside(outside) == {} and bench_arms.arms_beside(run_dir) == {}
    assert tuple(bench_arms.arms_beside(folder / "evotrainer-seed0")) == arms

    cli(["report", str(folder / "evotrainer-seed0")], env)
    page = (folder / "evotrainer-seed0" / "report.html").read_text()
    assert page.count('<svg class="chart"') == 5 and 'data-chart="bench"' in page and 'href="#bench"' in page
    assert "this run is the <code>evotrainer</code> arm" in page and "evotrainer (this run)" in page
    assert "minus static" not in page  # no bench.json yet: the bench has not finished
    outcomes = {arm: {0: bench.run_outcome(RunDir(folder / bench_arms.run_dir_name(arm, 0)), PHASES)}
                for arm in arms}
    (folder / "bench.json").write_text(json.dumps({**bench.summarize(outcomes, [0], PHASES), "seeds": [0]}))
    cli(["report", str(folder / "static-seed0")], env)
    page = (folder / "static-seed0" / "report.html").read_text()
    assert "static (this run)" in page and "minus static [95% paired]" in page and "+0.0% [+0.0%, +0.0%]" in page
    table = page[page.index('id="bench"'):page.index('id="health"')]
    assert "minus static, same stream [95%, training noise counted]" in table and table.count("<td class=num>-</td>") == 4
    assert page.count('<svg class="chart"') == 5 and "<script" not in page.lower()


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_rollout_text_is_escaped(hostile_run: Path, env: dict):
    cli(["report", str(hostile_run)], env)
    page = (hostile_run / "report.html").read_text()
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;/pre&gt;&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page
    assert "&quot;quoted&quot; &amp; &#x27;single&#x27;" in page
    assert "t&quot;&gt;&lt;script&gt;x&lt;/script&gt;" in page


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_harness_and_skill_text_is_escaped(evolved_run: Path):
    """Markup in a candidate's subject, trailers, diff, backtest reasons, trial and realized effect, and in a skill,
    shows as text: nothing of it is live in the page."""
    page, e = _page(evolved_run), html.escape(HOSTILE)
    assert "<script" not in page.lower() and "<img" not in page.lower()
    card = _card(page, "candidates/phase-2-7")
    for field in ("diagnosis", "hypothesis", "expected"):
        assert f"<dt>{field}</dt><dd>{e}</dd>" in card, field
    assert f"<code>prompt.{e}</code>" in card and f"reject: {e}</dd>" in card  # variable; verdict and reasons
    assert f"+# {e}" in card and f"gain +0.2500 {e}" in card and html.escape(json.dumps(HOSTILE)) in card  # diff, trial
    assert f"prompt: {e}" in card  # subject
    assert f"(95% CI -1.0% to +6.0%) {e}" in _card(page, "candidates/phase-1-1")  # realized effect
    skills = page[page.index('<h2 id="skills">'):page.index('<h2 id="agents">')]
    assert skills.count(f"<td>{e}</td>") == 3  # intervention, expected outcome, validation
    assert any("<img" in t for t in _texts(_chart(page, "lineage")))  # the node's label, drawn as text


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_dollar_signs_in_labels_are_text_not_mathtext(evolved_run: Path):
    """A candidate label with "$...$" is drawn as written (matplotlib would parse it as maths: a bad formula
    raised and failed the whole report)."""
    texts = _texts(_chart(_page(evolved_run), "lineage"))
    assert all(label in texts for label in MATH), [t for t in texts if "$" in t]
    write_quietly(RunDir(evolved_run), phase=2)
    assert not _events(evolved_run, "report_error")


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_each_card_shows_its_candidates_record(evolved_run: Path, env: dict):
    """Every `evotrainer log --json` entry's card holds its hypothesis, variable, reasons, a line of its diff, its
    realized effect (or why there is none) and its trial's figures."""
    page = _page(evolved_run)

    def git_(*args: str) -> str:
        return subprocess.run(["git", "-C", str(evolved_run / "harness"), *args], capture_output=True, text=True,
                              check=True).stdout

    entries = json.loads(cli(["log", str(evolved_run), "--json"], env).stdout)
    trials = 0
    for entry in entries:
        card, e = _card(page, entry["branch"]), html.escape
        assert f"<dt>hypothesis</dt><dd>{e(entry['hypothesis'])}</dd>" in card, entry["branch"]
        assert f"<dt>variable</dt><dd><code>{e(entry['variable'])}</code></dd>" in card
        assert entry["reasons"] and all(e(r) in card for r in entry["reasons"])
        added = [line for line in git_("diff", f"{entry['sha']}^", entry["sha"]).splitlines()
                 if line.startswith("+") and not line.startswith("+++") and line[1:].strip()]
        assert added and e(added[-1]) in card
        effect = entry["realized_effect"] if entry["state"] == "promoted" else "none: not promoted"
        assert f"<dt>realized effect</dt><dd>{e(effect)}</dd>" in card
        if entry["state"] == "not judged":  # no backtest note: a full race, or it trains as an entrant does
            continue
        note = json.loads(git_("notes", "--ref=backtest", "show", entry["sha"]))
        for check in [c for c in note["checks"] if c["name"].startswith("trial:") and c["candidate"] is not None]:
            trials += 1
            assert e(check["detail"]) in card and f"<td class=num>{check['candidate']:.4g}</td>" in card
            assert f"<td class=num>{check['base']:.4g}</td>" in card
    assert trials >= 2 and {"promoted", "rejected"} <= {entry["state"] for entry in entries}


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_health_names_every_panel_and_why_kl_is_missing(run_dir: Path):
    page = _page(run_dir)
    texts = _texts(_chart(page, "health"))
    for title in ("dead-group ratio", "kept fraction", "truncated", "completion length (tokens)", "entropy", "KL",
                  "grad norm"):
        assert title in texts, title
    # the seed harness trains with beta = 0, and TRL then logs no KL: the panel stays and says why
    assert HarnessRepo(run_dir / "harness").knobs("main").beta == 0
    assert not any("kl" in r.train for r in phase_results(RunDir(run_dir)))
    assert "beta = 0" in " ".join(texts) and "KL not logged: beta = 0" in page


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_a_changed_main_is_marked_in_the_table_and_the_charts(evolved_run: Path, run_dir: Path):
    page, repo = _page(evolved_run), HarnessRepo(evolved_run / "harness")
    before, after = repo.sha("candidates/phase-1-1^"), repo.sha("main")
    assert f"<tr><td>2</td><td><code>{after[:8]}</code> <b>new main</b></td>" in page
    assert f"<tr><td>1</td><td><code>{before[:8]}</code></td>" in page and page.count("<b>new main</b>") == 1
    for chart in ("accuracy", "training"):
        assert f"main {after[:7]}" in _texts(_chart(page, chart)), chart
    assert {before[:7], after[:7]} <= set(_texts(_chart(page, "lineage")))
    assert "new main" not in _page(run_dir) and "main " + before[:7] not in _texts(_chart(_page(run_dir), "accuracy"))


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_skills_agents_and_samples_are_shown(evolved_run: Path):
    page = _page(evolved_run)
    row = re.search(r"<tr><td><code>skill-hostile</code></td>.*?</tr>", page).group(0)
    assert "<td class=num>2 / 3</td>" in row and "<td>candidates/phase-2-7</td>" in row
    section = page[page.index('<h2 id="agents">'):page.index('<h2 id="samples">')]
    cells = {m.group(1): re.findall(r"<td[^>]*>(.*?)</td>", m.group(0))
             for m in re.finditer(r"<tr><td>(\w+)</td>.*?</tr>", section)}
    # role, models, actions, LLM calls, failed, fell back, tokens, cost, seconds
    assert "m-engineer" in cells["engineer"][1] and cells["engineer"][3:8] == ["2", "0", "0", "1,234", "$0.0123"]
    assert "m-critic" in cells["critic"][1] and cells["critic"][3:8] == ["1", "0", "0", "500", "$0.0020"]
    assert "total LLM cost $0.0143" in section and "every role ran its built-in" not in section
    samples = page[page.index('<h2 id="samples">'):]
    for phase in range(1, PHASES + 1):
        table = samples.split(f"<h3>phase {phase}</h3>")[1].split("<h3>")[0]
        rows = read_rollouts(evolved_run / "rollouts" / f"phase-{phase:04d}.parquet")
        kinds = re.findall(r"<tr><td>(best|worst|truncated)</td>", table)
        assert kinds == ["best", "worst"] + ["truncated"] * any(r["truncated"] for r in rows), (phase, kinds)
        best = re.search(r"<tr><td>best</td>.*?<td class=num>([^<]*)</td>", table).group(1)
        assert best == f"{max(r['reward'] for r in rows):.4g}"


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_a_failing_report_is_an_event_not_a_stop(hostile_run: Path, tmp_path: Path):
    broken = tmp_path / "run"
    shutil.copytree(hostile_run, broken)
    (broken / "checkpoints" / "phase-0001" / "result.json").write_text("{not json")
    write_quietly(RunDir(broken), phase=1)  # must not raise
    errors = _events(broken, "report_error")
    assert len(errors) == 1 and errors[0]["phase"] == 1 and "ValidationError" in errors[0]["error"]


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_the_tolerant_score_stands_beside_every_held_out_accuracy(run_dir: Path):
    """The run's own evaluations filled it (the start and each phase), and the report shows it in the headline, the
    phase table and the accuracy chart; an evaluation from before it existed shows "-" and no line."""
    from evotrainer.report.collect import accuracy_rows
    from evotrainer.report.html import _tolerant, tolerant_kpi

    rd = RunDir(run_dir)
    evals = [rd.baseline(), *(r.eval for r in phase_results(rd))]
    assert all(e.tolerant_accuracy is not None and set(e.tolerant_items) == set(e.items) for e in evals)
    assert all(e.tolerant_accuracy >= e.accuracy for e in evals)  # it forgives, never takes away
    page = _page(run_dir)
    assert "tolerant score (formatting slips forgiven; reports only)" in page  # headline
    assert "tolerant score (slips forgiven; change [95%])" in page  # phase table
    assert any(t.startswith("tolerant score") for t in _texts(_chart(page, "accuracy")))  # the chart's legend
    rows = accuracy_rows(evals[0], phase_results(rd))
    assert [r["tolerant"] for r in rows] == [e.tolerant_accuracy for e in evals] and rows[1]["tolerant_change"]
    old = [r.model_copy(update={"eval": r.eval.model_copy(update={"tolerant_accuracy": None})})
           for r in phase_results(rd)]
    rows = accuracy_rows(None, old)
    assert all(r["tolerant"] is None and r["tolerant_change"] is None and _tolerant(r) == "-" for r in rows)
    assert not tolerant_kpi(rows[0], rows[-1], "start to phase 2", None)


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


def _chromium() -> str:
    """The browser, or a skip on a developer's machine without one; a failure where the environment requires it
    (EVOTRAINER_REQUIRE_CHROMIUM=1). .ci/run sets it once Chromium is installed; where the install itself fails,
    CI prints a note and this test skips, saying why."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("EVOTRAINER_REQUIRE_CHROMIUM") == "1":
            pytest.fail("EVOTRAINER_REQUIRE_CHROMIUM=1 but chromium is not on PATH")
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium and then requires it)")
    return found


def test_a_missing_chromium_skips_only_where_it_is_not_required(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no chromium on PATH
    monkeypatch.delenv("EVOTRAINER_REQUIRE_CHROMIUM", raising=False)
    with pytest.raises(pytest.skip.Exception):
        _chromium()
    monkeypatch.setenv("EVOTRAINER_REQUIRE_CHROMIUM", "1")
    with pytest.raises(pytest.fail.Exception, match="EVOTRAINER_REQUIRE_CHROMIUM=1"):
        _chromium()


def _shoot(browser: str, pages: list[Path], profile: Path) -> list[dict]:
    """Open each page in headless Chromium, driven over its DevTools pipe (fds 3 and 4, NUL-separated JSON), and
    screenshot every ``svg.chart`` on its own, clipped to the box the page laid it out in. Per page: chart name ->
    (RGB pixels, paths the browser parsed in it)."""
    import fcntl
    import io

    import numpy as np
    from PIL import Image

    to_browser, from_us = os.pipe()
    to_us, from_browser = os.pipe()
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser, from_browser)]  # clear of 3 and 4

    def wire():  # in the child: the pipe's ends at the fds --remote-debugging-pipe reads and writes
        os.dup2(high[0], 3)
        os.dup2(high[1], 4)

    proc = subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                             "--disable-background-networking", "--disable-component-update", "--disable-sync",
                             "--no-first-run", f"--user-data-dir={profile}", "about:blank"], pass_fds=(3, 4),
                            preexec_fn=wire, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for fd in (to_browser, from_browser, *high):
        os.close(fd)
    buf, ids = b"", iter(range(1, 1_000_000))

    def call(method: str, session: str | None = None, **params) -> dict:
        nonlocal buf
        n = next(ids)
        os.write(from_us, json.dumps({"id": n, "method": method, "params": params,
                                      **({"sessionId": session} if session else {})}).encode() + b"\0")
        while True:  # skip events and other answers until ours
            while b"\0" not in buf:
                chunk = os.read(to_us, 1 << 20)
                assert chunk, f"chromium closed its DevTools pipe during {method}"
                buf += chunk
            raw, _, buf = buf.partition(b"\0")
            msg = json.loads(raw)
            if msg.get("id") == n:
                assert "error" not in msg, (method, msg["error"])
                return msg["result"]

    def js(session: str, expression: str):
        return call("Runtime.evaluate", session, expression=expression, returnByValue=True)["result"].get("value")

    boxes = ("JSON.stringify([...document.querySelectorAll('svg.chart')].map(e => {const r = e.getBoundingClientRect();"
             " return [e.dataset.chart, r.x + scrollX, r.y + scrollY, r.width, r.height,"
             " e.querySelectorAll('path').length]}))")
    shots = []
    try:
        target = call("Target.createTarget", url="about:blank")["targetId"]
        session = call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        call("Emulation.setDeviceMetricsOverride", session, width=1400, height=1000, deviceScaleFactor=1, mobile=False)
        for page in pages:
            url = page.resolve().as_uri()
            call("Page.navigate", session, url=url)
            deadline = time.time() + 60
            while js(session, f"location.href === {json.dumps(url)} && document.readyState") != "complete":
                assert time.time() < deadline, f"{page} did not load"
                time.sleep(0.05)
            charts = {}
            for name, x, y, w, h, paths in json.loads(js(session, boxes)):
                png = call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True,
                           clip={"x": x, "y": y, "width": w, "height": h, "scale": 1})["data"]
                img = Image.open(io.BytesIO(base64.b64decode(png))).convert("RGB")
                charts[name] = (np.asarray(img).reshape(-1, 3).astype(int), paths)
            shots.append(charts)
        call("Browser.close")
    finally:
        os.close(from_us)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(to_us)
    return shots


BLUE, GREEN, ORANGE, RED = (0x15, 0x65, 0xC0), (0x2E, 0x7D, 0x32), (0xEF, 0x6C, 0x00), (0xC6, 0x28, 0x28)
# per chart, what only its drawn data gives (a blank chart, or one with axes but no series, has none of it):
# (what, colours, tolerance, at least this many pixels); thresholds sit well above what a legend alone draws
INK = {
    "accuracy": [("Wilson band (pale blue fill)", [(0xDC, 0xE8, 0xF6)], 8, 20_000),
                 ("accuracy line", [BLUE], 30, 1_000)],
    "training": [("train reward (wide, pale blue)", [(173, 201, 233)], 8, 1_500),
                 ("verified rate (green, dashed)", [GREEN], 30, 500)],
    "health": [("series (blue points and lines)", [BLUE], 30, 400)],
    "lineage": [("main (blue line and nodes)", [BLUE], 30, 1_000),
                ("candidate nodes (green, orange, red)", [GREEN, ORANGE, RED], 30, 400)],
}


def _lacks(name: str, pixels) -> list[str]:
    """What a chart's screenshot lacks: enough non-white pixels (2%), and each of its distinctive colours."""
    import numpy as np

    inked = float((pixels.min(axis=1) < 245).mean())
    problems = [] if inked >= 0.02 else [f"only {inked:.1%} of its pixels are not white"]
    for what, colours, tol, least in INK[name]:
        seen = sum(int((np.abs(pixels - np.array(c)).max(axis=1) <= tol).sum()) for c in colours)
        if seen < least:
            problems.append(f"{what}: {seen} px < {least}")
    return problems


def _blank(page: str, names: set[str]) -> str:
    """The page with the drawing of these charts removed (each keeps its <svg> element, size and place)."""
    return re.sub(r'(<svg class="chart" data-chart="(\w+)"[^>]*>)(.*?)(</svg>)',
                  lambda m: m.group(1) + m.group(4) if m.group(2) in names else m.group(0), page, flags=re.S)


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_every_chart_draws_in_a_real_browser(run_dir: Path, tmp_path: Path):
    """Each chart is screenshot alone and must show its own data; a page with some charts blanked is caught chart by
    chart (so one blank chart fails this test whatever the others draw)."""
    browser = _chromium()
    source = _page(run_dir)
    halves = ({"training", "lineage"}, {"accuracy", "health"})
    pages = [run_dir / "report.html"]
    for k, names in enumerate(halves):
        pages.append(tmp_path / f"blanked-{k}.html")
        pages[-1].write_text(_blank(source, names))
    report, *blanked = _shoot(browser, pages, tmp_path / "profile")

    assert sorted(report) == sorted(INK)  # accuracy, training, health, lineage
    for name, (pixels, paths) in report.items():
        assert paths == _chart(source, name).count("<path") > 10, name  # the browser parsed every path of it
        assert len(pixels) > 1240 * 300 and not _lacks(name, pixels), (name, _lacks(name, pixels))
    for names, shot in zip(halves, blanked):
        assert {n for n, (pixels, _) in shot.items() if _lacks(n, pixels)} == names


def _documented_keys(section: str) -> list[str]:
    readme = (ROOT / "docs" / "reference.md").read_text()  # the --json tables live in the reference
    start = readme.index(section)
    table = readme[start:].split("\n\n")[1]
    return re.findall(r"^\| `([a-z_]+)` \|", table, re.M)


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
def test_json_outputs_keep_their_documented_keys(run_dir: Path, env: dict):
    status = json.loads(cli(["status", str(run_dir), "--json"], env).stdout)
    assert list(status) == _documented_keys("`evotrainer status RUN_DIR --json` prints")
    entries = json.loads(cli(["log", str(run_dir), "--json"], env).stdout)
    assert entries and all(list(e) == _documented_keys("`evotrainer log RUN_DIR --json` prints") for e in entries)


def test_agent_usage_counts_calls_tokens_and_cost_per_role_when_logged(tmp_path: Path):
    from evotrainer.report.collect import agent_usage

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


@pytest.mark.slow  # reads the module's whole `evotrainer run` (RUN_SLOW)
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


def test_rollout_outcomes_count_executor_statuses_visible_pass_hidden_fail_and_turns():
    """A code phase's rollouts: each executor status counted, a body that passed its visible tests and failed the
    hidden ones counted apart, a grader error counted (never a wrong answer); a tools phase's turn figures; a math
    phase has neither, and the report shows the table only where one of them exists."""
    from evotrainer.report import collect as report_collect, html as report_html

    def run(status, verified, grader=False):
        extra = {"execution": {"status": status, "passed": 0, "total": 2, "detail": ""}}
        return {"verified": verified, "extra": {**extra, **({"grader_error": True} if grader else {})}}

    code = [run("ok", True), run("ok", False), run("fail", False), run("timeout", False),
            run("grader_error", False, grader=True)]
    got = report_collect.outcomes(code)
    assert got["statuses"] == {"ok": 2, "fail": 1, "timeout": 1, "syntax_error": 0, "no_code": 0, "grader_error": 1}
    assert (got["rollouts"], got["verified"], got["visible_pass_hidden_fail"], got["grader_errors"]) == (5, 1, 1, 1)
    tools = [{"verified": True, "turns": 3, "tool_calls": 2, "tool_errors": 0, "hit_turn_cap": False},
             {"verified": False, "turns": 4, "tool_calls": 4, "tool_errors": 1, "hit_turn_cap": True}]
    assert {k: report_collect.outcomes(tools)[k] for k in ("tool_calls", "tool_errors", "turn_cap_hits")} == \
        {"tool_calls": 6, "tool_errors": 1, "turn_cap_hits": 1}
    math = report_collect.outcomes([{"verified": True, "extra": {}}])
    assert math == {"rollouts": 1, "verified": 1}
    page = report_html.outcomes({"outcomes": {1: got, 2: report_collect.outcomes(code[:2])}})
    assert "visible pass, hidden fail" in page and "grader errors" in page and "tool calls" not in page
    assert report_html.outcomes({"outcomes": {}}) == ""
