"""The realized effect's counterfactual through the real trainer service (``evotrainer/loop/effect.py``).

A promoted edit (a temperature knob) trains phase 2 for real; the counterfactual then trains the old main like that
phase (seed 0: the phase's own tasks and seeds) and, at a second seed, both the old and the new main again: the
pairs the realized effect is judged on, so its interval carries training's run-to-run noise.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from evotrainer.loop.effect import counterfactual, realized_effect
from evotrainer.rollouts import read_rollouts
from tests.backtest_world import make_run
from tests.test_backtest_step import promoted, runtime


@pytest.mark.slow
def test_the_counterfactual_trains_both_harnesses_again_at_every_further_seed(tmp_path: Path, policy_cache):
    from evotrainer.trainer.client import local_service

    os.environ["EVOTRAINER_CACHE"] = str(policy_cache)
    rd = make_run(tmp_path / "run", ["evolution.counterfactual_seeds=2"])
    rd.ensure_policy(log=lambda _: None)
    shutil.copytree(rd.policy_base, rd.checkpoint(1))  # phase 1's checkpoint: where phase 2 and its pilots start
    with local_service(rd.root, env={"EVOTRAINER_CACHE": str(policy_cache)}) as trainer:
        rt = runtime(rd, trainer)
        try:
            repo = rt.repo
            old_main = repo.sha("main")
            promo = promoted(repo, "hot", 1.6)
            new_main = promo.main_sha
            steps = rt.cfg.training.steps_per_phase
            after = trainer.run_phase(rt.request(2, new_main, steps))
            pairs = counterfactual(rt, promo, after)
            before = after.model_copy(update={"phase": 1, "harness_sha": old_main})
            effect = realized_effect(rt.evidence, promo, [before, after], pairs)
        finally:
            rt.close()

    assert len(pairs) == 2 and pairs[0][1] == after.dev  # seed 0: against the phase itself, on dev
    assert all(set(w.items) == set(e.items) == set(after.dev.items) for w, e in pairs)  # dev, paired
    pilots = rd.scratch / "pilots"
    runs = {p.name for p in pilots.glob("*.parquet")}
    assert runs == {f"phase-0002-{old_main[:10]}-r0.parquet", f"phase-0002-{old_main[:10]}-r1.parquet",
                    f"phase-0002-{new_main[:10]}-r1.parquet"}, runs
    tasks = {name: [r["task_id"] for r in read_rollouts(pilots / name)] for name in runs}
    phase_tasks = [r["task_id"] for r in read_rollouts(rd.rollout_file(2))]
    assert tasks[f"phase-0002-{old_main[:10]}-r0.parquet"] == phase_tasks  # the old main met what the edit met
    assert tasks[f"phase-0002-{old_main[:10]}-r1.parquet"] == tasks[f"phase-0002-{new_main[:10]}-r1.parquet"]
    assert tasks[f"phase-0002-{old_main[:10]}-r1.parquet"] != phase_tasks  # another seed: other draws
    assert effect["counterfactual"] and effect["seeds"] == 2 and "2 seeds each" in effect["summary"]
