"""The run report as one self-contained HTML page: the data of ``evotrainer.report.collect.collect``, the charts of
``charts.py`` inlined as SVG, and the page frame and styles of ``template.html`` (package data).

Every text that comes from the run (completions, prompts, diffs, hypotheses, reasons, skill text) goes through
:func:`esc`; the page loads nothing: no script, no stylesheet, no font, no image from anywhere, and its only links
point inside the page (a lineage node to its candidate's card). Sections, in reading order: headline figures,
the phase table, accuracy, training, health, lineage with one card per candidate, skills, agents, sample rollouts.

:func:`write` renders a run's page to RUN_DIR/report.html (``evotrainer report``); :func:`write_quietly` is what the
run calls at the end of every phase. Try it alone: ``python -m evotrainer.report.html RUN_DIR [OUT]`` writes the page
and prints its size.
"""

from __future__ import annotations

import html
import json
import time
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from evotrainer.atomic import write_text
from evotrainer.report import charts
from evotrainer.report.collect import collect
from evotrainer.rundir import RunDir

TEMPLATE = "template.html"


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return esc(x)


def _interval(c: dict | None) -> str:
    if not c:
        return "-"
    return f"{c['change']:+.1%} [{c['low']:+.1%}, {c['high']:+.1%}] <span class=note>{esc(c['method'])}</span>"


def _table(head: list[str], rows: list[list[str]], num: set[int] = frozenset()) -> str:
    th = "".join(f'<th{" class=num" if i in num else ""}>{h}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in num else ""}>{c}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _state(state: str) -> str:
    return f'<span class="badge {esc(state.replace(",", "").replace(" ", "-"))}">{esc(state)}</span>'


def headline(d: dict) -> str:
    run, acc, cands = d["run"], d["accuracy"], d["lineage"]
    first, last = (acc[0], acc[-1]) if acc else (None, None)
    promoted = sum(c["state"] == "promoted" for c in cands)
    c = d["overall"]
    moved = "-" if not c else f"{c['change']:+.1%}, 95% CI {c['low']:+.1%} to {c['high']:+.1%}"
    since = f"{'start' if first and first['phase'] == 0 else 'first phase'} to phase {last['phase'] if last else '-'}"
    kpis = [(f"{_pct(first and first['accuracy'])} &rarr; {_pct(last and last['accuracy'])}",
             f"held-out accuracy, {since} ({moved})"),
            *tolerant_kpi(first, last, since, d.get("overall_tolerant")),
            (f"{run['done']} / {run['phases']}", "phases trained / budget"),
            (f"{promoted} / {len(cands)}", "candidates promoted / proposed"),
            (esc(run["main"][:8]), "harness main now")]
    boxes = "".join(f"<div class=kpi><b>{v}</b><span>{k}</span></div>" for v, k in kpis)
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in (("phases", "phases"), ("accuracy", "accuracy"),
                  *((("bench", "bench"),) if d.get("bench") else ()), ("health", "health"), ("lineage", "lineage"), ("skills", "skills"), ("agents", "agents"),
                  ("samples", "samples")))
    return (f"<h1>EvoTrainer run <code>{esc(run['name'])}</code></h1>"
            f"<p class=sub>{esc(run['domain'])} &middot; policy {esc(run['model'])} &middot; {esc(run['root'])} "
            f"&middot; written {esc(run['written'])}</p><div class=kpis>{boxes}</div><nav>{nav}</nav>")


def tolerant_kpi(first: dict | None, last: dict | None, since: str, change: dict | None) -> list[tuple[str, str]]:
    """The headline figure of the tolerant score (formatting slips forgiven), when the run measured one."""
    if not last or last.get("tolerant") is None:
        return []
    moved = "-" if not change else f"{change['change']:+.1%}, 95% CI {change['low']:+.1%} to {change['high']:+.1%}"
    return [(f"{_pct(first.get('tolerant'))} &rarr; {_pct(last['tolerant'])}",
             f"tolerant score (formatting slips forgiven; reports only), {since} ({moved})")]


def _tolerant(a: dict | None) -> str:
    """A row's tolerant score with its change against the row before, or "-" when not measured."""
    if not a or a.get("tolerant") is None:
        return "-"
    c = a.get("tolerant_change")
    return _pct(a["tolerant"]) + (f" ({c['change']:+.1%} [{c['low']:+.1%}, {c['high']:+.1%}])" if c else "")


