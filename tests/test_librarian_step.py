"""The realized effect (``evotrainer/loop/effect.py``) and the Librarian's step after it (``loop/librarian.py``)
join the effect to what the run keeps: a loss beyond the counterfactual's margin is rolled back by a new commit on
main (history kept, the reason in a trailer) and counts as a use without a win; a gain beyond it is the skill's win;
within it, neither. Measured once, recorded once.

The run directory, harness repo, skill store (Chroma) and events log are real (``tests/backtest_world.py``, no
training); the counterfactual's held-out pairs are given, since training them is ``tests/test_counterfactual.py``'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evotrainer.contracts import EvalResult, PhaseResult
from evotrainer.loop import effect, librarian
from evotrainer.loop.state import RunState
from evotrainer.rollouts import write_rollouts
from tests.backtest_world import make_run, phase_rows
from tests.test_backtest_step import promoted, runtime
from tests.test_loop import _eval


def _result(phase: int, sha: str, ev: EvalResult) -> PhaseResult:
    return PhaseResult(phase=phase, harness_sha=sha, steps=6, eval=ev, dev=ev, rollout_path="", checkpoint_path="",
                       wall_time_s=1.0, tokens=10)


@pytest.mark.parametrize("with_edit, without, verdict", [
    (set(range(110)), set(range(150)), "lost"),  # 40 held-out tasks fewer with the edit: a loss beyond the margin
    (set(range(150)), set(range(110)), "won"),
    (set(range(0, 300, 2)), set(range(1, 300, 2)), "none"),  # as many gained as lost: no measurable effect
])
def test_the_realized_effect_decides_rollback_and_the_skill_s_win(tmp_path: Path, monkeypatch, with_edit, without,
                                                                   verdict):
    from evotrainer.contracts import Rollout

    rd = make_run(tmp_path / "run")
    write_rollouts([Rollout(**r) for r in phase_rows(rd, 2)], rd.rollout_file(2))
    rt = runtime(rd, trainer=None)
    try:
        repo = rt.repo
        seed_main = repo.sha("main")
        promo = promoted(repo, "warmer", 1.3).model_copy(update={"failure_mode": "dead_groups",
                                                                 "statement": "many groups are all wrong"})
        cand, merged = promo.candidate, promo.main_sha
        after = _result(2, merged, _eval(with_edit))
        asked = []

        def pairs(rt_, promo_, after_, starts_=None):
            asked.append((promo_.branch, after_.phase))
            return [(_eval(without), after_.eval)]  # (the old main from the same checkpoint, the phase itself)

        monkeypatch.setattr(effect, "counterfactual", pairs)
        state = RunState(phase=2, results=[_result(1, seed_main, _eval(set(range(120)))), after],
                         promotions=[promo], candidates=[cand])
        update = effect.step(rt, state)
        done = update["promotions"][0]
        # measured once: the step run again (a resumed node, or the waiting round) neither measures nor reverts again
        again = effect.step(rt, state.model_copy(update=update))["promotions"][0]
        for _ in range(2):  # recorded once: the Librarian's step run again counts no second use
            librarian.step(rt, state.model_copy(update=update))
        skill = rt.agents.librarian.store.get(f"dead_groups:{cand.intervention}")
        main = repo.repo.commit("main")
    finally:
        rt.close()

    assert asked == [(cand.branch, 2)] and again == done
    assert ("loss: rolled back" in done.effect) == (verdict == "lost") and done.effect
    assert json.loads(repo.repo.git.notes("--ref=effect", "show", cand.sha))["won"] == (verdict == "won")
    assert (skill.uses, skill.wins) == (1, int(verdict == "won"))  # a win only beyond the paired margin
    if verdict == "lost":
        assert done.reverted_sha == main.hexsha and main.parents[0].hexsha == merged  # a new commit, history kept
        assert main.message.startswith(f"Roll back {cand.branch}: harness.yaml:temperature")
        assert "Reason: dev accuracy -13.3% (95% CI" in main.message and f"Candidate: {cand.sha}" in main.message
        assert "temperature: 1.0 " in repo.show_file("main", "harness.yaml")  # the seed's value is back
        assert [e["kind"] for e in map(json.loads, rd.events_path.read_text().splitlines())].count("rolled_back") == 1
    else:
        assert not done.reverted_sha and main.hexsha == merged


@pytest.mark.parametrize("final_round", [False, True])
def test_after_the_last_phase_the_counterfactual_trains_only_when_a_phase_follows(tmp_path: Path, monkeypatch,
                                                                                   final_round):
    """Nothing trains on what a rollback after the run's last phase restores: no counterfactual is trained there
    (a phase again per seed, only to report) and the effect is the unpaired change, never a loss; with
    ``evolution.final_round`` (a round, so a phase, may follow) it is trained as after any other phase."""
    from evotrainer import config as C

    from evotrainer.contracts import Rollout

    rd = make_run(tmp_path / "run")
    write_rollouts([Rollout(**r) for r in phase_rows(rd, 2)], rd.rollout_file(2))
    rt = runtime(rd, trainer=None)
    try:
        rt.cfg = C.apply_overrides(rt.cfg, ["phases=2", f"evolution.final_round={str(final_round).lower()}"])
        promo = promoted(rt.repo, "warmer", 1.3)
        asked = []
        monkeypatch.setattr(effect, "counterfactual", lambda rt_, p, after, starts=None: asked.append(p.branch) or
                            [(_eval(set(range(150))), after.eval)])
        state = RunState(phase=2, results=[_result(1, rt.repo.sha("main"), _eval(set(range(120)))),
                                           _result(2, promo.main_sha, _eval(set(range(110))))],
                         promotions=[promo], candidates=[promo.candidate])
        done = effect.step(rt, state)["promotions"][0]
    finally:
        rt.close()
    assert asked == ([promo.branch] if final_round else [])
    assert ("unpaired" in done.effect) != final_round and ("rolled back" in done.effect) == final_round


def test_the_phase_end_of_a_baseline_shows_no_realized_effect(tmp_path: Path):
    """keep/discard writes its verdict into ``Promotion.effect`` and no ``effect`` note: the phase's summary (the
    run's, after the Librarian) has no realized effect to show for it, rather than a note that is not there."""
    from evotrainer import config as C

    rd = make_run(tmp_path / "run")
    rt = runtime(rd, trainer=None)
    try:
        promo = promoted(rt.repo, "warmer", 1.3).model_copy(update={"effect": "kept: held-out accuracy 1% -> 2%"})
        state = RunState(phase=2, results=[_result(1, promo.main_sha, _eval(set(range(3)))),
                                           _result(2, promo.main_sha, _eval(set(range(6))))], promotions=[promo])
        rt.cfg = C.apply_overrides(rt.cfg, ["evolution.mode=keep_discard"])
        assert librarian.effects(rt, state) == []
        librarian.step(rt, state)  # records no effect for it either
    finally:
        rt.close()
