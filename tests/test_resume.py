"""Resume after `kill -9`: mid-phase and mid-evolution, the rerun picks up at the node it was in.

The run process is killed with SIGKILL (no cleanup code runs). Its trainer service must notice and exit on its
own; `evotrainer status` must say the run is paused; `evotrainer run` again must finish the run without
re-training a finished phase, without losing or duplicating rollouts, and with a clean `main`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import EVOTRAINER, cli, free_port
from tests.test_e2e import check_finished_run, init_args, trainer_processes


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_until(run_dir: Path, env: dict, done, timeout: float = 400) -> None:
    """Start `evotrainer run`, wait until ``done(events)`` holds, then SIGKILL the run process."""
    proc = subprocess.Popen([*EVOTRAINER, "run", str(run_dir)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    try:
        while not done(events(run_dir)):
            assert proc.poll() is None, f"the run ended (code {proc.returncode}) before the kill point"
            assert time.time() < deadline, "the kill point was never reached"
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_gone(run_dir: Path, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while trainer_processes(run_dir) and time.time() < deadline:
        time.sleep(0.2)
    assert not trainer_processes(run_dir), "the trainer service outlived the killed run"


def mid_phase(evs: list[dict]) -> bool:
    """Phase 1 is training: the trainer has started the job (its scratch dir exists)."""
    return any(e["kind"] == "node_start" and e.get("node") == "train" for e in evs)


def mid_evolution(evs: list[dict]) -> bool:
    """Phase 1 trained and its candidates are committed on branches, not yet judged or promoted."""
    return any(e["kind"] == "candidate" and e["phase"] == 1 for e in evs)


@pytest.mark.slow
def test_kill_mid_phase_and_mid_evolution_then_resume(tmp_path: Path, cli_env):
    run_dir = tmp_path / "run"
    cli(init_args(run_dir, phases=2), cli_env)

    # 1. kill while phase 1 trains
    run_until(run_dir, cli_env, lambda evs: mid_phase(evs) and (run_dir / "tmp" / "phase-0001").exists())
    wait_gone(run_dir)
    status = json.loads(cli(["status", str(run_dir), "--json"], cli_env).stdout)
    assert status["state"] == "paused" and status["phase"] == 0, status

    # 2. resume, and kill again once phase 1's candidates exist but are not judged yet
    run_until(run_dir, cli_env, mid_evolution)
    wait_gone(run_dir)
    assert json.loads(cli(["status", str(run_dir), "--json"], cli_env).stdout)["state"] == "paused"
    evs = events(run_dir)
    assert [e["node"] for e in evs if e["kind"] == "resume"] == ["train"]

    # 3. resume to the end, raising the budget on the way: the resumed run honours the new one
    cli(["run", str(run_dir), "--phases", "3"], cli_env)
    check_finished_run(run_dir, 3, cli_env)
    evs = events(run_dir)
    resumed_at = [e["node"] for e in evs if e["kind"] == "resume"]
    assert resumed_at[0] == "train" and resumed_at[1] in ("backtest", "engineer"), resumed_at
    finished = [e["phase"] for e in evs if e["kind"] == "node" and e["node"] == "train"]
    assert finished == [1, 2, 3], "a finished phase was trained again, or the raised budget was ignored"
    # every candidate of phase 1 was judged exactly once after the resume (none lost, none duplicated), or left
    # unjudged because another of its round passed first
    judged = [e["branch"] for e in evs if e["kind"] in ("verdict", "not_judged") and e["phase"] == 1]
    made = {e["branch"] for e in evs if e["kind"] == "candidate" and e["phase"] == 1}
    assert set(judged) == made


@pytest.mark.slow
def test_the_last_phase_ends_the_run_and_a_raised_budget_runs_its_waiting_round_first(tmp_path: Path, cli_env):
    """By default (``evolution.final_round`` off) nothing evolves after the last phase: no phase would train on it.
    `evotrainer run --phases 2` then runs phase 1's round before phase 2 trains, and phase 2 again ends the run."""
    run_dir = tmp_path / "run"
    cli(init_args(run_dir, phases=1, extra=["evolution.final_round=false"]), cli_env)
    cli(["run", str(run_dir)], cli_env)
    nodes = [(e["node"], e["phase"]) for e in events(run_dir) if e["kind"] == "node"]
    assert nodes == [("train", 1), ("effect", 1), ("librarian", 1)], nodes
    assert json.loads(cli(["status", str(run_dir), "--json"], cli_env).stdout)["state"] == "done"

    cli(["run", str(run_dir), "--phases", "2"], cli_env)
    nodes = [(e["node"], e["phase"]) for e in events(run_dir) if e["kind"] == "node"]
    assert nodes[3:5] == [("diagnose", 1), ("critique", 1)], nodes  # the waiting round, first
    assert nodes.index(("train", 2)) > max(i for i, n in enumerate(nodes) if n[1] == 1), nodes
    assert nodes[-3:] == [("train", 2), ("effect", 2), ("librarian", 2)], nodes  # and the new last phase ends the run
    status = json.loads(cli(["status", str(run_dir), "--json"], cli_env).stdout)
    assert status["state"] == "done" and status["phase"] == 2, status