def phase_table(d: dict) -> str:
    acc = {r["phase"]: r for r in d["accuracy"]}
    rows = []
    if 0 in acc:
        a = acc[0]
        rows.append(["start", "-", f"{_pct(a['accuracy'])} [{_pct(a['low'])}, {_pct(a['high'])}]", "-",
                     _tolerant(a)] + ["-"] * 7)
    for p in d["phases"]:
        a, t = acc.get(p["phase"]), p["train"]
        sha = f"<code>{esc(p['harness_sha'][:8])}</code>" + (" <b>new main</b>" if p["main_changed"] else "")
        rows.append([str(p["phase"]), sha,
                     f"{_pct(a['accuracy'])} [{_pct(a['low'])}, {_pct(a['high'])}]" if a else "-",
                     _interval(a and a["change"]), _tolerant(a), _pct(p["dev_accuracy"]), _num(t.get("reward_mean")),
                     _pct(t.get("verified_rate")),
                     _pct(t.get("dead_group_ratio")), _pct(t.get("kept_fraction")), _pct(t.get("truncation_rate")),
                     f"{p['steps']} steps, {p['wall_time_s']:.0f} s"])
    head = ["phase", "harness", "held-out accuracy [95% Wilson]", "change vs previous [95%]",
            "tolerant score (slips forgiven; change [95%])", "dev accuracy (what decisions read)", "train reward",
            "verified", "dead groups", "kept", "truncated", "training"]
    return f'<h2 id="phases">Phases</h2>{_table(head, rows, {2, 4, 5, 6, 7, 8, 9, 10})}'


def health_notes(d: dict) -> str:
    """The health figures the trainer did not log, and why (their panels say it too); and a warning when the seed
    harness's reward paid a null probe at init (the reward pentest)."""
    notes = [f"{charts.HEALTH[k]} {esc(v)}" for k, v in d["unlogged"].items()]
    out = f"<p class=note>{'; '.join(notes)}</p>" if notes and d["phases"] else ""
    pt = d.get("pentest")
    if pt and pt.get("failed"):
        paid = ", ".join(f"{esc(p)} {pt['probes'][p]:+.3f}" for p in pt["failed"])
        out += (f"<p class=fail>the seed harness's reward pays completions that answer nothing (reward pentest at "
                f"init): {paid}, against a correct answer's {pt['reference']:+.3f}</p>")
    elif pt and pt.get("error"):
        out += f"<p class=fail>the reward pentest could not score the seed harness's reward: {esc(pt['error'])}</p>"
    return out


def _checks(checks: list[dict]) -> str:
    if not checks:
        return "<p class=note>no backtest checks recorded</p>"
    rows = [[esc(c.get("name")), _num(c.get("base")), _num(c.get("candidate")), _num(c.get("threshold")),
             '<span class=pass>pass</span>' if c.get("passed") else '<span class=fail>FAIL</span>',
             esc(c.get("detail", ""))] for c in checks]
    return _table(["check", "main", "candidate", "threshold", "result", "detail"], rows, {1, 2, 3})


def card(e: dict) -> str:
    fields = [("diagnosis", esc(e["diagnosis"])), ("hypothesis", esc(e["hypothesis"])),
              ("variable", f"<code>{esc(e['variable'])}</code>"), ("expected", esc(e["expected"])),
              ("verdict", f"{esc(e['verdict'])}: {esc('; '.join(e['reasons']))}"),
              ("realized effect", esc(e.get("realized_effect") or (
                  "not measured yet" if e["state"] == "promoted" else "none: not promoted")))]
    extra = f"<h4>trial and other backtest results</h4><pre>{esc(json.dumps(e['trial'], indent=1))}</pre>" \
        if e.get("trial") else ""
    meta = ", ".join(f"{k} {esc(e[k])}" for k in ("sandbox", "runtime_s", "noise_floor") if e.get(k) is not None)
    return (f'<article class="card state-{esc(e["state"].split(",")[0])}" id="{charts.anchor(e["branch"])}">'
            f"<h3>{_state(e['state'])} <code>{esc(e['branch'])}</code> {esc(e['subject'])} "
            f"<code class=note>{esc(e['sha'][:8])}</code></h3>"
            f"<dl>{''.join(f'<dt>{k}</dt><dd>{v}</dd>' for k, v in fields)}</dl>"
            f"<details><summary>backtest checks ({sum(bool(c.get('passed')) for c in e['checks'])}/"
            f"{len(e['checks'])} passed{'; ' + meta if meta else ''})</summary>{_checks(e['checks'])}{extra}</details>"
            f"<details><summary>diff against main <code>{esc((e['base_sha'] or '')[:8])}</code></summary>"
            f"<pre>{esc(e['diff'] or '(no diff)')}</pre></details></article>")


