"""A Critic's metric becomes a gate: validated on earlier phases' rollouts, then committed to main's diagnostics.py.

The Critic (an LLM) may propose one diagnostics metric per critique (``agents.MetricProposal``). Before it guards
anything it is validated here, and the validation is kept whatever it says:

1. The metric is appended to main's ``diagnostics.py`` (``@metric(name, min=, max=, help=)`` over the proposed
   function) and committed on the branch ``metrics/phase-N-<name>`` (``Variable: diagnostics.<name>``).
2. In the sandbox, on that commit, main's registry is computed over the rollouts of every earlier phase of the run
   (as they trained, each under the harness version it trained on), twice. It is refused when it fails on any
   phase, gives a non-finite value, differs between the two computations, or drops a metric main had.
3. Else it is merged into main (``--no-ff``); the commit message and a ``metric`` git note give, per phase, the
   value, whether it would have fired, and the harness version. From then on every candidate's backtest checks it
   (``diagnostic:<name>``) like any registered diagnostic.

A refused metric stays on its branch with the note saying why, main is untouched, and the run goes on. A name
main already registers is refused before anything is committed (so a resumed step does not add it twice).

Try it alone: ``python -m evotrainer.loop.new_metric`` prints the diagnostics.py text a proposal would add.
"""

from __future__ import annotations

import ast
import json
import math
import time
from typing import Any

from agents.roles import MetricProposal
from evotrainer.judge.checks import harness_worker
from evotrainer.judge.replay import registry
from evotrainer.loop.runtime import Runtime

FILE = "diagnostics.py"


def source(proposal: MetricProposal) -> str:
    """The registration to append to diagnostics.py. Raises ValueError when the code is not one function of one
    argument (it is parsed, never run, here: it runs in the sandbox)."""
    try:
        tree = ast.parse(proposal.code)
    except SyntaxError as err:
        raise ValueError(f"the metric's code does not parse: {err.msg} (line {err.lineno})") from None
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if len(tree.body) != 1 or len(funcs) != 1 or len(funcs[0].args.args) != 1 or funcs[0].decorator_list:
        raise ValueError("the metric's code must be exactly one undecorated function of one argument (the rollouts)")
    if proposal.min is None and proposal.max is None:
        raise ValueError("the metric needs an alert threshold (min and/or max)")
    bounds = "".join(f", {k}={v!r}" for k, v in (("min", proposal.min), ("max", proposal.max)) if v is not None)
    return (f"\n\n@metric({proposal.name!r}{bounds}, help={proposal.help!r})  # proposed by the Critic\n"
            f"{proposal.code.strip()}\n")


def _fires(value: float, proposal: MetricProposal) -> bool:
    return (proposal.min is not None and value < proposal.min) or (proposal.max is not None and value > proposal.max)


def validate(rt: Runtime, sha: str, proposal: MetricProposal, phases: list[int], main_names: set[str]) -> dict:
    """The metric at commit ``sha`` computed twice on each phase's rollouts; ``refused`` says why when it fails."""
    rows_out: list[dict[str, Any]] = []
    refused = ""
    with harness_worker(rt.repo, sha, rt.cfg.sandbox, rt.rd.hidden_from_harness()) as (_, worker):
        for phase in phases:
            rows = rt.evidence.rollouts(phase)
            first, second = (registry(worker, rows, rt.evidence.tasks()) for _ in range(2))
            spec = first.get(proposal.name) or {}
            value, again = spec.get("value"), (second.get(proposal.name) or {}).get("value")
            entry = {"phase": phase, "harness": rows[0]["harness_sha"][:12] if rows else "", "value": value}
            lost = sorted(main_names - set(first))
            if spec.get("error") or value is None:
                refused = f"phase {phase}: {spec.get('error') or 'not computed'}"
            elif not math.isfinite(value):
                refused = f"phase {phase}: value {value} is not finite"
            elif value != again:
                refused = f"phase {phase}: not deterministic ({value} then {again})"
            elif lost:
                refused = f"the edit drops metrics main registers: {', '.join(lost)}"
            else:
                entry["would_fire"] = _fires(value, proposal)
            rows_out.append(entry)
            if refused:
                break
    return {"metric": proposal.name, "min": proposal.min, "max": proposal.max, "phases": rows_out,
            "refused": refused}


