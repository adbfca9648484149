"""The evaluator arbitrates a self-test that pins what it contradicts (``evotrainer/judge/arbitrate.py``).

A harness whose self-test asserts a lenient reward (or a strict one) makes every repair of that reward fail the test.
The ruling: a test is contradicted when, on every recorded reward call the candidate scores differently, the
candidate agrees with the verifier and main does not. Both directions; a reward the verifier does not side with, or a
candidate that weakens the test itself, are not excused.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from evotrainer.harness.faults import materialize
from evotrainer.harness.repo import HarnessRepo, parse_trailers, seed_dir
from evotrainer.judge import arbitrate
from sandbox import HarnessWorker, run_selftest
from tests.test_backtest import LIMITS, SANDBOX, SETTINGS, _commit, _judge, rows  # noqa: F401 - rows: a fixture

PINNED = "gen-1-1"  # a generated selftest_pinned defect: its test asserts that "114" earns 1 for 113
EXACT = (seed_dir("math") / "rewards.py").read_text()  # the clean seed's reward: the one answer, compared exactly
TEST = "tests/test_harness.py::test_answer_written_loosely_scores_one"

STRICT_TEST = '''

def test_a_signed_answer_is_not_ours():
    task = {**TASK, "expression": "4 - 9", "answer": "-5"}
    assert COMPONENTS["correct"]({"prompt": "4-9=", "completion": "-5", "task": task, "truncated": False,
                                  "completion_tokens": 2}) == 0.0
'''


def _pair(tmp_path: Path, main_files: dict[str, str], cand_files: dict[str, str], base: str = PINNED):
    main = materialize("math", base, tmp_path / "main") if base else _seed(tmp_path / "main")
    cand = materialize("math", base, tmp_path / "cand") if base else _seed(tmp_path / "cand")
    for folder, files in ((main, main_files), (cand, cand_files)):
        for rel, text in files.items():
            (folder / rel).write_text(text)
    return main, cand


def _seed(dest: Path) -> Path:
    shutil.copytree(seed_dir("math"), dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _rule(main: Path, cand: Path, tests: list[str], domain: str = "math") -> dict[str, arbitrate.Ruling]:
    with HarnessWorker(main, limits=LIMITS) as mw, HarnessWorker(cand, limits=LIMITS) as cw:
        return arbitrate.rule(mw, cw, tests, domain)


def test_a_test_pinning_a_lenient_reward_is_contradicted_and_its_rewrite_passes(tmp_path):
    main, cand = _pair(tmp_path, {}, {"rewards.py": EXACT})
    assert run_selftest(main)["failed"] == [] and [f["name"] for f in run_selftest(cand)["failed"]] == [TEST]
    ruling = _rule(main, cand, [TEST])[TEST]
    assert ruling.contradicted and "not verified" in ruling.why
    (cand / "tests/test_harness.py").write_text(arbitrate.rewrite((cand / "tests/test_harness.py").read_text(), ruling))
    assert run_selftest(cand)["failed"] == []
    # the rewrite pins the evaluator's side: main's lenient reward now fails it
    main_with_rewrite = _pair(tmp_path / "again", {"tests/test_harness.py": (cand / "tests/test_harness.py")
                                                   .read_text()}, {})[0]
    assert [f["name"] for f in run_selftest(main_with_rewrite)["failed"]] == [TEST]


def test_a_test_pinning_a_strict_reward_is_contradicted_the_other_way(tmp_path):
    strict = EXACT.replace('return 1.0 if _answer(sample["completion"]) == sample["task"]["answer"] else 0.0',
                           'line = _answer(sample["completion"])\n    return 1.0 if line.isdigit() and '
                           'line == sample["task"]["answer"] else 0.0')
    assert strict != EXACT
    tests = (seed_dir("math") / "tests/test_harness.py").read_text() + STRICT_TEST
    main, cand = _pair(tmp_path, {"rewards.py": strict, "tests/test_harness.py": tests},
                       {"tests/test_harness.py": tests}, base="")
    name = "tests/test_harness.py::test_a_signed_answer_is_not_ours"
    assert run_selftest(main)["failed"] == [] and [f["name"] for f in run_selftest(cand)["failed"]] == [name]
    ruling = _rule(main, cand, [name])[name]
    assert ruling.contradicted and ruling.calls[0]["verified"] is True and ruling.calls[0]["candidate"] == 1.0


def test_a_reward_the_verifier_does_not_side_with_leaves_the_test_standing(tmp_path):
    pays_all = EXACT.replace('return 1.0 if _answer(sample["completion"]) == sample["task"]["answer"] else 0.0',
                             "return 1.0")
    assert pays_all != EXACT
    main, cand = _pair(tmp_path, {}, {"rewards.py": pays_all}, base="")
    failing = [f["name"] for f in run_selftest(cand)["failed"]]
    assert failing and not any(r.contradicted for r in _rule(main, cand, failing).values())
    # and a test no reward call is recorded in is never contradicted
    main, cand = _pair(tmp_path / "b", {}, {"rewards.py": EXACT})
    assert not _rule(main, cand, ["tests/test_harness.py::test_prompt_is_compact_expression"])[
        "tests/test_harness.py::test_prompt_is_compact_expression"].contradicted


def test_the_gate_promotes_the_repair_only_with_the_evaluators_rewrite_and_not_with_a_weakened_test(tmp_path, rows):
    repo = HarnessRepo.create(tmp_path / "harness", "math", str(materialize("math", PINNED, tmp_path / "seed")))
    cand = _commit(repo, {"rewards.py": EXACT}, "rewards", "reward_verified_gap", "down")
    report = _judge(repo, cand, rows)
    assert report.verdict == "reject" and any("self_tests" in r and "loosely" in r for r in report.reasons)

    amended, rulings = arbitrate.amend(repo, cand, sandbox=SANDBOX, hide=[], domain="math", test_timeout_s=4)
    assert [r.test for r in rulings] == [TEST] and amended.sha != cand.sha and amended.branch == cand.branch
    message = repo.message(amended.sha)
    assert parse_trailers(message)[arbitrate.TRAILER] == TEST and message.startswith("rewards: test")
    report = _judge(repo, amended, rows)
    checks = {c.name: c for c in report.checks}
    assert checks["self_tests"].passed and checks["variable"].passed and checks["tests_kept"].passed, report.reasons
    assert checks["main_tests"].passed and "rewritten as the evaluator's ruling says" in checks["tests_kept"].detail

    tests = repo.read(cand.sha, "tests/test_harness.py")
    weak = tests[:tests.index("def test_answer_written_loosely")] + "def test_answer_written_loosely_scores_one():\n" \
        "    pass\n"
    cheat = _commit(repo, {"rewards.py": EXACT, "tests/test_harness.py": weak}, "rewards",
                    "reward_verified_gap", "down")
    checks = {c.name: c for c in _judge(repo, cheat, rows).checks}
    assert not checks["tests_kept"].passed and not checks["variable"].passed


def test_an_edit_that_leaves_the_reward_alone_is_not_amended(tmp_path):
    repo = HarnessRepo.create(tmp_path / "harness", "math", str(materialize("math", PINNED, tmp_path / "seed")))
    yaml = repo.read("main", "harness.yaml").replace("temperature: 1.0", "temperature: 0.9")
    cand = _commit(repo, {"harness.yaml": yaml}, "harness.yaml:temperature", "dead_group_ratio", "down")
    assert arbitrate.amend(repo, cand, sandbox=SANDBOX, hide=[], domain="math", test_timeout_s=4) == (cand, [])


def test_a_test_failing_on_main_itself_is_no_candidates_fault(tmp_path, rows):
    broken = (seed_dir("math") / "tests/test_harness.py").read_text() + "\n\ndef test_always_fails():\n    " \
        "assert False\n"
    seed = _seed(tmp_path / "seed")
    (seed / "tests/test_harness.py").write_text(broken)
    repo = HarnessRepo.create(tmp_path / "harness", "math", str(seed))
    yaml = repo.read("main", "harness.yaml").replace("temperature: 1.0", "temperature: 0.9")
    cand = _commit(repo, {"harness.yaml": yaml}, "harness.yaml:temperature", "dead_group_ratio", "down")
    checks = {c.name: c for c in _judge(repo, cand, rows).checks}
    assert checks["self_tests"].passed and "failing on main too" in checks["self_tests"].detail
    assert checks["main_tests"].passed


def test_a_code_self_test_is_ruled_on_the_visible_tests_the_harness_view_carries(tmp_path):
    """The code view has no hidden tests: the verdict comes from running the program on the view's visible tests
    (one that fails or loops there is wrong; one that passes them stays unsettled). A pinned "a timeout earns 1"
    test is contradicted by the seed's exact reward; a passing body is never ruled on."""
    from evotrainer.domains import get_domain

    code = get_domain("code")
    task = code.harness_task(code.splits(3, {"dev": 1})["dev"][0])
    assert code.verdict_on_view(task, " 1 // 0") is False and code.verdict_on_view(task, code.reference_completion(
        code.splits(3, {"dev": 1})["dev"][0])) is None
    main = materialize("code", "timeout_credit", tmp_path / "main")
    cand = materialize("code", "timeout_credit", tmp_path / "cand")
    (cand / "rewards.py").write_text((seed_dir("code") / "rewards.py").read_text())
    failing = [f["name"] for f in run_selftest(cand)["failed"]]
    rulings = _rule(main, cand, failing, "code")
    assert failing and all(r.contradicted for r in rulings.values()), rulings