def lineage(d: dict) -> str:
    cards, by_phase = [], {}
    for e in d["lineage"]:
        by_phase.setdefault(e["phase"], []).append(e)
    for phase, entries in sorted(by_phase.items()):
        cards.append(f"<h3>after phase {phase}</h3>" + "".join(card(e) for e in entries))
    chart = charts.lineage(d["lineage"], d["phases"]) if d["phases"] else ""
    return (f'<h2 id="lineage">Harness lineage</h2>{chart}'
            + ("".join(cards) or "<p class=note>no candidate harness edits yet</p>"))


def skills(d: dict) -> str:
    if not d["skills"]:
        return '<h2 id="skills">Skills</h2><p class=note>the skill library is empty</p>'
    rows = [[f"<code>{esc(s['id'])}</code>", esc(s["failure_mode"]), esc(s["intervention"]),
             esc(s["expected_outcome"]), f"{s['wins']} / {s['uses']}",
             esc(", ".join(s["used_by"]) or "-"), esc(s["validation"])] for s in d["skills"]]
    return ('<h2 id="skills">Skills</h2>'
            + _table(["skill", "failure mode", "intervention", "expected outcome", "wins / uses", "used by",
                      "validation"], rows, {4}))


def agents(d: dict) -> str:
    rows = [[esc(a["role"]), esc(", ".join(a["models"]) or "-"), str(a["actions"]), str(a["llm_calls"]),
             str(a["failed_calls"]), str(a["fallbacks"]), f"{a['tokens']:,}" if a["tokens"] else "-",
             f"${a['cost_usd']:.4f}" if a["cost_usd"] else "-", f"{a['seconds']:.1f}"] for a in d["agents"]]
    total_cost = sum(a["cost_usd"] for a in d["agents"])
    note = "" if any(a["llm_calls"] for a in d["agents"]) else \
        "<p class=note>every role ran its built-in implementation: no LLM calls, tokens or cost</p>"
    head = ["role", "model", "actions", "LLM calls", "failed", "fell back to built-in", "tokens", "cost", "seconds"]
    return (f'<h2 id="agents">Agents</h2>{note}' + _table(head, rows, {2, 3, 4, 5, 6, 7, 8})
            + (f"<p>total LLM cost ${total_cost:.4f}</p>" if total_cost else ""))


def outcomes(d: dict) -> str:
    """Per phase: rollouts verified, the executor's statuses (policy code) and the turn figures (multi-turn)."""
    seen = d.get("outcomes") or {}
    if not seen:
        return ""
    runs = any("statuses" in o for o in seen.values())
    turns = any("tool_calls" in o for o in seen.values())
    names = next((list(o["statuses"]) for o in seen.values() if "statuses" in o), [])
    head = ["phase", "rollouts", "verified", *names, *(["visible pass, hidden fail", "grader errors"] if runs else []),
            *(["tool calls", "tool errors", "turn-cap stops"] if turns else [])]
    rows = []
    for phase, o in sorted(seen.items()):
        row = [str(phase), str(o["rollouts"]), str(o["verified"])]
        if runs:
            row += [str(o.get("statuses", {}).get(n, "-")) for n in names]
            row += [str(o.get("visible_pass_hidden_fail", "-")), str(o.get("grader_errors", "-"))]
        if turns:
            row += [str(o.get(k, "-")) for k in ("tool_calls", "tool_errors", "turn_cap_hits")]
        rows.append(row)
    note = ("<p class=note>what happened to each phase's rollouts: the executor's status of each program on the "
            "visible tests, those that passed every visible test and failed the hidden ones (a reward on the visible "
            "tests pays them, the evaluator does not), and grader errors, never scored as wrong answers</p>" if runs
            else "<p class=note>what happened to each phase's rollouts</p>")
    return f'<h2 id="outcomes">Rollout outcomes</h2>{note}' + _table(head, rows, set(range(1, len(head))))