def _summary(check: dict) -> str:
    lines = [f"phase {r['phase']} (harness {r['harness']}): {r['value']:.4g}"
             + (" -> would fire" if r.get("would_fire") else "") for r in check["phases"] if r["value"] is not None]
    fired = [r["phase"] for r in check["phases"] if r.get("would_fire")]
    head = (f"Refused: {check['refused']}" if check["refused"] else
            f"Validated on {len(check['phases'])} earlier phase(s), computed twice each; would have fired on "
            + (f"phase(s) {', '.join(map(str, fired))}" if fired else "none"))
    return head + ("\n" + "\n".join(lines) if lines else "")


def add_metric(rt: Runtime, phase: int, proposal: MetricProposal) -> dict:
    """Validate ``proposal`` on the run's phases so far and, when it holds, merge it into main. Never raises for a
    bad proposal: the outcome (``added``, ``refused`` with the reason, or ``skipped``) is returned and logged."""
    t0 = time.time()
    main = rt.repo.sha("main")
    text = rt.repo.show_file(main, FILE)
    outcome: dict[str, Any] = {"metric": proposal.name, "phase": phase}
    try:
        main_names = {n for n, spec in rt.evidence.registry(main, [phase]).items() if not spec.get("error")}
        if proposal.name in main_names:
            raise ValueError("main already registers a metric of this name")
        added = source(proposal)
    except Exception as err:  # noqa: BLE001 - a bad proposal (or a broken registry on main) never stops the run
        outcome.update(outcome="refused", reason=str(err)[:500])
        rt.emit("metric_proposal", **outcome)
        return outcome
    branch = f"metrics/phase-{phase}-{proposal.name}"
    trailers = {"Variable": f"diagnostics.{proposal.name}", "Proposed-By": "critic", "Phase": str(phase)}
    subject = f"diagnostics: gate {proposal.name} ({proposal.help})"[:120]
    edits = {FILE: text.rstrip("\n") + "\n" + added}
    sha = rt.repo.commit_candidate(branch, main, edits, subject, proposal.reason, trailers)
    phases = [p for p in range(1, phase + 1) if rt.rd.rollout_file(p).exists()]
    try:
        check = validate(rt, sha, proposal, phases, main_names)
    except Exception as err:  # noqa: BLE001 - a sandbox failure refuses the metric, it never stops the run
        check = {"metric": proposal.name, "min": proposal.min, "max": proposal.max, "phases": [],
                 "refused": f"{type(err).__name__}: {err}"[:500]}
    body = f"{proposal.reason}\n\n{_summary(check)}"
    sha = rt.repo.commit_candidate(branch, main, edits, subject, body, trailers)  # same tree, validation in message
    rt.repo.add_note(sha, check, ref="metric")
    if check["refused"]:
        outcome.update(outcome="refused", reason=check["refused"], branch=branch)
    else:
        merged = rt.repo.promote(branch, f"Gate {proposal.name} on main (Critic's metric, validated)", body,
                                 trailers)
        rt.repo.add_note(merged, check, ref="metric")
        outcome.update(outcome="added", branch=branch, main=merged,
                       would_fire=[r["phase"] for r in check["phases"] if r.get("would_fire")])
    rt.emit("metric_proposal", **outcome, validation=check, seconds=round(time.time() - t0, 2))
    return outcome


if __name__ == "__main__":
    demo = MetricProposal(name="mean_completion_tokens", help="mean completion length in tokens", max=12.0,
                          code="def mean_completion_tokens(rollouts):\n"
                               "    return sum(r['completion_tokens'] for r in rollouts) / max(len(rollouts), 1)\n",
                          reason="completions grow toward the budget")
    print(source(demo))
    print(json.dumps(demo.model_dump(), indent=1))
