"""The built-in agents on rollouts whose failure is known: each role's typed output is checked by hand.

Diagnostician finds the failure with evidence (value, interval, example rollouts); Critic confirms strong and
rejects thin evidence; Engineer turns a confirmed diagnosis into one single-variable commit on a candidate
branch; every playbook edit keeps the harness's own tests passing in the sandbox; Librarian counts outcomes once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agents.roles import EngineerContext, PhaseEvidence
from agents.critic import HeuristicCritic
from agents.diagnostician import HeuristicDiagnostician
from agents.engineer import HeuristicEngineer
from agents.playbook import find, for_domain
from evotrainer.contracts import BacktestReport, Candidate, Diagnosis, EvalResult, PhaseResult
from evotrainer.domains import get_domain
from evotrainer.harness.knobs import read_knobs
from evotrainer.harness.repo import HARNESS_FILES, HarnessRepo
from evotrainer.rollouts import level_history
from sandbox import run_selftest
from tests.conftest import SEED, rollouts


def _result(phase: int, accuracy: float) -> PhaseResult:
    return PhaseResult(phase=phase, harness_sha="0" * 40, steps=10, eval=EvalResult(accuracy=accuracy, n=300),
                       dev=EvalResult(accuracy=accuracy, n=300),
                       rollout_path="", checkpoint_path="", wall_time_s=1.0, tokens=100)


def _evidence(rows: list[dict], repo: HarnessRepo, accuracies=(0.3,)) -> PhaseEvidence:
    return PhaseEvidence(phase=len(accuracies), results=[_result(i + 1, a) for i, a in enumerate(accuracies)],
                         rollouts=rows, phases_in_view=[len(accuracies)], registry={},
                         knobs=read_knobs(repo.path), domain=get_domain("math"))


@pytest.fixture
def repo(tmp_path: Path) -> HarnessRepo:
    return HarnessRepo.create(tmp_path / "harness", "math")


def dead_rows() -> list[dict]:
    """60 groups, 45 of them all-wrong (no reward spread): a dead-group problem beyond doubt."""
    return rollouts([[("9", True), ("1", False)] * 4 if g % 4 == 0 else [("1", False)] * 8 for g in range(60)])


def test_diagnostician_finds_dead_groups_with_evidence(repo):
    found = {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(_evidence(dead_rows(), repo))}
    d = found["dead_groups"]
    ev = d.evidence[0]
    assert ev.value == pytest.approx(0.75) and ev.low < 0.75 < ev.high and ev.n == 60
    assert d.layer == "signal" and d.rollout_ids and d.id
    assert "75%" in d.statement


def test_diagnostician_stays_quiet_on_a_healthy_phase(repo):
    healthy = rollouts([[("9", True), ("1", False)] * 4 for _ in range(60)])
    assert HeuristicDiagnostician().diagnose(_evidence(healthy, repo)) == []


def test_diagnostician_flags_truncation_and_format_failures(repo):
    rows = rollouts([[("9", True), ("1+1+", False)] * 4 for _ in range(60)], truncated=True)
    found = {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(_evidence(rows, repo))}
    assert found["truncation"].evidence[0].value == 1.0
    assert found["format_failures"].evidence[0].value == pytest.approx(0.5)
    assert found["correct_but_truncated"].rollout_ids


@pytest.mark.parametrize("now, start, budget", [
    (6.0, None, 8),  # the dev completions end within 6 tokens: the smallest power of two holding them
    (4.0, 6.0, 8),  # training at the short budget taught the policy to stop early; the starting policy did not
    ("few", None, 4),  # under PERCENTILE_UNITS ended: no percentile, doubling alone
    ("censored", None, 4),  # the dev evaluation's own budget cut more than 1%: the ended ones understate
    (2.0, None, 4), (9000.0, None, 4096)])
def test_the_budget_move_fits_what_the_policy_writes_uncut_and_at_least_doubles(repo, now, start, budget):
    """The truncation diagnosis carries the 99th percentile of the dev evaluation's ended completions (measured at
    the evaluator's own budget), now and for the starting policy, the longer cited; the Engineer's budget move takes
    the smallest power of two that holds it, at least double the budget, at most ``MAX_BUDGET``."""
    from agents.diagnostician import UNCUT_LENGTH
    from agents.move_kit import set_yaml_scalar

    rows = rollouts([[("9", True), ("1+1+", False)] * 4 for _ in range(60)], truncated=True)
    ev = _evidence(rows, repo)
    ev.knobs = knobs = ev.knobs.model_copy(update={"max_completion_length": 2})
    files = {name: repo.show_file("main", name) for name in HARNESS_FILES}
    files["harness.yaml"] = set_yaml_scalar(files["harness.yaml"], "max_completion_length", "2")
    dev = ev.results[-1].dev
    dev.ended_length = {"p50": 3.0, "p99": 7.0, "n": 99 if now == "few" else 100, "budget": 16}
    if now == "censored":
        dev.truncated_rate = 0.02
    elif now != "few":
        dev.ended_length["p99"] = now
    if start is not None:
        ev.baseline = EvalResult(accuracy=0.0, n=300, ended_length={"p99": start, "n": 300, "budget": 16})
    cited = max((x for x in (now, start) if isinstance(x, float)), default=None)
    for mode in ("truncation", "correct_but_truncated"):
        d = {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(ev)}[mode]
        assert {e.name: e.value for e in d.evidence}.get(UNCUT_LENGTH) == cited
        assert ("and within 6 tokens for the starting policy (end" in d.statement) == (start is not None)
        assert ("cuts 2% of its completions now too" in d.statement) == (now == "censored")
        edited = find("math", "raise_max_completion_length").edit(files, knobs, {"diagnosis": d})["harness.yaml"]
        assert yaml.safe_load(edited)["max_completion_length"] == budget


def test_diagnostician_flags_accuracy_regression(repo):
    rows = rollouts([[("9", True), ("1", False)] * 4 for _ in range(60)])
    found = {d.failure_mode for d in HeuristicDiagnostician().diagnose(_evidence(rows, repo, (0.40, 0.25)))}
    assert "accuracy_regression" in found


def test_first_phase_is_judged_against_the_starting_policy(repo):
    rows = rollouts([[("9", True), ("1", False)] * 4 for _ in range(60)])
    ev = _evidence(rows, repo, (0.25,))
    ev.baseline = EvalResult(accuracy=0.40, n=300)
    found = {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(ev)}
    assert "the starting policy" in found["accuracy_regression"].statement
    ev.baseline = EvalResult(accuracy=0.27, n=300)  # a 2-point drop on 300 tasks is within sampling noise
    assert "accuracy_regression" not in {d.failure_mode for d in HeuristicDiagnostician().diagnose(ev)}


def test_what_the_rules_flag_and_an_llm_diagnostician_missed_still_reaches_the_critic(repo):
    """An LLM Diagnostician that answers nothing (SmolLM2 did: {"action": "answer"}) loses nothing the built-in rules
    see: their findings join its own, marked as the rules', and a built-in role's output is left as it is."""
    from types import SimpleNamespace

    from evotrainer.loop.diagnose import rules_beside

    ev = _evidence(dead_rows(), repo)
    builtin = HeuristicDiagnostician()
    silent = SimpleNamespace(builtin=builtin)
    found, missed = rules_beside(silent, ev, [])
    rules = builtin.diagnose(ev)
    assert [d.failure_mode for d in missed] == [d.failure_mode for d in rules] and found == missed
    assert missed[0].failure_mode == "dead_groups" and missed[0].source == "rules" and missed[0].id == "d1-1"
    assert "built-in rules" in missed[0].statement and missed[0].evidence[0].value == pytest.approx(0.75)
    own = rules[0].model_copy(update={"statement": "the model's own words"})
    found, missed = rules_beside(silent, ev, [own])
    assert found[0] == own and "dead_groups" not in [d.failure_mode for d in missed]  # named by the role: not again
    assert rules_beside(builtin, ev, []) == ([], [])  # the built-in role itself: nothing added


def test_critic_confirms_strong_and_rejects_thin_evidence(repo):
    strong = HeuristicDiagnostician().diagnose(_evidence(dead_rows(), repo))
    thin_rows = rollouts([[("1", False)] * 8 for _ in range(5)])
    thin = HeuristicDiagnostician().diagnose(_evidence(thin_rows, repo))
    thin = [d.model_copy(update={"id": d.id + "-thin"}) for d in thin]
    out = HeuristicCritic().critique(strong + thin, _evidence(dead_rows(), repo), rounds_left=0)
    status = {d.id: d.status for d in out.diagnoses}
    assert all(status[d.id] == "confirmed" for d in strong if d.failure_mode == "dead_groups")
    assert thin and all(status[d.id] == "rejected" for d in thin)
    assert all(d.critique for d in out.diagnoses)


def test_engineer_commits_single_variable_candidates_round_robin_up_to_its_limit(repo):
    """Up to max_candidates candidates a round, not one per diagnosis: the dead groups' first move, the diluted
    batch's (none applies without trials: its others need a training run), then the dead groups' next ones."""
    from evotrainer.judge import variables

    ev = _evidence(dead_rows(), repo)
    diagnoses = HeuristicCritic().critique(HeuristicDiagnostician().diagnose(ev), ev, 0).diagnoses
    main = repo.sha("main")
    ctx = EngineerContext(phase=1, round=1, repo=repo, base_sha=main, knobs=ev.knobs, domain="math",
                          level_stats=level_history(dead_rows()))
    cands = HeuristicEngineer().propose(diagnoses, ctx, {})
    assert [c.intervention for c in cands] == ["drop_zero_variance_groups", "partial_credit_reward",
                                               "reweight_curriculum"]
    assert repo.sha("main") == main
    for c in cands:
        assert c.branch.startswith("candidates/phase-1-") and repo.sha(c.branch) == c.sha
        assert c.hypothesis.startswith("If ") and variables.changed(repo, main, c.sha)
        assert not variables.uncovered(c.variable, variables.changed(repo, main, c.sha))  # one variable
        changed = repo.repo.git.diff("--name-only", main, c.sha).split()
        assert changed == c.files
        assert "Variable: " in repo.message(c.sha) and "Diagnosis: " in repo.message(c.sha)
    # (after the branches are read: proposing again rewrites the same branch names, in another second another sha)
    assert len(HeuristicEngineer(max_candidates=2).propose(diagnoses, ctx, {})) == 2
    # a second round does not repeat an intervention already tried
    again = HeuristicEngineer().propose(diagnoses, EngineerContext(
        phase=1, round=2, repo=repo, base_sha=main, knobs=ev.knobs, domain="math",
        tried=[c.intervention for c in cands], level_stats=level_history(dead_rows())), {})
    assert not {c.intervention for c in again} & {c.intervention for c in cands}
    # a later phase on the same main retries neither an edit that changed no update nor one that lost its trial
    def next_phase(**memory):
        return {c.intervention for c in HeuristicEngineer().propose(diagnoses, EngineerContext(
            phase=2, round=1, repo=repo, base_sha=main, knobs=ev.knobs, domain="math",
            level_stats=level_history(dead_rows()), **memory), {})}

    first = {c.intervention for c in cands}
    assert next_phase() == first  # nothing remembered: the same edits again
    assert not next_phase(no_effect=sorted(first)) & first and not next_phase(trial_lost=sorted(first)) & first


@pytest.mark.parametrize("intervention", [i for i in for_domain("math") if i.name != "undo"], ids=lambda i: i.name)
def test_every_playbook_edit_keeps_the_harness_tests_passing(intervention, tmp_path):
    """Each move on the harness where it applies (the seed, or tests/test_moves.py's busy harness that moves every
    layer off neutral), the edit written into it, passes the harness's own self-tests in the sandbox (undo, which
    only restores files a promotion changed: tests/test_moves.py)."""
    from tests.test_moves import applied

    found = applied(intervention)
    assert found, f"{intervention.name} applies nowhere"
    base, edits, _, _ = found
    dest = tmp_path / "edited"
    (dest / "tests").mkdir(parents=True)
    (dest / "tests" / "test_harness.py").write_text((SEED / "tests" / "test_harness.py").read_text())
    for name, text in {**base, **edits}.items():
        (dest / name).write_text(text)
    read_knobs(dest)
    if any(name.endswith(".py") for name in edits):  # a knob alone changes nothing the self-tests import
        result = run_selftest(dest)
        assert result["n"] > 0 and not result["failed"], result["failed"]


def test_librarian_counts_each_outcome_once(tmp_path):
    from agents.librarian import HeuristicLibrarian

    lib = HeuristicLibrarian(str(tmp_path / "skills"))
    cand = Candidate(branch="candidates/phase-1-1", base_sha="a" * 40, sha="b" * 40, diagnosis_id="d1-1",
                     intervention="raise_temperature", hypothesis="If ...", variable="harness.yaml:temperature",
                     target_metric="dead_group_ratio", direction="down", expected="down", rollback="revert")
    report = BacktestReport(branch=cand.branch, candidate_sha=cand.sha, base_sha=cand.base_sha,
                            target_metric="dead_group_ratio", checks=[], noise_floor=0.0, verdict="reject",
                            reasons=["pilot: no move"], runtime_s=1.0, rollouts=10, sandbox="process")
    diag = Diagnosis(id="d1-1", layer="signal", failure_mode="dead_groups", statement="75% of groups are dead",
                     severity=0.5, confidence=0.9)
    lib.record_outcome(cand, report, diag, "math")
    lib.record_outcome(cand, report, diag, "math")  # the librarian node re-run after a kill
    skill = lib.store.get("dead_groups:raise_temperature")
    assert (skill.uses, skill.wins) == (1, 0)
    assert [s.id for s in lib.retrieve(diag, "math")] == ["dead_groups:raise_temperature"]


def test_a_realized_win_says_whether_accuracy_moved_beyond_noise():
    from evotrainer.loop.effect import accuracy_note

    assert "within noise" in accuracy_note(True, 0.007, 0.07)  # the target moved; accuracy did not, measurably
    assert "beyond noise" in accuracy_note(True, 0.10, 0.07)
    assert accuracy_note(False, 0.10, 0.07) == ""


def test_reweighting_a_curriculum_gives_a_level_it_never_sampled_a_weight(repo):
    # Only one level was sampled (the others weigh 0) and most of its groups are dead. Rescaling the sampled level
    # alone would leave the same distribution (every task from it); the levels without evidence must come back.
    from evotrainer.harness.knobs import Knobs

    rows = [dict(r, difficulty="3") for r in dead_rows()]
    knobs = Knobs(**{**read_knobs(repo.path).model_dump(),
                     "curriculum_weights": {"1": 0.0, "2": 0.0, "3": 1.0, "4": 0.0}})
    reweight = next(i for i in for_domain("math") if i.name == "reweight_curriculum")
    from agents.move_kit import set_yaml_entry

    text = repo.show_file("main", "harness.yaml")
    for level, weight in knobs.curriculum_weights.items():
        text = set_yaml_entry(text, "curriculum_weights", level, str(weight))
    files = {"harness.yaml": text}
    edited = reweight.edit(files, knobs, {"level_stats": level_history(rows)})
    import yaml

    weights = yaml.safe_load(edited["harness.yaml"])["curriculum_weights"]
    assert 0 < weights["3"] < 1.0  # the sampled level, weighted by its share of groups with spread
    # the levels without evidence weigh as much as the best sampled one (none was sampled but level 3), not a
    # constant of the seed's
    assert {lv: weights[lv] for lv in ("1", "2", "4")} == {lv: weights["3"] for lv in ("1", "2", "4")}


@pytest.mark.parametrize("withheld", [True, False])
def test_a_curriculum_that_withholds_levels_is_repaired_before_shaping_the_dead_groups(repo, withheld):
    """Dead groups on the only levels the curriculum samples (two of four here, the others weigh 0): the cause is
    what the curriculum picks, so restoring the withheld levels is the Engineer's first answer to them, ahead of
    filters and partial credit that would only mask the symptom. With every level sampled the playbook's order
    stands."""
    from agents.move_kit import set_yaml_entry

    weights = {"1": 0.0, "2": 1.0, "3": 1.0, "4": 0.0} if withheld else {"1": 1.0, "2": 1.0, "3": 1.0, "4": 1.0}
    text = repo.show_file("main", "harness.yaml")
    for level, weight in weights.items():
        text = set_yaml_entry(text, "curriculum_weights", level, str(weight))
    if withheld:
        repo.commit_candidate("setup", repo.sha("main"), {"harness.yaml": text}, "weights", "why", {})
        repo.promote("setup", "weights", "why", {})
    rows = dead_rows() if not withheld else [dict(r, difficulty="2" if i % 16 < 8 else "3")
                                             for i, r in enumerate(dead_rows())]
    ev = _evidence(rows, repo)
    ev.knobs = ev.knobs.model_copy(update={"curriculum_weights": weights})
    found = HeuristicCritic().critique(HeuristicDiagnostician().diagnose(ev), ev, 0).diagnoses
    dead = [d for d in found if d.failure_mode == "dead_groups"]
    assert dead and dead[0].status == "confirmed"
    ctx = EngineerContext(phase=1, round=1, repo=repo, base_sha=repo.sha("main"), knobs=ev.knobs, domain="math",
                          level_stats=level_history(rows), pilot=True)
    cands = HeuristicEngineer().propose(dead, ctx, {})
    assert cands[0].intervention == ("reweight_curriculum" if withheld else "drop_zero_variance_groups")


def test_a_collapse_gets_a_learning_rate_jump_down_first_and_a_regression_a_step(repo):
    """The same Diagnostician rule; what the Engineer does first follows the size of the fall relative to where it
    fell from: a jump of a decade and a half down for a collapse (a step down next), a step of half a decade for a
    smaller regression (no jump). Neither is a tenth, which would undo a tenfold defect exactly."""
    def proposed(accuracies):
        ev = _evidence(rollouts([[("7", True), ("1", False)] * 4 for _ in range(8)]), repo, accuracies)
        ds = [d for d in HeuristicDiagnostician().diagnose(ev) if d.failure_mode == "accuracy_regression"]
        assert ds, accuracies
        ds[0].status = "confirmed"
        ctx = EngineerContext(phase=len(accuracies), round=1, repo=repo, base_sha=repo.sha("main"), knobs=ev.knobs,
                              domain="math", pilot=True)
        return [(c.intervention, read_knobs_at(repo, c.sha).learning_rate) for c in
                HeuristicEngineer().propose(ds[:1], ctx, {})][:2]

    def read_knobs_at(repo, sha):
        from evotrainer.harness.knobs import Knobs
        import yaml

        return Knobs(**yaml.safe_load(repo.show_file(sha, "harness.yaml")))

    lr = read_knobs(repo.path).learning_rate
    assert proposed((0.40, 0.05)) == [("jump_learning_rate_down", pytest.approx(lr / 10 ** 1.5, rel=1e-5)),
                                      ("lower_learning_rate", pytest.approx(lr / 10 ** 0.5, rel=1e-5))]  # fell 88%
    assert proposed((0.45, 0.35))[0] == ("lower_learning_rate", pytest.approx(lr / 10 ** 0.5, rel=1e-5))  # 22%
    assert "jump_learning_rate_down" not in [name for name, _ in proposed((0.45, 0.35))]


@pytest.mark.parametrize("case", ["overshoot", "overshoot_near_threshold", "learning", "steady", "short"])
def test_a_policy_growing_certain_without_reward_is_named_within_one_phase(repo, case):
    """An update that overshoots, seen inside one phase from the trainer's per-step log: the entropy falls by a
    fifth while the reward stays flat (the shape of a tenfold learning rate on a policy starting at 0%). Not when the
    reward rises with it (healthy sharpening), when nothing moves, or with too few steps to tell. The Engineer's first
    candidate answers it (the learning rate a jump of a decade and a half lower, since an overshoot's size says
    nothing about how far it overshoots; the step of half a decade is a later candidate) before the dead groups'
    shaping, though the dead groups are more severe: every signal of the next phase is measured on what the step
    does."""
    import random

    rng = random.Random(0)
    steps = 7 if case == "short" else 60
    fall = {"steady": 0.0, "overshoot_near_threshold": 0.16}.get(case, 0.22)
    entropy = [0.69 * (1 - fall * i / (steps - 1)) + rng.gauss(0, 0.02) for i in range(steps)]
    rise = 0.15 if case == "learning" else 0.0
    reward = [0.06 + rise * i / (steps - 1) + rng.gauss(0, 0.02) for i in range(steps)]
    ev = _evidence(dead_rows(), repo)
    ev.current.trajectory = {"entropy": entropy, "reward": reward}
    found = {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(ev)}
    if not case.startswith("overshoot"):
        assert "entropy_collapse" not in found
        return
    d = found["entropy_collapse"]
    assert d.evidence[0].value > 0.10 and d.evidence[0].low > 0 and d.confidence == 0.9
    if case == "overshoot_near_threshold":  # a real fall whose interval reaches below the size guard is confirmed
        assert d.evidence[0].low < 0.10
        assert [x.status for x in HeuristicCritic().critique([d], ev, 0).diagnoses] == ["confirmed"]
        return
    assert d.evidence[1].name == "reward_shift" and d.evidence[1].low <= 0 <= d.evidence[1].high
    assert "entropy fell by" in d.statement and "did not rise" in d.statement
    critiqued = HeuristicCritic().critique(list(found.values()), ev, 0).diagnoses
    ctx = EngineerContext(phase=1, round=1, repo=repo, base_sha=repo.sha("main"), knobs=ev.knobs, domain="math",
                          level_stats=level_history(ev.rollouts), pilot=True)
    cands = HeuristicEngineer().propose(critiqued, ctx, {})
    assert cands[0].intervention == "jump_learning_rate_down"
    assert found["dead_groups"].severity * found["dead_groups"].confidence > d.severity * d.confidence  # not by size


@pytest.mark.parametrize("case", ["decline", "hack", "edited", "noise"])
def test_training_that_makes_the_policy_worse_is_named_without_an_accuracy_to_regress_from(repo, case):
    """The divergence of the fault bench (learning rate 10x, a policy starting at 0% dev accuracy): the share of
    verified-correct training rollouts fell 6.3% -> 4.8% over 15,360 completions a phase (seed 0), the reward with it.
    Not when the reward rose (a hack), an edit trained in between, or the fall is within noise; the Engineer answers
    with the learning rate a jump and a step lower (a decade and a half, half a decade), the trial to choose."""
    first, second = _result(1, 0.0), _result(2, 0.0)
    after = {"noise": 0.060}.get(case, 0.0477)
    first.train, first.completions = {"verified_rate": 0.0626, "reward_mean": 0.0626}, 15360
    second.train = {"verified_rate": after, "reward_mean": 0.30 if case == "hack" else after}
    second.completions = 15360
    if case == "edited":
        second.harness_sha = "1" * 40
    ev = _evidence(dead_rows(), repo)
    ev.results, ev.phase = [first, second], 2
    found = {d.failure_mode: d for d in HeuristicDiagnostician().diagnose(ev)}
    if case != "decline":
        assert "training_decline" not in found and "accuracy_regression" not in found
        return
    d = found["training_decline"]
    assert d.evidence[0].value == pytest.approx(0.0149) and d.evidence[0].low > 0 and d.evidence[0].n == 60
    assert "6.3%" in d.statement and "4.8%" in d.statement
    knobs = read_knobs(repo.path)
    files = {name: repo.show_file("main", name) for name in HARNESS_FILES}
    rates = {}
    for name in ("jump_learning_rate_down", "lower_learning_rate"):
        intervention = find("math", name)
        assert "training_decline" in intervention.answers
        edited = intervention.edit(files, knobs, {"diagnosis": d})["harness.yaml"]
        rates[name] = float(yaml.safe_load(edited)["learning_rate"])
    assert rates == {"jump_learning_rate_down": pytest.approx(knobs.learning_rate / 10 ** 1.5, rel=1e-5),
                     "lower_learning_rate": pytest.approx(knobs.learning_rate / 10 ** 0.5, rel=1e-5)}
