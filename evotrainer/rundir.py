"""The run directory: every file a run reads or writes, and how a fresh one is made (`evotrainer init`).

    RUN_DIR/
      config.yaml            resolved configuration
      harness/               git repo (main = promoted; candidates/*; tags phase-N; notes backtest/effect)
      evaluator/             the frozen held-out (held_out.jsonl) and dev (dev.jsonl) splits + verifier settings
      tasks/train.jsonl      RL pool the harness samples from
      tasks/warmup.jsonl     the tiny policy's supervised warm-up pool
      splits.json            the four disjoint splits' sizes per level, recorded at init (domains.base.SPLITS)
      policy/base/           starting checkpoint (the tiny policy, when policy.model is tiny)
      baseline.json          held-out and dev accuracy of the starting checkpoint ("phase 0"), measured once
      rollouts/phase-NNNN.parquet
      checkpoints/phase-NNNN/ model + result.json (PhaseResult)
      state.sqlite           LangGraph checkpoints (resume after a kill); with state.url, in Postgres instead
      run_id                 the run's identity: its thread in a shared Postgres
      skills/                Chroma store of the Librarian (unless skills.path points elsewhere)
      events.jsonl           audit trail
      status.json            what the run is doing now (state, phase, pid)
      trainer.json           the local trainer service (url, pid) while one runs
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from evotrainer import config as config_mod
from evotrainer.atomic import write_text
from evotrainer.config import Config, ConfigError
from evotrainer.contracts import EvalResult
from evotrainer.domains import get_domain
from evotrainer.domains.base import SPLITS, read_jsonl, write_jsonl
from evotrainer.events import EventLog


class RunDirError(ValueError):
    pass


def apply_mix(tasks: list[dict], mix: dict[str, float] | None) -> list[dict]:
    """``tasks`` with each difficulty level's share set to ``mix`` (relative weights; a level weighted 0 or not named
    is left out), keeping as many tasks as the mix allows; None keeps them all."""
    if not mix:
        return tasks
    by_level: dict[str, list[dict]] = {}
    for t in tasks:
        by_level.setdefault(t["difficulty"], []).append(t)
    weights = {lv: w for lv, w in mix.items() if w > 0 and lv in by_level}
    if not weights:
        raise ConfigError(f"tasks.mix: {mix} leaves no level of {sorted(by_level)}")
    total = sum(weights.values())
    scale = min(len(by_level[lv]) / (w / total) for lv, w in weights.items())  # the most tasks the mix allows
    return [t for lv, w in weights.items() for t in by_level[lv][: int(scale * w / total)]]


class RunDir:
    def __init__(self, root: Path | str):
        self.root = Path(root).resolve()

    # paths ----------------------------------------------------------------------------------------------------
    config_path = property(lambda self: self.root / "config.yaml")
    harness = property(lambda self: self.root / "harness")
    evaluator = property(lambda self: self.root / "evaluator")
    splits_path = property(lambda self: self.root / "splits.json")
    rollouts = property(lambda self: self.root / "rollouts")
    checkpoints = property(lambda self: self.root / "checkpoints")
    state_db = property(lambda self: self.root / "state.sqlite")

    @property
    def run_id(self) -> str:
        """The run's identity (a UUID written once): its thread in a checkpoint store shared by many runs."""
        path = self.root / "run_id"
        if not path.is_file():
            import uuid

            write_text(path, uuid.uuid4().hex)
        return path.read_text().strip()
    events_path = property(lambda self: self.root / "events.jsonl")
    status_path = property(lambda self: self.root / "status.json")
    trainer_path = property(lambda self: self.root / "trainer.json")
    baseline_path = property(lambda self: self.root / "baseline.json")
    policy_base = property(lambda self: self.root / "policy" / "base")
    scratch = property(lambda self: self.root / "tmp")

    def split_path(self, split: str) -> Path:
        """Where a split's tasks are: the evaluator's folder for the two that score, tasks/ for the two that train."""
        return {"held_out": self.evaluator / "held_out.jsonl", "dev": self.evaluator / "dev.jsonl",
                "rl": self.root / "tasks" / "train.jsonl", "warmup": self.root / "tasks" / "warmup.jsonl"}[split]

    def rollout_file(self, phase: int) -> Path:
        return self.rollouts / f"phase-{phase:04d}.parquet"

    def checkpoint(self, phase: int) -> Path:
        return self.checkpoints / f"phase-{phase:04d}"

    def skills_path(self, cfg: Config) -> Path | str:
        """Where the skill library lives: a Chroma server's URL (``skills.url``), or a folder."""
        if cfg.skills.url:
            return cfg.skills.url
        return Path(cfg.skills.path).expanduser().resolve() if cfg.skills.path else self.root / "skills"

    def hidden_from_harness(self) -> list[str]:
        """What sandboxed harness code must never see: the whole run directory (held-out split, rollouts with
        ``verified``, checkpoints, the harness repo itself) and the skill library's folder (a server is out of
        reach anyway: the sandbox has no network)."""
        skills = self.skills_path(self.load_config())
        return [str(self.root)] + ([] if isinstance(skills, str) else [str(skills)])

    @property
    def events(self) -> EventLog:
        return EventLog(self.events_path)

    # lifecycle ------------------------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.config_path.is_file() and (self.harness / ".git").exists()

    def load_config(self) -> Config:
        if not self.exists():
            raise RunDirError(f"{self.root}: not a run directory (run `evotrainer init {self.root}` first)")
        return config_mod.load(self.config_path)

    def save_config(self, cfg: Config) -> None:
        config_mod.dump(cfg, self.config_path)

    def init(self, cfg: Config, log=print) -> None:
        """Make a fresh run directory. It is built in a hidden sibling folder and renamed into place, so a kill
        during ``init`` leaves either nothing or a complete run directory."""
        import shutil

        from evotrainer.harness.repo import HarnessRepo
        from evotrainer.policy.build import resolve_model

        if self.root.exists() and any(self.root.iterdir()):
            raise RunDirError(f"{self.root}: already exists and is not empty (choose a new directory)")
        cfg = cfg.model_copy(deep=True)
        cfg.policy.model = resolve_model(cfg.policy.model)  # a local folder is kept as an absolute path
        cfg.harness = _seed_harness(cfg)  # checked before anything is written; a folder kept as an absolute path
        _check_fault(cfg)
        self.root.parent.mkdir(parents=True, exist_ok=True)
        for stale in self.root.parent.glob(f".{self.root.name}.init-*"):  # left by a killed init
            shutil.rmtree(stale, ignore_errors=True)
        stage = RunDir(self.root.parent / f".{self.root.name}.init-{os.getpid()}")
        try:
            for d in (stage.rollouts, stage.checkpoints, stage.evaluator, stage.scratch):
                d.mkdir(parents=True, exist_ok=True)
            stage.save_config(cfg)
            domain = get_domain(cfg.domain)
            sizes = split_sizes(cfg)
            published = cfg.tasks.held_out  # a held-out set the domain publishes, in place of its generator's
            if published:
                sizes["held_out"] = 0
            log(f"generating {cfg.domain} tasks: " + ", ".join(f"{name} {n}" for name, n in sizes.items()))
            splits = {name: apply_mix(tasks, cfg.tasks.mix) for name, tasks in domain.splits(cfg.seed, sizes).items()}
            if published:
                try:
                    splits["held_out"] = domain.benchmark(published, cfg.seed, cfg.training.eval_size)
                except (ValueError, RuntimeError) as err:
                    raise ConfigError(f"tasks.held_out: {err}") from None
                log(f"held-out split: {len(splits['held_out'])} tasks of {published}")
            for name, tasks in splits.items():
                write_jsonl(stage.split_path(name), tasks)
            write_text(stage.splits_path, json.dumps({name: _per_level(tasks) for name, tasks in splits.items()},
                                                     indent=1))
            held_out = splits["held_out"]
            (stage.evaluator / "verifier.json").write_text(json.dumps(
                {"domain": cfg.domain, "prompt": "canonical", "max_new_tokens": cfg.training.eval_max_new_tokens,
                 "decoding": f"sampled pass@1, k={cfg.training.eval_samples}" if cfg.training.eval_samples else
                 "greedy", "n": len(held_out), "dev_n": len(splits["dev"])}, indent=1))
            if cfg.fault:  # the faulty seed: the clean one with the defect's overlay, built in scratch
                from evotrainer.harness.faults import materialize

                seed = materialize(cfg.domain, cfg.fault, stage.scratch / "seed")
                HarnessRepo.create(stage.harness, cfg.domain, str(seed))
                shutil.rmtree(seed)
            else:
                HarnessRepo.create(stage.harness, cfg.domain, cfg.harness)
            _note_eval_budget(cfg, stage.harness, log)
            pentest = _pentest_seed(cfg, stage.harness, log)
        except BaseException:  # a failed init leaves nothing behind (a killed one is swept by the next init)
            shutil.rmtree(stage.root, ignore_errors=True)
            raise
        os.rename(stage.root, self.root)  # also over an empty folder the user made
        self.events.emit("init", run=cfg.name, domain=cfg.domain, fault=cfg.fault, train_tasks=len(splits["rl"]),
                         eval_tasks=len(held_out), splits={name: len(tasks) for name, tasks in splits.items()})
        self.events.emit("pentest", harness="seed", **pentest)
        self.set_status("initialized", phase=0)

    def tasks(self, split: str) -> list[dict]:
        """A split's tasks (``SPLITS``). A run made before the dev and warm-up splits existed has none: one line."""
        path = self.split_path(split)
        if not path.is_file():
            raise RunDirError(f"{self.root}: no {split} split ({path.name}): this run was made by an older EvoTrainer "
                              f"without the four disjoint splits; start a new run with `evotrainer init`")
        return read_jsonl(path)

    def train_tasks(self) -> list[dict]:
        """The RL pool the harness samples from."""
        return self.tasks("rl")

    def harness_tasks(self) -> list[dict]:
        """The RL pool as harness code and the agents see it: each task through its domain's ``harness_task`` (no
        evaluator-only field). Replay, the backtest and the Diagnostician read these; training projects the same way
        (``trainer.hooks``, ``trainer.grpo``)."""
        domain = get_domain(self.load_config().domain)
        return [domain.harness_task(t) for t in self.train_tasks()]

    def eval_tasks(self) -> list[dict]:
        """The held-out split: it scores phases for the report and the bench, and no decision reads it."""
        return self.tasks("held_out")

    def dev_tasks(self) -> list[dict]:
        """The dev split: what every decision of the loop is scored on."""
        return self.tasks("dev")

    def probe_tasks(self, n: int) -> list[dict]:
        """The probe of A/B trials: ``n`` tasks of the dev split, the same every time (the whole split when it has
        fewer). Never training tasks (the warm-up's or RL's: a trial would score what the policy memorised), never
        held-out ones."""
        import random

        pool = self.dev_tasks()
        return random.Random(f"probe-{len(pool)}").sample(pool, min(n, len(pool)))

    def ensure_policy(self, log=print, progress=None) -> str:
        from evotrainer.policy.build import ensure_base_policy

        cfg = self.load_config()
        domain = get_domain(cfg.domain, cfg.executor)  # the warm-up's evaluation runs policy code under its limits
        return ensure_base_policy(cfg, self.root, self.tasks("warmup"), domain.canonical_prompt, log=log,
                                  progress=progress, near_miss=domain.near_miss, domain=domain)

    def baseline(self, checkpoint: str | None = None, split: str = "held_out") -> EvalResult | None:
        """The starting checkpoint's result on a split (held_out or dev; of ``checkpoint`` when given), if measured."""
        try:
            data = json.loads(self.baseline_path.read_text())
            if checkpoint is not None and data.get("checkpoint") != checkpoint:
                return None
            return EvalResult.model_validate(data[split])
        except (FileNotFoundError, json.JSONDecodeError, KeyError, ValueError):
            return None

    def save_baseline(self, checkpoint: str, results: dict[str, EvalResult]) -> None:
        """``results``: the starting checkpoint's score per split (held_out, dev)."""
        write_text(self.baseline_path, json.dumps(
            {"checkpoint": checkpoint, **{k: r.model_dump(mode="json") for k, r in results.items()}}, indent=1))

    # status ---------------------------------------------------------------------------------------------------
    def set_status(self, state: str, **fields) -> None:
        old = self.status(raw=True)
        if old.get("state") != state:  # a new state's explanation replaces the last one's
            old = {k: v for k, v in old.items() if k not in ("detail", "error")}
        data = {**old, "state": state, "pid": os.getpid(), "pid_started": _started(os.getpid()),
                "updated": time.time(), **fields}
        write_text(self.status_path, json.dumps(data, indent=1))

    def status(self, raw: bool = False) -> dict:
        try:
            data = json.loads(self.status_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        if not raw and data.get("state") == "running" and not _alive(data.get("pid"), data.get("pid_started")):
            data["state"] = "paused"
            data["detail"] = "the run process is gone (killed?); `evotrainer run` resumes where it stopped"
        return data


def split_sizes(cfg: Config) -> dict[str, int]:
    """How many tasks each split asks for (``SPLITS``): the warm-up's only for the tiny policy (a real model has
    none)."""
    sizes = {"held_out": cfg.training.eval_size, "dev": cfg.training.dev_size, "rl": cfg.training.train_pool_size,
             "warmup": cfg.policy.tiny.warmup_pool_size if cfg.policy.model == "tiny" else 0}
    assert set(sizes) == set(SPLITS)
    return sizes


def _per_level(tasks: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in tasks:
        counts[str(t["difficulty"])] = counts.get(str(t["difficulty"]), 0) + 1
    return {"total": len(tasks), **counts}


def _seed_harness(cfg: Config) -> str | None:
    """``cfg.harness`` checked: a folder as its absolute path, a name of harness_repo/ as it is; ConfigError in one
    line when it names neither (no such folder, or a folder without harness.yaml)."""
    from evotrainer.harness.repo import seed_dir

    try:
        path = seed_dir(cfg.domain, cfg.harness)
    except FileNotFoundError as err:
        raise ConfigError(f"harness: {err}") from None
    return str(path) if cfg.harness and Path(cfg.harness).expanduser().is_dir() else cfg.harness


def _note_eval_budget(cfg: Config, harness: Path, log) -> None:
    """One line when the seed harness lets training write longer completions than the evaluator scores: answers
    between the two budgets are cut, and scored wrong, on the held-out and dev splits (the chat seed trains at 24
    tokens, the evaluator's default budget is 16). A note, not an error: a user may want the shorter judge."""
    from evotrainer.harness.knobs import read_knobs

    train, judge = read_knobs(harness).max_completion_length, cfg.training.eval_max_new_tokens
    if train > judge:
        log(f"note: the harness trains with max_completion_length {train} and the evaluator scores with "
            f"training.eval_max_new_tokens {judge}: an answer longer than {judge} tokens is cut and scored wrong on "
            f"the held-out and dev splits (set training.eval_max_new_tokens to at least {train} to score it)")


def _pentest_seed(cfg: Config, harness: Path, log) -> dict:
    """The reward pentest (``judge.pentest``) of the seed harness: a warning line per null probe its reward pays (the
    run still starts: a user may mean it; the gate rejects any candidate edit whose reward does the same). Returns
    the figures for the run's ``pentest`` event; a reward the pentest could not score is a warning too."""
    from evotrainer.harness.knobs import KnobsError, read_knobs
    from evotrainer.judge.pentest import pentest
    from sandbox import HarnessError, HarnessWorker

    try:
        with HarnessWorker(harness, limits=cfg.sandbox.limits, backend=cfg.sandbox.backend,
                           image=cfg.sandbox.image) as worker:
            result = pentest(worker, read_knobs(harness), get_domain(cfg.domain, cfg.executor))
    except (HarnessError, KnobsError, ValueError) as err:
        log(f"warning: the reward pentest could not score the seed harness's reward: {err}")
        return {"passed": False, "error": str(err)}
    for probe in result.failed:
        log(f"warning: the seed harness's reward pays a completion that answers nothing ({probe}): it earns "
            f"{result.probes[probe]:+.3f} against a correct answer's {result.reference:+.3f} (reward pentest; the "
            "gate rejects any edit whose reward pays a probe the seed's does not)")
    return {"passed": result.passed, "reference": result.reference, "probes": result.probes, "failed": result.failed}


def _check_fault(cfg: Config) -> None:
    """``cfg.fault`` checked: a defect of the domain's own catalogue, planted in the domain's own seed; ConfigError in
    one line otherwise (an unknown name lists the known ones, another domain's defect names its domain)."""
    if not cfg.fault:
        return
    from evotrainer.harness.faults import check_domain
    from evotrainer.harness.repo import seed_dir

    try:
        check_domain(cfg.domain, cfg.fault)
    except ValueError as err:
        raise ConfigError(f"fault: {err}") from None
    if cfg.harness and seed_dir(cfg.domain, cfg.harness) != seed_dir(cfg.domain):
        raise ConfigError(f"fault: {cfg.fault!r} is planted in the {cfg.domain} seed harness, not in harness "
                          f"{cfg.harness!r} (leave harness empty, or leave fault empty)")


def _started(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _alive(pid, started: float | None = None) -> bool:
    """Whether the process that wrote the status still runs: the same pid, started at the same time (a pid
    reused by another process after a reboot or a container restart does not count), and not this process."""
    import psutil

    if not pid or int(pid) == os.getpid():
        return False
    try:
        proc = psutil.Process(int(pid))
        if started is not None and abs(proc.create_time() - started) > 1:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, ValueError):
        return False
    except psutil.AccessDenied:
        return True


__all__ = ["RunDir", "RunDirError", "ConfigError"]