@pytest.mark.slow
def test_keep_discard_judges_the_last_phase_but_leaves_its_next_edit_to_a_raised_budget(tmp_path: Path, cli_env):
    """The keep/discard baseline ends like the evolving loop: its last phase's edit is kept or discarded, but no
    next edit is committed onto main after it (nothing would train on it); a raised budget commits it first."""
    import git

    run_dir = tmp_path / "run"
    cli(init_args(run_dir, phases=1, extra=["evolution.final_round=false", "evolution.mode=keep_discard"]), cli_env)
    cli(["run", str(run_dir)], cli_env)
    nodes = [(e["node"], e["phase"]) for e in events(run_dir) if e["kind"] == "node"]
    assert nodes == [("train", 1), ("keep_discard", 1), ("effect", 1), ("librarian", 1)], nodes
    main = git.Repo(run_dir / "harness").commit("main")
    assert len(list(main.iter_parents())) == 0  # main is still the seed harness: no untrained edit on it

    cli(["run", str(run_dir), "--phases", "3"], cli_env)
    nodes = [(e["node"], e["phase"]) for e in events(run_dir) if e["kind"] == "node"]
    assert nodes[4:7] == [("keep_discard", 1), ("effect", 1), ("librarian", 1)], nodes  # the waiting edit, first
    assert nodes[7:] == [("train", 2), ("keep_discard", 2), ("effect", 2), ("librarian", 2),
                         ("train", 3), ("keep_discard", 3), ("effect", 3), ("librarian", 3)], nodes
    verdicts = [(e["phase"], e["branch"]) for e in events(run_dir) if e["kind"] == "keep_discard"]
    assert verdicts == [(2, "candidates/phase-1-kd"), (3, "candidates/phase-2-kd")]  # each edit judged once
    subjects = [c.summary for c in git.Repo(run_dir / "harness").iter_commits("main", first_parent=True)]
    assert any(s.startswith("Try candidates/phase-2-kd") for s in subjects), subjects
    assert not any("phase-3-kd" in s for s in subjects), subjects  # the last phase's edit waits again
    status = json.loads(cli(["status", str(run_dir), "--json"], cli_env).stdout)
    assert status["state"] == "done" and status["phase"] == 3, status


