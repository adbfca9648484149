"""The report's charts: matplotlib figures rendered to inline SVG (no JavaScript, no network, text kept as text).

Each function takes the plain data of ``evotrainer.report.collect.collect`` and returns one ``<svg>`` element:

    accuracy   held-out accuracy per phase (Wilson 95% band) over its change against the phase before, with the
               change's interval (paired bootstrap or unpaired normal, named in the legend); the tolerant score
               (formatting slips forgiven) dashed beside it where the evaluations measured one
    training   train reward and verified rate per phase
    health     small multiples: dead groups, kept fraction, truncation, completion length (per step and per
               phase), entropy, KL, grad norm (per phase); a figure the trainer did not log keeps its panel, which
               says why (KL: beta = 0)
    bench      a bench's arms (same seed): held-out accuracy per phase, one line per arm, this run's arm bold
    lineage    the harness as a graph: main per phase, the candidates of each phase, promoted ones merging into
               the next phase's main; every candidate node links to its card in the report

Where main changed, the phase charts draw a dotted line labelled with the new sha. Figures use matplotlib's
object API (no pyplot, no global backend) and a per-figure hash salt, so ids never collide between the SVGs of
one page and the same data gives the same bytes. Try one alone: ``python -m evotrainer.report.charts RUN_DIR``
writes RUN_DIR/charts-preview.html with the four charts.
"""

from __future__ import annotations

import io
import re
import textwrap
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from evotrainer.report.collect import HEALTH

COLORS = {"promoted": "#2e7d32", "rejected": "#c62828", "passed, not promoted": "#ef6c00", "pending": "#757575",
          "main": "#1565c0", "accent": "#6a1b9a"}
# text.parse_math off: labels carry the run's and the agents' text (a candidate's variable, an arm's name), and
# matplotlib would read "$...$" in it as mathtext: "a $\frac$ b" raised and failed the whole report, "$x$" drew an
# italic x. No chart draws maths, so every text of every figure is plain.
_STYLE = {"svg.fonttype": "none", "font.size": 10, "axes.spines.top": False, "axes.spines.right": False,
          "axes.grid": True, "grid.alpha": 0.3, "font.family": "sans-serif", "text.parse_math": False}


def _svg(fig: Figure, name: str) -> str:
    with matplotlib.rc_context({**_STYLE, "svg.hashsalt": f"evotrainer-{name}"}):
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and doctype: the SVG is inlined in HTML
    # matplotlib opens every link in a new tab; a link to a card of the same page jumps to it in place
    text = re.sub(r'(xlink:href="#[^"]*") target="_blank"', r"\1", text)
    return re.sub(r"<svg ", f'<svg class="chart" data-chart="{name}" role="img" aria-label="{name} chart" ', text,
                  count=1)


def _figure(width: float, height: float, top: float = 0.45, hspace: float = 0.2, wspace: float = 0.2) -> Figure:
    """A figure with fixed margins in inches: a layout engine would double the drawing time of every chart."""
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.15 / width, top=1 - top / height, bottom=0.55 / height,
                        hspace=hspace, wspace=wspace)
    return fig


def _versions(ax: Any, phases: list[dict], labels: bool = True) -> None:
    """Dotted lines where main changed (before the phase that first trained on the new sha), labelled with it."""
    for p in phases:
        if p["main_changed"]:
            ax.axvline(p["phase"] - 0.5, color=COLORS["accent"], ls=":", lw=1.2)
            if labels:
                ax.annotate(f"main {p['harness_sha'][:7]}", (p["phase"] - 0.5, 1), xycoords=("data", "axes fraction"),
                            xytext=(2, -2), textcoords="offset points", va="top", fontsize=8,
                            color=COLORS["accent"])


def _phase_axis(ax: Any, xs: list[int]) -> None:
    ax.set_xticks(xs, ["start" if x == 0 else str(x) for x in xs])
    ax.set_xlabel("phase")


