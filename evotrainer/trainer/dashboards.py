"""The ecosystem's dashboards: what a phase's GRPOConfig gets so TRL reports where its users already look.

``training.report_to`` (tensorboard, wandb, trackio; empty = off) travels in the PhaseRequest and becomes TRL's
own ``report_to``; nothing here logs a metric itself, TRL's callbacks do. Every phase is one dashboard run named
``<run>-phase-NNNN-<harness sha[:8]>``, so the run, the phase and the harness version it trained on are on it:

    tensorboard  event files in ``RUN_DIR/tensorboard/phase-NNNN`` (TRL's TensorBoardCallback reads the directory
                 from ``TENSORBOARD_LOGGING_DIR``; its "args" text holds the run name, phase and sha);
                 ``tensorboard --logdir RUN_DIR/tensorboard`` shows the phases side by side
    wandb        run name as above, tags evotrainer, run:<name>, phase:<n>, harness:<sha[:12]>, group = the run's
                 name, project from ``WANDB_PROJECT`` (default: the run's name), files under ``WANDB_DIR`` (default:
                 RUN_DIR); one wandb run per phase, opened before and finished after its training (``phase_runs``);
                 ``WANDB_MODE=offline`` works as usual (``wandb sync RUN_DIR/wandb/offline-run-*`` later)
    trackio      run name as above, TRL's ``project`` = the run's name; stored locally (``TRACKIO_DIR``, default
                 trackio's own), never pushed to a Space by EvoTrainer (``trackio show`` opens it)

Pilots (the short A/B trainings that judge an edit) report nowhere: they are not the run's training.
Try it alone: ``python -m evotrainer.trainer.dashboards`` prints what phase 1 of a tensorboard run would get.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from evotrainer.trainer.wire import PhaseRequest

PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}  # report_to -> module it needs


def run_name(req: PhaseRequest) -> str:
    return f"{req.run_name or Path(req.run_dir).name}-phase-{req.phase:04d}-{req.harness_sha[:8]}"


def tensorboard_dir(run_dir: str | Path, phase: int) -> Path:
    return Path(run_dir) / "tensorboard" / f"phase-{phase:04d}"


def trl_args(req: PhaseRequest) -> dict[str, Any]:
    """GRPOConfig arguments for ``req``'s dashboards; sets the environment variables TRL's callbacks read.

    Raises ValueError naming ``training.report_to`` when a dashboard's package is not installed.
    """
    if req.pilot or not req.training.report_to:
        return {"report_to": "none"}
    missing = [d for d in req.training.report_to if importlib.util.find_spec(PACKAGES[d]) is None]
    if missing:
        raise ValueError(f"training.report_to: {', '.join(missing)} is not installed in the trainer's environment "
                         f"(pip install {' '.join(PACKAGES[d] for d in missing)}, or remove it from report_to)")
    name = run_name(req)
    if "tensorboard" in req.training.report_to:
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(tensorboard_dir(req.run_dir, req.phase))
    args: dict[str, Any] = {"report_to": list(req.training.report_to), "run_name": name, "project": req.run_name or "evotrainer"}
    if "trackio" in req.training.report_to:
        args["trackio_static_space_id"] = False  # no Space: a run's metrics stay on this machine
    return args


def wandb_init_args(req: PhaseRequest) -> dict[str, Any]:
    """The phase's wandb run: named, grouped and tagged with the run, phase and harness sha; files in the run."""
    return {
        "project": os.environ.get("WANDB_PROJECT") or req.run_name or "evotrainer",
        "name": run_name(req), "group": req.run_name or run_name(req),
        "tags": ["evotrainer", f"run:{req.run_name}", f"phase:{req.phase}", f"harness:{req.harness_sha[:12]}"],
        "dir": os.environ.get("WANDB_DIR") or str(req.run_dir),
    }


@contextlib.contextmanager
def phase_runs(req: PhaseRequest):
    """Around a phase's training: open its wandb run (TRL's callback then logs into it instead of opening one from
    settings wandb reads once per process, which would tag every later phase as the first) and finish it after,
    even when training fails (the trainer service would otherwise log the next phase into it). Trackio's callback
    opens and finishes its own run."""
    wandb = None
    if "wandb" in req.training.report_to and not req.pilot:
        import wandb

        wandb.init(**wandb_init_args(req))
    try:
        yield
    finally:
        if wandb is not None and wandb.run is not None:
            wandb.finish()


if __name__ == "__main__":
    from evotrainer.config import parse

    cfg = parse({"training": {"report_to": ["tensorboard"]}})
    print(trl_args(PhaseRequest.make(cfg, "runs/demo", 1, "0123456789abcdef" * 2 + "01234567", "base", 60)))