@pytest.mark.slow
def test_a_trainer_service_killed_mid_phase_is_restarted_and_the_run_finishes(tmp_path: Path, cli_env):
    run_dir = tmp_path / "run"
    cli(init_args(run_dir, phases=2), cli_env)
    proc = subprocess.Popen([*EVOTRAINER, "run", str(run_dir)], env=cli_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 400
    while not (mid_phase(events(run_dir)) and (run_dir / "tmp" / "phase-0001").exists()):
        assert proc.poll() is None and time.time() < deadline, "phase 1 never started"
        time.sleep(0.2)
    victim = json.loads((run_dir / "trainer.json").read_text())["pid"]
    os.kill(victim, signal.SIGKILL)  # e.g. the kernel's OOM killer
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert "trainer service lost" in " ".join(out.split())
    check_finished_run(run_dir, 2, cli_env)
    evs = events(run_dir)
    assert len([e for e in evs if e["kind"] == "trainer_restart"]) == 1
    assert [e["phase"] for e in evs if e["kind"] == "node" and e["node"] == "train"] == [1, 2]


@pytest.fixture
def postgres() -> str:
    """A real Postgres server (the system's initdb/postgres, run as the postgres user when we are root) on a free
    loopback port; its URL. Skipped, saying why, where Postgres or its Python driver is missing."""
    import shutil

    pytest.importorskip("langgraph.checkpoint.postgres", reason="needs the teams extra (langgraph-checkpoint-postgres)")
    bindir = next((p for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None)
    initdb = shutil.which("initdb") or (str(bindir / "initdb") if bindir else None)
    server = shutil.which("postgres") or (str(bindir / "postgres") if bindir else None)
    if not initdb or not server:
        pytest.skip("no Postgres server binaries (initdb, postgres) on this machine")
    as_user: list[str] = []
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="evo-pg-"))  # not under pytest's root-only folder: the server user reads it
    if os.geteuid() == 0:  # initdb refuses root
        import pwd

        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and no postgres user to run the server as")
        os.chown(root, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_user, initdb, "-D", str(root / "data"), "-A", "trust", "-U", "evo"], check=True,
                   capture_output=True, timeout=120)
    port = free_port()
    proc = subprocess.Popen([*as_user, server, "-D", str(root / "data"), "-k", str(root), "-h", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"postgresql://evo@127.0.0.1:{port}/postgres"
    import psycopg

    for _ in range(300):
        try:
            psycopg.connect(url, connect_timeout=1).close()
            break
        except psycopg.OperationalError:
            assert proc.poll() is None, "postgres exited at start"
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=60)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_a_run_checkpointed_in_postgres_resumes_from_it(tmp_path: Path, cli_env, postgres: str):
    """state.url: the loop's checkpoints go to a shared Postgres under the run's own thread (no state.sqlite); a
    later `evotrainer run --phases 2` picks the run up from Postgres; a second run sharing the server keeps its own
    thread; an unreachable server is one line at init."""
    import psycopg

    extra = [f"state.url={postgres}", "evolution.mode=static"]
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        cli(init_args(run, 1, extra), cli_env)
        cli(["run", str(run)], cli_env)
        assert not (run / "state.sqlite").exists()
    cli(["run", str(runs[0]), "--phases", "2"], cli_env)
    status = json.loads(cli(["status", str(runs[0]), "--json"], cli_env).stdout)
    assert status["state"] == "done" and status["phase"] == 2
    assert json.loads(cli(["status", str(runs[1]), "--json"], cli_env).stdout)["phase"] == 1
    starts = [e for e in events(runs[0]) if e["kind"] == "node_start" and e.get("node") == "train"]
    assert [e["phase"] for e in starts] == [1, 2]  # phase 1 was not trained again: the state came from Postgres
    with psycopg.connect(postgres) as conn:
        threads = {r[0] for r in conn.execute("select distinct thread_id from checkpoints")}
    assert threads == {(run / "run_id").read_text().strip() for run in runs}

    bad = cli(init_args(tmp_path / "c", 1, ["state.url=postgresql://evo@127.0.0.1:1/postgres"]), cli_env, check=False)
    assert bad.returncode == 2 and "state.url: cannot connect to Postgres" in " ".join(bad.stdout.split())
    assert not (tmp_path / "c").exists()