def accuracy(rows: list[dict], phases: list[dict]) -> str:
    with matplotlib.rc_context(_STYLE):
        fig = _figure(11, 5.6, hspace=0.12)
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
        xs = [r["phase"] for r in rows]
        top.fill_between(xs, [r["low"] for r in rows], [r["high"] for r in rows], color=COLORS["main"], alpha=0.15,
                         label="95% Wilson interval")
        top.plot(xs, [r["accuracy"] for r in rows], "o-", color=COLORS["main"], lw=2, label="held-out accuracy")
        for r in rows:
            top.annotate(f"{r['accuracy']:.1%}", (r["phase"], r["accuracy"]), xytext=(0, 7),
                         textcoords="offset points", ha="center", fontsize=8)
        tolerant = [r for r in rows if r.get("tolerant") is not None]
        if tolerant:
            top.plot([r["phase"] for r in tolerant], [r["tolerant"] for r in tolerant], "s--", color=COLORS["main"],
                     alpha=0.6, lw=1.2, label="tolerant score (formatting slips forgiven; reports only)")
        top.set_ylabel("accuracy")
        top.set_title(f"Held-out accuracy per phase (n={rows[-1]['n'] if rows else 0})", loc="left")
        top.legend(loc="best", fontsize=8)
        _versions(top, phases)
        changes = [r for r in rows if r["change"]]
        methods = sorted({r["change"]["method"] for r in changes})
        for method, marker in zip(methods, "os"):
            sel = [r for r in changes if r["change"]["method"] == method]
            c = [r["change"] for r in sel]
            bottom.errorbar([r["phase"] for r in sel], [x["change"] for x in c],
                            yerr=[[x["change"] - x["low"] for x in c], [x["high"] - x["change"] for x in c]],
                            fmt=marker, capsize=4, color=COLORS["main"], label=f"change, 95% {method} interval")
            for r, x in zip(sel, c):
                clear = x["low"] > 0 or x["high"] < 0
                bottom.annotate(f"{x['change']:+.1%}" + ("" if clear else " (noise)"), (r["phase"], x["high"]),
                                xytext=(0, 4), textcoords="offset points", ha="center", fontsize=8)
        bottom.axhline(0, color="black", lw=0.8)
        bottom.set_ylabel("change vs previous")
        if changes:
            bottom.legend(loc="lower right", fontsize=8)
        _versions(bottom, phases)
        _phase_axis(bottom, xs)
        return _svg(fig, "accuracy")


ARM_COLORS = {"static": "#757575", "static_rerun": "#bdbdbd", "reference": "#ef6c00", "keep_discard": "#6a1b9a",
              "evotrainer": "#1565c0", "oracle": "#2e7d32", "clean_evotrainer": "#00838f"}  # the last two: fault bench


def _arm_color(arm: str) -> str:
    return ARM_COLORS.get("static_rerun" if arm.startswith("static_rerun") else arm, "black")  # every rerun grey


def bench(data: dict) -> str:
    with matplotlib.rc_context(_STYLE):
        fig = _figure(11, 3.6)
        ax = fig.subplots()
        xs: set[int] = set()
        for arm, curve in data["curves"].items():
            if not curve:
                continue
            this = arm == data["this"]
            ax.plot([p for p, _ in curve], [a for _, a in curve], "o-", color=_arm_color(arm),
                    lw=2.6 if this else 1.4, alpha=1 if this else 0.8, label=arm + (" (this run)" if this else ""))
            phase, acc = curve[-1]
            ax.annotate(f"{acc:.1%}", (phase, acc), xytext=(6, 0), textcoords="offset points", va="center",
                        fontsize=8, color=_arm_color(arm))
            xs.update(p for p, _ in curve)
        ax.set_ylabel("held-out accuracy")
        ax.set_title("Bench arms, same seed, tasks, evaluator and training budget", loc="left")
        ax.legend(loc="best", fontsize=8)
        _phase_axis(ax, sorted(xs))
        return _svg(fig, "bench")


def training(phases: list[dict]) -> str:
    with matplotlib.rc_context(_STYLE):
        fig = _figure(11, 3.2)
        ax = fig.subplots()
        xs = [p["phase"] for p in phases]
        for key, label, style in (("reward_mean", "train reward (mean)", {"color": COLORS["main"], "lw": 5,
                                                                           "alpha": 0.35, "marker": "o", "ms": 11}),
                                  ("verified_rate", "verified rate (evaluator)", {"color": COLORS["promoted"],
                                                                                  "ls": "--", "marker": "s"})):
            ys = [p["train"].get(key) for p in phases]  # wide and pale under narrow and dashed: both show if equal
            if any(y is not None for y in ys):
                ax.plot(xs, [float("nan") if y is None else y for y in ys], label=label, **style)
        ax.set_title("Training reward and verified rate per phase", loc="left")
        ax.legend(loc="best", fontsize=8)
        _versions(ax, phases)
        _phase_axis(ax, xs)
        return _svg(fig, "training")