def samples(d: dict) -> str:
    parts = ['<h2 id="samples">Sample rollouts</h2><p class=note>per phase: the best and the worst reward, and a '
             "truncated completion when there was one</p>"]
    for phase, rows in sorted(d["samples"].items()):
        body = [[esc(s["kind"]), f"<code>{esc(s['task_id'])}</code> (level {esc(s['difficulty'])}, step "
                 f"{esc(s['step'])})", f"<pre>{esc(s['prompt'])}</pre>", f"<pre>{esc(s['completion'])}</pre>",
                 _num(s["reward"]), "yes" if s["verified"] else "no", "yes" if s["truncated"] else "no",
                 "yes" if s["kept"] else "no", esc(json.dumps(s["reward_components"], sort_keys=True))]
                for s in rows]
        parts.append(f"<h3>phase {phase}</h3>" + _table(
            ["sample", "task", "prompt", "completion", "reward", "verified", "truncated", "kept", "components"],
            body, {4}))
    return "".join(parts)


def bench(d: dict) -> str:
    """The bench this run is an arm of: the arms' chart, and the bench's table once the bench has finished."""
    b = d.get("bench")
    if not b:
        return ""
    table = ""
    if b["summary"]:
        arms = b["summary"]["arms"]
        noise = any("vs_static_runs" in a for a in arms.values())  # static_rerun ran: training noise is counted

        def gap(vs):
            return f"{vs['diff']:+.1%} [{vs['low']:+.1%}, {vs['high']:+.1%}]" if vs else "-"

        rows = [[esc(arm), _pct(a["accuracy"]), esc(", ".join(f"{_pct(v)}" for v in a["per_seed"].values())),
                 gap(a.get("vs_static")), *([gap(a.get("vs_static_runs"))] if noise else []),
                 f"{a['wall_s']:.0f} s", _pct(a.get("outside_training"))] for arm, a in arms.items()]
        head = ["arm", "final accuracy (mean)", "per seed", "minus static [95% paired]",
                *(["minus static, same stream [95%, training noise counted]"] if noise else []), "wall", "outside training"]
        table = _table(head, rows, set(range(1, len(head))) - {2})
    return (f'<h2 id="bench">Bench: this run is the <code>{esc(b["this"])}</code> arm</h2>'
            + charts.bench(b) + table)


def render(d: dict) -> str:
    has = bool(d["phases"])
    body = [headline(d), phase_table(d),
            '<h2 id="accuracy">Held-out accuracy and training</h2>',
            charts.accuracy(d["accuracy"], d["phases"]) if d["accuracy"] else "<p class=note>no phase yet</p>",
            charts.training(d["phases"]) if has else "", bench(d),
            '<h2 id="health">Health</h2>', health_notes(d),
            charts.health(d["phases"], d["steps"], d["unlogged"]) if has else "",
            lineage(d), skills(d), agents(d), outcomes(d), samples(d)]
    text = resources.files("evotrainer.report").joinpath(TEMPLATE).read_text(encoding="utf-8")
    return Template(text).substitute(title=esc(f"EvoTrainer report: {d['run']['name']}"), body="\n".join(body))


def write(rd: RunDir, out: Path | None = None) -> Path:
    """Render the report of ``rd`` to ``out`` (default RUN_DIR/report.html), replacing it atomically."""
    out = Path(out) if out else rd.root / "report.html"
    text = render(collect(rd))
    write_text(out, text)
    return out


def write_quietly(rd: RunDir, phase: int) -> None:
    """The run's hook: rewrite RUN_DIR/report.html; log ``report`` (bytes, wall and CPU seconds) or
    ``report_error``; never raise."""
    t0, cpu0 = time.time(), time.process_time()
    try:
        out = write(rd)
        rd.events.emit("report", phase=phase, path=str(out), bytes=out.stat().st_size,
                       seconds=round(time.time() - t0, 3), cpu_s=round(time.process_time() - cpu0, 3))
    except Exception as err:  # noqa: BLE001 - a report must never stop a run
        try:
            rd.events.emit("report_error", phase=phase, error=f"{type(err).__name__}: {err}",
                           seconds=round(time.time() - t0, 3))
        except Exception:  # noqa: BLE001 - not even an unwritable events file
            pass


if __name__ == "__main__":
    import sys

    target = write(RunDir(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
    print(f"{target}: {target.stat().st_size / 1024:.0f} KiB")
