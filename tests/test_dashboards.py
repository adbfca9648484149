"""training.report_to: TRL's dashboards get each phase's metrics, tagged with the run, phase and harness sha.

The tensorboard path is tested offline for real: a short phase trains in process (``run_phase``) with
``report_to: [tensorboard]`` and the event files under RUN_DIR/tensorboard/phase-0001 are read back with
tensorboard's own reader. Off by default; pilots never report; a dashboard whose package is missing fails with
one line naming the key.
"""

from __future__ import annotations

import json
import os

import pytest

from evotrainer import config as C
from evotrainer.harness import HarnessRepo
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


def test_wandb_tags_name_the_run_phase_and_harness(monkeypatch):
    monkeypatch.setitem(dashboards.PACKAGES, "wandb", "json")  # any importable module: only the env is checked
    monkeypatch.delenv("WANDB_TAGS", raising=False)
    cfg = C.apply_overrides(C.parse({"name": "exp7"}), ["training.report_to=[wandb]"])
    args = dashboards.trl_args(_request(cfg, "/r", phase=2))
    assert args["run_name"] == "exp7-phase-0002-abababab" and args["report_to"] == ["wandb"]
    assert os.environ["WANDB_TAGS"] == "evotrainer,run:exp7,phase:2,harness:abababababab"
    assert os.environ["WANDB_RUN_GROUP"] == "exp7"


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