def health(phases: list[dict], steps: list[dict], unlogged: dict[str, str] | None = None) -> str:
    """One panel per figure of ``report.HEALTH``, every one drawn: a figure the trainer did not log (KL when
    beta = 0) keeps its panel, which says why (``unlogged``: figure -> reason)."""
    unlogged = unlogged or {}
    keys = list(HEALTH)
    cols = 4
    rows = -(-len(keys) // cols)
    with matplotlib.rc_context(_STYLE):
        fig = _figure(11, 0.3 + 2.3 * rows, top=0.75, hspace=0.45, wspace=0.3)
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        xs = [p["phase"] for p in phases]
        for ax, key in zip(axes, keys):
            per_step = [s for s in steps if key in s]
            if per_step:  # x: phase k's steps spread over (k-1, k]; per-phase means drawn at k - 0.5
                ax.plot([s["x"] + 0.5 for s in per_step], [s[key] for s in per_step], color=COLORS["main"],
                        lw=0.8, alpha=0.5, label="per step")
            ys = [p["train"].get(key) for p in phases]
            ax.plot(xs, [float("nan") if y is None else y for y in ys], "o", color=COLORS["main"],
                    label="phase mean")
            ax.set_title(HEALTH[key], loc="left", fontsize=9)
            if key in unlogged:
                drawn = per_step or any(y is not None for y in ys)
                ax.text(0.5, 0.9 if drawn else 0.5, textwrap.fill(unlogged[key], 32), transform=ax.transAxes,
                        ha="center", va="center", fontsize=8, color=COLORS["pending"])
                if not drawn and xs:
                    ax.set_yticks([])
                    ax.set_xlim(min(xs) - 0.3, max(xs) + 0.3)
            _versions(ax, phases, labels=False)
            ax.set_xticks(xs)
        for ax in axes[len(keys):]:
            ax.set_visible(False)
        fig.suptitle("Training health over time (x: phase; dotted: main changed)", x=0.01, ha="left")
        return _svg(fig, "health")


def anchor(branch: str) -> str:
    """The id of a candidate's card in the report (charts link to it)."""
    return "c-" + re.sub(r"[^A-Za-z0-9_-]", "-", branch)


def _short(entry: dict, width: int = 15) -> str:
    """A node's label, short enough to end before the next phase: the changed variable's last part."""
    name = re.split(r"[.:/]", entry["variable"] or entry["subject"])[-1].strip()
    return name if len(name) <= width else name[:width - 1] + "\u2026"


def lineage(entries: list[dict], phases: list[dict]) -> str:
    by_phase: dict[int, list[dict]] = {}
    for e in entries:
        by_phase.setdefault(e["phase"], []).append(e)
    height = max([len(v) for v in by_phase.values()] + [1])
    with matplotlib.rc_context(_STYLE):
        fig = _figure(11, 2.0 + 0.55 * height)
        ax = fig.subplots()
        xs = [p["phase"] for p in phases]
        ax.plot(xs, [0] * len(xs), "-", color=COLORS["main"], lw=3, zorder=1)
        main = ax.scatter(xs, [0] * len(xs), s=140, color=COLORS["main"], zorder=3)
        main.set_urls([None] * len(xs))
        for p in phases:
            ax.annotate(p["harness_sha"][:7], (p["phase"], 0), xytext=(0, -16), textcoords="offset points",
                        ha="center", fontsize=8, color=COLORS["main"])
        for phase, cands in sorted(by_phase.items()):
            for k, e in enumerate(cands, start=1):
                x, y = phase + 0.5, k
                color = COLORS.get(e["state"], COLORS["pending"])
                ax.plot([phase, x], [0, y], color=color, lw=1, alpha=0.6, zorder=1)
                if e["state"] == "promoted":
                    ax.annotate("", (phase + 1, 0), (x, y), arrowprops={"arrowstyle": "->", "color": color, "lw": 1.5})
                    if phase + 1 not in xs:  # merged, not trained on yet: the next phase's main
                        ax.scatter([phase + 1], [0], s=140, facecolors="white", edgecolors=COLORS["main"], zorder=3)
                dot = ax.scatter([x], [y], s=110, color=color, marker="o" if e["state"] != "rejected" else "X",
                                 zorder=3)
                dot.set_urls([f"#{anchor(e['branch'])}"])
                label = ax.annotate(_short(e), (x, y), xytext=(8, -3), textcoords="offset points", fontsize=7)
                label.set_url(f"#{anchor(e['branch'])}")
        for state in ("promoted", "rejected", "passed, not promoted"):
            ax.scatter([], [], color=COLORS[state], label=state, marker="X" if state == "rejected" else "o")
        ax.scatter([], [], color=COLORS["main"], label="main (trained on)")
        ax.set_yticks([])
        ax.set_ylim(-0.8, height + 1.5)  # the top band holds the legend
        ax.set_xlim(min(xs + [1]) - 0.4, max(xs + [1]) + 1.4)
        ax.grid(False)
        ax.spines["left"].set_visible(False)
        ax.legend(loc="upper left", fontsize=8, ncols=4)
        ax.set_title("Harness lineage: candidates per phase (click one for its card)", loc="left")
        _phase_axis(ax, xs or [1])
        return _svg(fig, "lineage")


if __name__ == "__main__":
    import sys
    from pathlib import Path

    from evotrainer.report.collect import collect
    from evotrainer.rundir import RunDir

    rd = RunDir(sys.argv[1])
    d = collect(rd)
    page = "".join([accuracy(d["accuracy"], d["phases"]), training(d["phases"]),
                    health(d["phases"], d["steps"], d["unlogged"]),
                    lineage(d["lineage"], d["phases"])])
    Path(rd.root / "charts-preview.html").write_text(f"<!doctype html><meta charset=utf-8><body>{page}</body>")
    print(rd.root / "charts-preview.html")
