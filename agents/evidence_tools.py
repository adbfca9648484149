"""The tools an LLM Diagnostician or Critic reads a phase with: SQL over rollouts, scalars, steps and dev items,
samples, registry, history.

    sql       DuckDB over three tables: ``rollouts`` (every phase's parquet file, one row per completion, with a
              ``rollout_id`` = group_id/sample_idx), ``scalars`` (phase, name, value: the trainer's logged
              figures per phase and dev accuracy, overall and per level) and ``steps`` (phase, step, name, value:
              the trainer's per-step log within each phase, ``PhaseResult.trajectory``: reward, entropy,
              grad_norm, learning_rate, ...) and ``dev_items`` (phase, task_id, score: the dev split's verdict per
              task at each phase's end, phase 0 the starting policy: which verdicts a phase changed, paired per task)
    sample    rollouts by id, or by a WHERE clause over ``rollouts``: prompt, completion, reward, verified, ...
              (and a multi-turn run's turn figures, ``TURN_COLUMNS``, where any rollout called a tool)
    registry  main's diagnostics registry on the phase's rollouts (each metric's value and alert threshold)
    history   the run so far: per-phase accuracy, and every candidate edit with its verdict and realized effect

The tables are loaded once, then DuckDB's file and network access is switched off, so a query reads the evidence
and nothing else. Every answer is short text (at most ``MAX_ROWS`` rows). The role's answer is checked against the
same tables (:meth:`EvidenceTools.holds`), so cited figures and rollout ids are the data's, not the model's.

Try it alone on a finished run::

    python -c "from agents.evidence_tools import EvidenceTools; t = EvidenceTools.from_run('runs/demo'); \\
      print(t.sql('SELECT phase, avg(reward) FROM rollouts GROUP BY phase'))"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

MAX_ROWS = 20
SAMPLE_COLUMNS = "rollout_id, phase, task_id, difficulty, prompt, completion, completion_tokens, truncated, reward, " \
                 "reward_components, verified, kept, advantage"
TURN_COLUMNS = "turns, tool_calls, tool_errors, hit_turn_cap"  # what the tool-use modes read (agents/modes.py)


class ToolCall(BaseModel):
    """One turn of an investigating role: a tool to use, or ``answer``."""

    action: Literal["sql", "sample", "registry", "history", "answer"] = Field(
        description="sql: run `query`; sample: show rollouts by `ids`, or matching `query` (a WHERE clause); "
        "registry / history: read them; answer: give the final answer now")
    query: str = Field("", description="SQL for sql (tables rollouts, scalars, steps, dev_items); a WHERE clause "
                       "for sample")
    ids: list[str] = Field(default_factory=list, description="rollout ids (group_id/sample_idx) for sample")


class EvidenceTools:
    def __init__(self, rollout_files: dict[int, str], results: list, registry: dict | None = None,
                 history: list[dict] | None = None, baseline=None):
        import duckdb

        self.registry_data, self.history_data = registry or {}, history or []
        self.results, self.baseline = results, baseline
        self.con = duckdb.connect(":memory:")
        files = [f for _, f in sorted(rollout_files.items()) if Path(f).exists()]
        if files:
            self.con.execute("CREATE TABLE rollouts AS SELECT group_id || '/' || CAST(sample_idx AS VARCHAR) AS "
                             "rollout_id, * FROM read_parquet(?, union_by_name = true)", [files])
        else:
            self.con.execute("CREATE TABLE rollouts (rollout_id VARCHAR, phase BIGINT)")
        self.sample_columns = SAMPLE_COLUMNS + (f", {TURN_COLUMNS}" if self._called_a_tool() else "")
        self.con.execute("CREATE TABLE scalars (phase BIGINT, name VARCHAR, value DOUBLE)")
        rows = [(p, n, v) for p, figures in self._scalars() for n, v in figures.items()]
        if rows:
            self.con.executemany("INSERT INTO scalars VALUES (?, ?, ?)", rows)
        self.con.execute("CREATE TABLE steps (phase BIGINT, step BIGINT, name VARCHAR, value DOUBLE)")
        per_step = [(r.phase, i + 1, n, v) for r in results for n, vs in r.trajectory.items() for i, v in enumerate(vs)]
        if per_step:
            self.con.executemany("INSERT INTO steps VALUES (?, ?, ?, ?)", per_step)
        self.con.execute("CREATE TABLE dev_items (phase BIGINT, task_id VARCHAR, score DOUBLE)")
        scored = [(0, baseline)] if baseline is not None else []
        items = [(p, k, v) for p, d in scored + [(r.phase, r.dev) for r in results] for k, v in d.items.items()]
        if items:
            self.con.executemany("INSERT INTO dev_items VALUES (?, ?, ?)", items)
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")
        self.ids = {r[0] for r in self.con.execute("SELECT rollout_id FROM rollouts").fetchall()}

    @classmethod
    def from_evidence(cls, ev, history: list[dict] | None = None) -> "EvidenceTools":
        files = {r.phase: r.rollout_path for r in ev.results}
        return cls(files, ev.results, ev.registry, history, ev.baseline)

    @classmethod
    def from_run(cls, run_dir: str | Path) -> "EvidenceTools":
        from evotrainer.report.history import harness_log, phase_results
        from evotrainer.rundir import RunDir

        rd = RunDir(Path(run_dir))
        results = phase_results(rd)
        return cls({r.phase: r.rollout_path for r in results}, results, None, harness_log(rd), rd.baseline(split="dev"))

    def _scalars(self):
        if self.baseline is not None:
            yield 0, {"dev_accuracy": self.baseline.accuracy,
                      **{f"dev_accuracy_level_{k}": v for k, v in self.baseline.by_difficulty.items()}}
        for r in self.results:
            yield r.phase, {**{k: float(v) for k, v in r.train.items()}, "dev_accuracy": r.dev.accuracy,
                            "dev_n": float(r.dev.n), "tokens": float(r.tokens), "skipped_batches":
                            float(r.skipped_batches),
                            **{f"dev_accuracy_level_{k}": v for k, v in r.dev.by_difficulty.items()}}

    # --- the tools --------------------------------------------------------------------------------------------
    def query(self, sql: str, limit: int = MAX_ROWS) -> tuple[list[str], list[tuple]]:
        """(column names, rows) of a read-only query; ValueError with DuckDB's message when it fails."""
        if sql.strip().split(None, 1)[0].lower() not in ("select", "with", "from", "describe", "summarize"):
            raise ValueError("only SELECT queries are allowed")
        try:
            cur = self.con.execute(sql)
            rows = cur.fetchmany(limit)
        except Exception as err:
            raise ValueError(f"query failed: {str(err).splitlines()[0]}") from None
        return [d[0] for d in cur.description], rows

    def sql(self, sql: str) -> str:
        try:
            cols, rows = self.query(sql)
        except ValueError as err:
            return str(err)
        return _table(cols, rows)

    def _called_a_tool(self) -> bool:
        """Some rollout called a tool (a multi-turn run): its samples then show the turn figures too. A single-turn
        run's rollouts carry none, or the defaults (no call), and its samples leave them out."""
        columns = {c[0] for c in self.con.execute("DESCRIBE rollouts").fetchall()}
        return "tool_calls" in columns and bool(self.con.execute("SELECT max(tool_calls) > 0 FROM rollouts")
                                                .fetchone()[0])

    def sample(self, ids: list[str] | None = None, where: str = "", k: int = 5) -> str:
        if ids:
            sql, args = f"SELECT {self.sample_columns} FROM rollouts WHERE rollout_id IN ?", [list(ids)[:k]]
        else:
            sql, args = (f"SELECT {self.sample_columns} FROM rollouts {'WHERE ' + where if where else ''} LIMIT {k}",
                         [])
        try:
            cur = self.con.execute(sql, args) if args else self.con.execute(sql)
            return _table([d[0] for d in cur.description], cur.fetchall())
        except Exception as err:
            return f"sample failed: {str(err).splitlines()[0]}"

    def registry(self) -> str:
        return json.dumps(self.registry_data, default=str)[:4000] or "{}"

    def history(self) -> str:
        lines = [f"phase {r.phase}: dev accuracy {r.dev.accuracy:.3f} (n={r.dev.n}), harness "
                 f"{r.harness_sha[:8]}" for r in self.results]
        if self.baseline is not None:
            lines.insert(0, f"starting policy: dev accuracy {self.baseline.accuracy:.3f}")
        for e in self.history_data[-12:]:
            lines.append(f"{e['branch']}: {e['state']}; {e.get('variable', '')}; {e.get('diagnosis', '')[:120]}; "
                         f"verdict {e['verdict']}: {'; '.join(e.get('reasons', []))[:200]}; effect "
                         f"{e.get('realized_effect') or '-'}")
        return "\n".join(lines) or "no history yet"

    def run(self, call: ToolCall) -> str:
        """What ``call`` returns, as text for the conversation."""
        if call.action == "sql":
            return self.sql(call.query) if call.query.strip() else "sql needs a query"
        if call.action == "sample":
            return self.sample(call.ids, call.query)
        if call.action == "registry":
            return self.registry()
        if call.action == "history":
            return self.history()
        return ""

    # --- checks on an answer ----------------------------------------------------------------------------------
    def unknown_ids(self, ids: list[str]) -> list[str]:
        return [i for i in ids if i not in self.ids]

    def holds(self, sql: str, value: float) -> str | None:
        """None when ``value`` is a cell of the first row ``sql`` returns; else why not."""
        try:
            cols, rows = self.query(sql, limit=1)
        except ValueError as err:
            return str(err)
        if not rows:
            return "the query returns no row"
        cells = [c for c in rows[0] if isinstance(c, (int, float)) and not isinstance(c, bool)]
        if any(abs(float(c) - value) <= 1e-6 + 1e-3 * abs(value) for c in cells):
            return None
        return f"its first row is {_table(cols, rows[:1]).splitlines()[-1]}, which does not hold {value}"

    def schema(self) -> str:
        """The tables' columns, for the prompt."""
        out = []
        for table in ("rollouts", "scalars", "steps", "dev_items"):
            cols = self.con.execute(f"DESCRIBE {table}").fetchall()
            out.append(f"{table}({', '.join(f'{c[0]} {c[1]}' for c in cols)})")
        names = [r[0] for r in self.con.execute("SELECT DISTINCT name FROM scalars ORDER BY 1").fetchall()]
        n = self.con.execute("SELECT count(*) FROM rollouts").fetchone()[0]
        steps = [r[0] for r in self.con.execute("SELECT DISTINCT name FROM steps ORDER BY 1").fetchall()]
        return "\n".join(out) + (f"\nrollouts has {n} rows; scalars names: {', '.join(names)}; steps names: "
                                 f"{', '.join(steps) or 'none'}")

    def close(self) -> None:
        self.con.close()


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    s = str(v)
    return s if len(s) <= 160 else s[:157] + "..."


def _table(cols: list[str], rows: list) -> str:
    if not rows:
        return " | ".join(cols) + "\n(no rows)"
    return "\n".join([" | ".join(cols)] + [" | ".join(_cell(c) for c in row) for row in rows])


def investigate(conv, tools: EvidenceTools, schema: type[BaseModel], prompt: str, rounds: int, check=None):
    """Let the model use the tools (at most ``rounds`` calls), then take its answer: the final step, or None.

    ``schema`` is a :class:`ToolCall` subclass carrying the role's answer fields; ``check`` validates an ``answer``
    step (its error goes back to the model). The last turn must answer. Raises what ``conv.ask`` raises.
    """
    for used in range(rounds + 1):
        left = rounds - used

        def checked(step, final=not left):
            if final and step.action != "answer":
                return "no tool calls are left: set action to 'answer' and give your answer"
            return check(step) if check and step.action == "answer" else None

        step = conv.ask(prompt + (f"\n\n({left} tool calls left.)" if left else
                                  "\n\nNo tool calls left: answer now, with action 'answer'."), schema, checked)
        if step is None or step.action == "answer":
            return step
        prompt = f"Result of {step.action}:\n{tools.run(step)}"
    return None
