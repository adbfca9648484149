"""Configuration: defaults give the demo; bad input fails at start with one message naming key and allowed values."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evotrainer import config as C
from evotrainer.rundir import RunDir
from tests.conftest import SEED, cli


def test_defaults_are_the_embedded_demo():
    cfg = C.parse({})
    assert (cfg.domain, cfg.policy.model, cfg.trainer.url) == ("math", "tiny", None)
    assert all(cfg.agents.role(r).model == "heuristic"
               for r in ("diagnostician", "critic", "engineer", "backtester", "librarian"))
    assert cfg.skills.path is None  # skills live inside the run directory by default


def test_every_field_has_help_text():
    def walk(model):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no help text"
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, C.BaseModel):
                walk(ann)

    walk(C.Config)


def test_unknown_key_names_key_and_allowed_keys():
    with pytest.raises(C.ConfigError) as err:
        C.parse({"training": {"stepz_per_phase": 3}}, "cfg.yaml")
    msg = str(err.value)
    assert msg.startswith("cfg.yaml: training.stepz_per_phase: unknown key (allowed: ")
    assert "steps_per_phase" in msg and "\n" not in msg


@pytest.mark.parametrize("key", sorted(C.REMOVED))
def test_a_removed_key_says_it_was_removed_and_why(key: str):
    section, name = key.split(".")
    with pytest.raises(C.ConfigError) as err:
        C.parse({section: {name: 0.01}}, "old.yaml")
    msg = str(err.value)
    assert msg.startswith(f"old.yaml: {key}: removed (") and msg.endswith("; delete the key") and "\n" not in msg
    assert name not in C.Config.model_fields[section].annotation.model_fields  # removed, not merely renamed here


def test_bad_value_names_key_and_what_is_allowed():
    with pytest.raises(C.ConfigError) as err:
        C.parse({"sandbox": {"backend": "vm"}})
    assert "sandbox.backend" in str(err.value) and "'unshare'" in str(err.value) and "'vm'" in str(err.value)
    with pytest.raises(C.ConfigError, match=r"training\.steps_per_phase: .*greater than or equal to 1"):
        C.parse({"training": {"steps_per_phase": 0}})
    with pytest.raises(C.ConfigError, match=r"agents\.critic\.fallbacks: .*heuristic"):
        C.parse({"agents": {"critic": {"fallbacks": ["heuristic", "gpt-9"]}}})


def test_policy_model_accepts_a_hugging_face_id_or_path():
    assert C.parse({"policy": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}}).policy.model == "Qwen/Qwen2.5-0.5B-Instruct"


def test_policy_model_path_must_hold_a_checkpoint(tmp_path: Path, monkeypatch):
    from evotrainer.policy.build import resolve_model

    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_model("tiny") == "tiny"
    ckpt = tmp_path / "models" / "mine"
    ckpt.mkdir(parents=True)
    with pytest.raises(C.ConfigError, match="policy.model: .*holds no config.json"):
        resolve_model(str(ckpt))
    (ckpt / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert resolve_model("models/mine") == str(ckpt)  # relative paths become absolute
    for typo in ("./models/mne", "/models/mine", "models/mine/sub"):
        with pytest.raises(C.ConfigError, match="no such folder"):
            resolve_model(typo)


def test_overrides_parse_yaml_values_and_revalidate():
    cfg = C.apply_overrides(C.parse({}), ["training.steps_per_phase=7", "policy.lora=true"])
    assert cfg.training.steps_per_phase == 7 and cfg.policy.lora is True
    with pytest.raises(C.ConfigError, match="expected KEY=VALUE"):
        C.apply_overrides(cfg, ["training.steps_per_phase"])
    with pytest.raises(C.ConfigError, match="training.nope: unknown key"):
        C.apply_overrides(cfg, ["training.nope=1"])


def test_missing_and_malformed_files(tmp_path: Path):
    with pytest.raises(C.ConfigError, match="no such config file"):
        C.load(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("training: [1, 2\n")
    with pytest.raises(C.ConfigError, match=r"bad.yaml: not valid YAML: expected ',' or ']', but got '<stream end>' "
                                            r"\(line 2, column 1\)$"):
        C.load(bad)  # one line: the parser's problem and where
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(C.ConfigError, match="expected a mapping"):
        C.load(bad)


def test_round_trip_through_yaml(tmp_path: Path):
    cfg = C.apply_overrides(C.parse({}), ["phases=5", "skills.path=/shared/skills"])
    C.dump(cfg, tmp_path / "c.yaml")
    assert C.load(tmp_path / "c.yaml") == cfg


def test_cli_reports_one_readable_line_and_creates_nothing(tmp_path: Path, cli_env):
    run_dir = tmp_path / "run"
    proc = cli(["init", str(run_dir), "--set", "training.stepz=3"], cli_env, check=False)
    assert proc.returncode == 2
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "error: override: training.stepz: unknown key (allowed: steps_per_phase" in out
    assert "Traceback" not in out
    assert not run_dir.exists()
    proc = cli(["init", str(run_dir), "--set", "policy.model=./no/such/model"], cli_env, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and "error: policy.model: ./no/such/model: no such folder" in out
    assert "Traceback" not in out and not run_dir.exists()
    proc = cli(["run", str(tmp_path / "nowhere")], cli_env, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr
    assert "nowhere" in proc.stdout


def test_a_seed_harness_that_is_no_harness_is_one_line_at_init_and_leaves_nothing(tmp_path: Path, cli_env):
    """harness= names a folder that does not exist, or one without harness.yaml: one line however narrow the
    terminal, exit 2, no run directory and no staging folder (it was a 56-line traceback)."""
    run_dir = tmp_path / "run"
    (tmp_path / "empty").mkdir()
    env = {**cli_env, "COLUMNS": "60"}
    for seed, said in [(tmp_path / "no" / "such", f"error: harness: no seed harness '{tmp_path / 'no' / 'such'}'"),
                       (tmp_path / "empty", f"error: harness: {tmp_path / 'empty'}: no harness.yaml")]:
        proc = cli(["init", str(run_dir), "--set", f"harness={seed}"], env, check=False)
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(said), proc.stdout + proc.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # no run_dir, no .run.init-*
    # a harness folder is accepted and kept in config.yaml as an absolute path (it is read from there at init only)
    shutil.copytree(SEED, tmp_path / "mine")
    cli(["init", str(run_dir), "--set", f"harness={tmp_path / 'mine'}", "--set", "training.train_pool_size=400",
         "--set", "training.eval_size=40"], cli_env)
    assert RunDir(run_dir).load_config().harness == str((tmp_path / "mine").resolve())


def test_a_killed_init_leaves_nothing_half_made(tmp_path: Path, cli_env):
    import signal
    import subprocess
    import time

    from tests.conftest import EVOTRAINER

    run_dir = tmp_path / "run"
    proc = subprocess.Popen([*EVOTRAINER, "init", str(run_dir)], env=cli_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not list(tmp_path.glob(".run.init-*")) and time.time() < deadline:  # the build has started
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not run_dir.exists()  # nothing that looks like a run directory
    cli(["init", str(run_dir), "--set", "training.train_pool_size=400", "--set", "training.eval_size=40"], cli_env)
    assert (run_dir / "harness" / ".git").is_dir() and not list(tmp_path.glob(".run.init-*"))