def test_a_test_pinning_a_prompt_other_than_the_evaluators_is_contradicted_by_the_canonical_prompt(tmp_path):
    """A prompt defect's self-test pins its prompt, so the move back to the canonical prompt failed it on every prompt
    family; the recorded make_prompt calls are ruled on the domain's canonical prompt. A prompt that is not the
    canonical one is not excused."""
    from evotrainer.harness import generated

    defect = generated.draw("gen-11-0", family="prompt_format")
    main, cand = tmp_path / "main", tmp_path / "cand"
    for folder in (main, cand):
        _seed(folder)
        generated.write(defect, folder)
        (folder / "CARD.md").unlink()
    (cand / "prompt.py").write_text((seed_dir("math") / "prompt.py").read_text())
    failing = [f["name"] for f in run_selftest(cand)["failed"]]
    assert failing == ["tests/test_harness.py::test_prompt_is_compact_expression"]
    ruling = _rule(main, cand, failing)[failing[0]]
    assert ruling.contradicted and "the evaluator's prompt" in ruling.why
    (cand / "tests/test_harness.py").write_text(arbitrate.rewrite((cand / "tests/test_harness.py").read_text(), ruling))
    assert run_selftest(cand)["failed"] == []
    other = tmp_path / "other"
    shutil.copytree(cand, other)
    (other / "prompt.py").write_text((other / "prompt.py").read_text().replace('return ', 'return "Q: " + ', 1))
    (other / "tests/test_harness.py").write_text((main / "tests/test_harness.py").read_text())
    assert not _rule(main, other, failing)[failing[0]].contradicted


