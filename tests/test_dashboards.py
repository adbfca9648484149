"""training.report_to: TRL's dashboards get each phase's metrics, tagged with the run, phase and harness sha.

Every dashboard is tested offline for real: short phases train in process (``run_phase``) and what they wrote is
read back: tensorboard's event files with tensorboard's reader, wandb's offline run files (one run per phase, each
tagged with its own phase), trackio's local store with trackio's reader. Off by default; pilots never report; a dashboard whose package is missing fails with
one line naming the key.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from evotrainer import config as C
from evotrainer.harness.repo import HarnessRepo
from evotrainer.rundir import RunDir
from evotrainer.trainer import dashboards
from evotrainer.trainer.wire import PhaseRequest
from tests.conftest import FAST


def _request(cfg: C.Config, root: str, phase: int = 1, pilot: bool = False) -> PhaseRequest:
    return PhaseRequest.make(cfg, root, phase, "ab" * 20, f"{root}/policy/base", 2, pilot=pilot)


def test_off_by_default_and_for_pilots():
    cfg = C.parse({})
    assert cfg.training.report_to == [] and dashboards.trl_args(_request(cfg, "/r")) == {"report_to": "none"}
    on = C.apply_overrides(cfg, ["training.report_to=[tensorboard]"])
    assert dashboards.trl_args(_request(on, "/r", pilot=True)) == {"report_to": "none"}
    args = dashboards.trl_args(_request(on, "/r", phase=3))
    assert args == {"report_to": ["tensorboard"], "run_name": "demo-phase-0003-abababab", "project": "demo"}
    assert os.environ["TENSORBOARD_LOGGING_DIR"] == "/r/tensorboard/phase-0003"


def test_unknown_dashboard_or_missing_package_is_one_readable_error(monkeypatch):
    with pytest.raises(C.ConfigError, match=r"training\.report_to\.0"):
        C.apply_overrides(C.parse({}), ["training.report_to=[mlflow]"])
    monkeypatch.setitem(dashboards.PACKAGES, "wandb", "evotrainer_no_such_package")
    cfg = C.apply_overrides(C.parse({}), ["training.report_to=[wandb]"])
    with pytest.raises(ValueError, match=r"^training\.report_to: wandb is not installed"):
        dashboards.trl_args(_request(cfg, "/r"))


def test_wandb_runs_name_the_run_phase_and_harness(monkeypatch):
    monkeypatch.setitem(dashboards.PACKAGES, "wandb", "json")  # any importable module: only the arguments are checked
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    cfg = C.apply_overrides(C.parse({"name": "exp7"}), ["training.report_to=[wandb]"])
    args = dashboards.trl_args(_request(cfg, "/r", phase=2))
    assert args["run_name"] == "exp7-phase-0002-abababab" and args["report_to"] == ["wandb"]
    init = dashboards.wandb_init_args(_request(cfg, "/r", phase=2))
    assert init == {"project": "exp7", "name": "exp7-phase-0002-abababab", "group": "exp7", "dir": "/r",
                    "tags": ["evotrainer", "run:exp7", "phase:2", "harness:abababababab"]}
    monkeypatch.setenv("WANDB_PROJECT", "team-rl")  # the user's own settings win
    monkeypatch.setenv("WANDB_DIR", "/data/wandb")
    init = dashboards.wandb_init_args(_request(cfg, "/r", phase=2))
    assert init["project"] == "team-rl" and init["dir"] == "/data/wandb"


def test_a_tensorboard_phase_writes_its_scalars_and_tags(tmp_path, policy_cache, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from evotrainer.trainer.grpo import run_phase

    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    rd = RunDir(tmp_path / "run")
    cfg = C.apply_overrides(C.parse({}), [*FAST, "training.report_to=[tensorboard]", "sandbox.backend=process"])
    rd.init(cfg, log=lambda _: None)
    rd.ensure_policy(log=lambda _: None)
    sha = HarnessRepo(rd.harness).sha("main")
    result = run_phase(PhaseRequest.make(cfg, str(rd.root), 1, sha, str(rd.policy_base), 2))
    assert result.steps == 2

    logdir = rd.root / "tensorboard" / "phase-0001"
    assert any(p.name.startswith("events.out.tfevents") for p in logdir.iterdir())
    events = EventAccumulator(str(logdir))
    events.Reload()
    scalars = events.Tags()["scalars"]
    for tag in ("train/loss", "train/reward", "train/grad_norm", "train/learning_rate"):
        assert tag in scalars, scalars
        assert len(events.Scalars(tag)) >= 2  # one point per step
    assert all(isinstance(s.value, float) for s in events.Scalars("train/reward"))
    args = json.loads(events.Tensors("args/text_summary")[0].tensor_proto.string_val[0].decode())
    assert args["run_name"] == f"demo-phase-0001-{sha[:8]}" and args["report_to"] == ["tensorboard"]


def test_wandb_and_trackio_phases_log_offline_and_each_phase_is_its_own_run(tmp_path, policy_cache, monkeypatch):
    """Two phases in one process (as in the trainer service), reporting to wandb (offline) and trackio (local)."""
    from evotrainer.trainer.grpo import run_phase

    monkeypatch.setenv("EVOTRAINER_CACHE", str(policy_cache))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    for var in ("WANDB_DIR", "WANDB_PROJECT", "WANDB_TAGS", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(var, raising=False)
    name = f"dash-{uuid.uuid4().hex[:8]}"  # trackio's store may be the user's own (see the end)
    rd = RunDir(tmp_path / "run")
    cfg = C.apply_overrides(C.parse({"name": name}), [*FAST, "training.report_to=[wandb,trackio]",
                                                         "sandbox.backend=process"])
    rd.init(cfg, log=lambda _: None)
    rd.ensure_policy(log=lambda _: None)
    sha = HarnessRepo(rd.harness).sha("main")
    first = run_phase(PhaseRequest.make(cfg, str(rd.root), 1, sha, str(rd.policy_base), 2))
    run_phase(PhaseRequest.make(cfg, str(rd.root), 2, sha, first.checkpoint_path, 2))

    import wandb

    assert wandb.run is None  # each phase's run was finished, the next phase opened its own
    runs = sorted((rd.root / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 2, runs
    for phase, run in enumerate(runs, 1):
        # wandb's offline file holds protobuf records (no Python reader ships with wandb 0.2x+): the run record's
        # name and tags, and the logged history keys, are stored as plain bytes inside it
        raw = run.read_bytes()
        assert f"{name}-phase-{phase:04d}-{sha[:8]}".encode() in raw
        assert f"phase:{phase}".encode() in raw and f"phase:{3 - phase}".encode() not in raw
        assert f"harness:{sha[:12]}".encode() in raw and b"train/reward" in raw
    from trackio.sqlite_storage import SQLiteStorage  # read back with trackio's own reader

    db = SQLiteStorage.get_project_db_path(name)  # trackio: one project per EvoTrainer run, one run per phase
    try:
        assert sorted(SQLiteStorage.get_runs(name)) == [f"{name}-phase-0001-{sha[:8]}", f"{name}-phase-0002-{sha[:8]}"]
        logs = SQLiteStorage.get_logs(name, f"{name}-phase-0002-{sha[:8]}")
        assert sum("train/reward" in row for row in logs) >= 2  # one point per step
    finally:  # trackio reads TRACKIO_DIR once, at import: an earlier test may have fixed it to the user's cache
        for f in db.parent.glob(f"{name}.*"):
            f.unlink()