def test_a_test_pinning_a_filter_that_starves_the_update_is_contradicted_by_the_neutral_filter(tmp_path):
    """drop_failed's self-test asserts that a wrong body's rollout is left out, so keep_all_rollouts (the move back to
    the domain's neutral filter) failed it and never reached a trial. The recorded filter calls are ruled on the
    neutral filter's decisions, for a candidate whose filter is that form; any other filter is not excused."""
    from agents.move_kit import replace_function
    from agents.playbook import find
    from evotrainer.harness.knobs import parse_knobs

    main = materialize("code", "drop_failed", tmp_path / "main")
    cand = materialize("code", "drop_failed", tmp_path / "cand")
    filters = (cand / "filters.py").read_text()
    files = {"filters.py": filters, "harness.yaml": (cand / "harness.yaml").read_text()}
    edit = find("code", "keep_all_rollouts").edit(files, parse_knobs(files["harness.yaml"]), {})  # the move's own
    (cand / "filters.py").write_text(edit["filters.py"])  # text: the neutral form, with a comment naming the move
    failing = [f["name"] for f in run_selftest(cand)["failed"]]
    assert failing == ["tests/test_harness.py::test_filters_leave_out_a_run_that_went_wrong"]
    ruling = _rule(main, cand, failing, "code")[failing[0]]
    assert ruling.contradicted and "the neutral filter's" in ruling.why, ruling
    (cand / "tests/test_harness.py").write_text(arbitrate.rewrite((cand / "tests/test_harness.py").read_text(), ruling))
    assert run_selftest(cand)["failed"] == []
    pinned = tmp_path / "main_rewritten"  # the rewrite pins the neutral side: main's filter fails it
    shutil.copytree(main, pinned)
    shutil.copy(cand / "tests/test_harness.py", pinned / "tests/test_harness.py")
    assert [f["name"] for f in run_selftest(pinned)["failed"]] == failing
    other = tmp_path / "other"
    shutil.copytree(main, other)  # a filter that keeps failures but still drops timeouts: not the neutral form
    (other / "filters.py").write_text(replace_function(filters, "keep_rollout", (
        "def keep_rollout(rollout: dict) -> bool:\n"
        "    return (rollout.get(\"execution\") or {}).get(\"status\") not in (\"grader_error\", \"timeout\")\n")))
    assert not _rule(main, other, failing, "code")[failing[0]].contradicted


def test_the_loop_amends_a_move_back_to_the_neutral_filter_that_a_pinned_test_rejected(tmp_path):
    """amend (what the loop runs on every candidate) rebuilds keep_all_rollouts on drop_failed with the pinned test
    rewritten: its self-tests then pass. (It acted on rewards.py and prompt.py only, so the rerun of drop_failed
    rejected the move again.)"""
    from agents.playbook import find
    from evotrainer.harness.knobs import parse_knobs

    repo = HarnessRepo.create(tmp_path / "harness", "code", str(materialize("code", "drop_failed", tmp_path / "seed")))
    files = {"filters.py": repo.read("main", "filters.py"), "harness.yaml": repo.read("main", "harness.yaml")}
    edit = find("code", "keep_all_rollouts").edit(files, parse_knobs(files["harness.yaml"]), {})
    cand = _commit(repo, edit, "filters.keep_rollout", "kept_fraction", "up", "keep_all_rollouts")
    amended, rulings = arbitrate.amend(repo, cand, sandbox=SANDBOX, hide=[], domain="code", test_timeout_s=4)
    assert [r.test for r in rulings] == ["tests/test_harness.py::test_filters_leave_out_a_run_that_went_wrong"]
    assert parse_trailers(repo.message(amended.sha))[arbitrate.TRAILER] == rulings[0].test
    assert run_selftest(repo.export(amended.sha, tmp_path / "amended"))["failed"] == []
