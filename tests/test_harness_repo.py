"""The harness git repo: candidates on branches, --no-ff promotion with trailers, notes, tags, kill recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer.harness.knobs import KnobsError, read_knobs
from evotrainer.harness.repo import HarnessRepo, parse_trailers


@pytest.fixture
def repo(tmp_path: Path) -> HarnessRepo:
    return HarnessRepo.create(tmp_path / "harness", "math")


def _candidate(repo: HarnessRepo, branch: str = "candidates/phase-1-1") -> str:
    text = repo.show_file("main", "harness.yaml").replace("temperature: 1.0", "temperature: 1.3")
    return repo.commit_candidate(branch, repo.sha("main"), {"harness.yaml": text}, "harness.yaml:temperature: up",
                                 "If temperature rises, dead groups fall.",
                                 {"Diagnosis": "d1-1 (signal/dead_groups)", "Variable": "harness.yaml:temperature",
                                  "Expected": "dead_group_ratio down", "Backtest": "pending"})


def test_seed_harness_is_one_commit_on_main_with_valid_knobs(repo: HarnessRepo):
    assert [c.summary for c in repo.repo.iter_commits("main")] == ["Seed harness (math)"]
    knobs = read_knobs(repo.path)
    assert knobs.group_size >= 2 and knobs.reward_weights == {"correct": 1.0}
    for name in ("harness.yaml", "prompt.py", "rewards.py", "filters.py", "curriculum.py", "diagnostics.py"):
        assert (repo.path / name).is_file()
    assert not (repo.path / "verify.py").exists()  # the verifier is evaluator-owned, never in the harness


def test_candidate_lives_on_its_branch_and_main_is_untouched(repo: HarnessRepo):
    main = repo.sha("main")
    sha = _candidate(repo)
    assert repo.sha("main") == main and repo.sha("candidates/phase-1-1") == sha
    assert "temperature: 1.3" in repo.diff(main, sha)
    trailers = parse_trailers(repo.message(sha))
    assert trailers["Variable"] == "harness.yaml:temperature"
    assert repo.repo.is_dirty(untracked_files=True) is False  # worktrees cleaned up


def test_promotion_is_a_no_ff_merge_with_trailers_and_is_idempotent(repo: HarnessRepo):
    sha = _candidate(repo)
    repo.add_note(sha, {"verdict": "promote", "reasons": ["all checks passed"]})
    new_main = repo.promote("candidates/phase-1-1", "Promote candidates/phase-1-1: temperature", "hypothesis",
                            {"Diagnosis": "d1-1", "Variable": "harness.yaml:temperature", "Expected": "down",
                             "Backtest": "promote: all checks passed"})
    merge = repo.repo.commit(new_main)
    assert len(merge.parents) == 2 and merge.parents[1].hexsha == sha
    assert parse_trailers(merge.message)["Backtest"] == "promote: all checks passed"
    assert repo.note(sha)["verdict"] == "promote"
    assert repo.promote("candidates/phase-1-1", "again", "", {}) == new_main  # resuming does not merge twice
    assert "temperature: 1.3" in (repo.path / "harness.yaml").read_text()


def test_recover_clears_what_a_kill_mid_merge_leaves(repo: HarnessRepo):
    _candidate(repo)
    main = repo.sha("main")
    # simulate a kill in the middle of a merge: MERGE_HEAD set, index changed, a stale lock
    repo.repo.git.merge("--no-ff", "--no-commit", "candidates/phase-1-1")
    (Path(repo.repo.git_dir) / "index.lock").write_text("")
    repo.recover()
    assert repo.sha("main") == main
    assert not (Path(repo.repo.git_dir) / "MERGE_HEAD").exists()
    assert not repo.repo.is_dirty()


def test_a_kill_that_left_a_worktree_on_the_candidate_branch_does_not_block_the_rerun(repo: HarnessRepo,
                                                                                    tmp_path: Path):
    # what a kill inside an older commit_candidate left: the branch checked out in a temporary worktree
    stale = tmp_path / "evo-wt-killed" / "harness"
    repo.repo.git.worktree("add", "-b", "candidates/phase-1-1", str(stale), "main")
    repo.recover()
    sha = _candidate(repo)  # the engineer node re-run after the kill
    assert repo.sha("candidates/phase-1-1") == sha and not stale.exists()
    assert len(repo.repo.git.worktree("list", "--porcelain").split("worktree ")) == 2  # the main checkout only


def test_candidate_commits_touch_no_working_tree(repo: HarnessRepo):
    before = (repo.path / "harness.yaml").read_text()
    sha = _candidate(repo)
    assert (repo.path / "harness.yaml").read_text() == before and not repo.repo.is_dirty(untracked_files=True)
    assert repo.repo.commit(sha).parents[0].hexsha == repo.sha("main")
    assert repo.repo.commit(sha).author.name == "EvoTrainer"
    with pytest.raises(ValueError, match="changes nothing"):
        repo.commit_candidate("candidates/phase-1-9", repo.sha("main"), {"harness.yaml": before}, "s", "b", {})
    assert "candidates/phase-1-9" not in repo.repo.heads


def test_recover_keeps_what_a_person_left_in_the_checkout(repo: HarnessRepo):
    _candidate(repo)
    repo.repo.git.checkout("--detach", "candidates/phase-1-1")  # someone inspecting a candidate
    (repo.path / "notes.txt").write_text("my notes")
    (repo.path / "prompt.py").write_text("# my experiment\n")
    repo.recover()
    assert repo.repo.active_branch.name == "main" and not repo.repo.is_dirty(untracked_files=True)
    assert "evotrainer: uncommitted changes" in repo.repo.git.stash("list")
    assert "my notes" in repo.repo.git.show("stash@{0}^3:notes.txt")


def test_tags_mark_the_harness_of_each_phase(repo: HarnessRepo):
    repo.tag("phase-1", repo.sha("main"), "harness that trained phase 1")
    repo.tag("phase-1", repo.sha("main"), "again")  # idempotent on resume
    assert repo.tags() == {"phase-1": repo.sha("main")}


def test_broken_knobs_give_a_readable_error(repo: HarnessRepo, tmp_path: Path):
    dest = repo.export("main", tmp_path / "x")
    (dest / "harness.yaml").write_text((dest / "harness.yaml").read_text().replace("group_size: 8", "group_size: 1"))
    with pytest.raises(KnobsError, match="group_size"):
        read_knobs(dest)


def test_a_promotion_is_rolled_back_by_a_new_commit(tmp_path):
    """A promoted edit whose realized effect was a loss is undone on main without rewriting history."""
    from evotrainer.harness.repo import HarnessRepo, parse_trailers

    repo = HarnessRepo.create(tmp_path / "h", "math")
    before = repo.sha("main")
    text = repo.show_file("main", "harness.yaml").replace("temperature: 1.0 ", "temperature: 1.3 ")
    repo.commit_candidate("candidates/phase-1-1", before, {"harness.yaml": text}, "temperature", "b", {})
    merge = repo.promote("candidates/phase-1-1", "Promote", "body", {"Variable": "harness.yaml:temperature"})
    reverted = repo.revert(merge, "Roll back candidates/phase-1-1", "lost 5 points", {"Reason": "loss"})
    assert repo.repo.commit(reverted).tree == repo.repo.commit(before).tree  # the edit is gone from main
    assert repo.repo.is_ancestor(merge, reverted)  # history kept: the merge is still there
    assert parse_trailers(repo.message(reverted))["Reverts"] == merge
    assert repo.revert(merge, "again", "", {}) == reverted  # idempotent after a kill


def _promote_line(repo: HarnessRepo, branch: str, old: str, new: str) -> str:
    """Commit one harness.yaml line change on ``branch`` from main and merge it; main's new sha."""
    text = repo.show_file("main", "harness.yaml")
    assert old in text
    repo.commit_candidate(branch, repo.sha("main"), {"harness.yaml": text.replace(old, new)}, branch, "b", {})
    return repo.promote(branch, f"Promote {branch}", "body", {})


def test_a_rollback_git_cannot_apply_leaves_main_as_it_was_and_the_run_able_to_go_on(repo: HarnessRepo):
    """A later promotion changed the lines next to the edit being rolled back: the revert conflicts. Main is left
    as it was, the checkout clean, and the next git step (recover, promote) works: a resume is never stuck."""
    from evotrainer.harness.repo import RevertConflict

    a = _promote_line(repo, "candidates/phase-1-1", "temperature: 1.0 ", "temperature: 1.3 ")
    b = _promote_line(repo, "candidates/phase-2-1", "temperature: 1.3 ", "temperature: 0.9 ")  # the same line
    with pytest.raises(RevertConflict, match=r"git cannot take .* out of main: a later commit changed the same "
                                              r"lines \(harness.yaml\); main is left as it was"):
        repo.revert(a, "Roll back candidates/phase-1-1", "lost", {})
    assert repo.sha("main") == b and not repo.repo.is_dirty(untracked_files=True)
    repo.recover()
    assert _promote_line(repo, "candidates/phase-3-1", "group_size: 8", "group_size: 16") != b


def test_a_promotion_is_taken_out_of_whatever_main_became_for_its_counterfactual(repo: HarnessRepo):
    """The counterfactual of edit B trains what the phase trained without B: after B's merge, main rolled back an
    earlier edit A, so B's merge parent (which holds A) is not it; reverting B on the trained harness is."""
    seed = repo.sha("main")
    a = _promote_line(repo, "candidates/phase-1-1", "temperature: 1.0 ", "temperature: 1.3 ")
    b = _promote_line(repo, "candidates/phase-2-1", "weight_decay: 0.0 ", "weight_decay: 0.01 ")
    trained = repo.revert(a, "Roll back candidates/phase-1-1", "lost", {})  # main = B without A
    without = repo.taken_out(b, trained)
    assert repo.repo.commit(without).tree == repo.repo.commit(seed).tree  # neither A (rolled back) nor B
    assert repo.taken_out(b, trained) == without  # the same commit on a re-run: the trainer reuses its job
    assert repo.sha("main") == trained and not repo.repo.is_dirty(untracked_files=True)
    assert repo.taken_out(b, b) == repo.repo.commit(b).parents[0].hexsha  # main unchanged since: the merge parent
    c = _promote_line(repo, "candidates/phase-3-1", "weight_decay: 0.01 ", "weight_decay: 0.1 ")
    assert repo.taken_out(b, c) is None  # git cannot take B out under C's change of the same line


def test_show_file_keeps_the_final_newline_so_edits_keep_it_too(repo: HarnessRepo):
    from agents.playbook import find
    from evotrainer.harness.knobs import read_knobs

    text = repo.show_file("main", "filters.py")
    assert text == (repo.path / "filters.py").read_text() and text.endswith("\n")
    edits = find("math", "drop_zero_variance_groups").edit({"filters.py": text}, read_knobs(repo.path), {})
    sha = repo.commit_candidate("candidates/phase-1-9", repo.sha("main"), edits, "s", "b", {})
    assert repo.show_file(sha, "filters.py").endswith("\n")
    assert "No newline at end of file" not in repo.diff(repo.sha("main"), sha)


def test_the_harness_log_reads_the_phase_of_every_candidate_branch_keep_discard_s_too():
    from evotrainer.report.history import _phase_k

    branches = ["candidates/phase-2-kd", "candidates/phase-10-1", "candidates/phase-2-1", "candidates/phase-1-12"]
    assert sorted(branches, key=_phase_k) == ["candidates/phase-1-12", "candidates/phase-2-1",
                                              "candidates/phase-2-kd", "candidates/phase-10-1"]
    assert _phase_k("candidates/phase-3-kd")[0] == 3 and _phase_k("elsewhere") == (0, 0)


def test_a_seed_harness_that_says_it_is_dapo_s_recipe_has_clip_higher_and_overlong_shaping():
    """A harness is named for what it does: "DAPO's recipe" means all four techniques, so one that claims it must
    clip higher (epsilon_high > epsilon, acting with updates_per_batch > 1) and shape overlong answers."""
    from evotrainer.harness.knobs import read_knobs

    root = Path(__file__).resolve().parents[1] / "harness_repo"
    for folder in sorted(p for p in root.iterdir() if (p / "harness.yaml").is_file()):
        text = " ".join(f.read_text() for f in folder.rglob("*") if f.is_file() and f.suffix in {".py", ".yaml"})
        text += (root / "README.md").read_text().split(f"## {folder.name}", 1)[-1].split("\n## ", 1)[0]
        if "DAPO's recipe" in text or "DAPO recipe" in text:
            knobs = read_knobs(folder)
            assert knobs.updates_per_batch > 1 and knobs.epsilon_high > knobs.epsilon, folder.name
            assert "overlong" in (folder / "rewards.py").read_text(), folder.name


# --- seed variants: overlays of their base seed -------------------------------------------------------------------
from tests.conftest import ROOT  # noqa: E402

VARIANTS = sorted(p.parent.name for p in (ROOT / "harness_repo").glob("*/BASE"))


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_the_shipped_seed_variants_are_overlays():
    assert {"math_chat", "math_reference"} <= set(VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_seed_variant_is_its_base_with_only_its_own_differing_files_over_it(variant: str):
    """seed_dir builds a variant whole: the base seed's files, the variant's over them, BASE left out; the variant
    holds only files that differ from its base's (no duplicate of the base), and the whole is a working harness (the
    harness API, its own self-tests passing)."""
    from evotrainer.harness.repo import BASE, seed_dir
    from sandbox import run_selftest
    from tests.test_harness_api import check_seed_api

    folder = ROOT / "harness_repo" / variant
    base = _tree(seed_dir("math", (folder / BASE).read_text().strip()))
    own = {rel: data for rel, data in _tree(folder).items() if rel != BASE}
    built_dir = seed_dir("math", variant)
    built = _tree(built_dir)
    assert own and built == {**base, **own} and BASE not in built
    assert not [rel for rel, data in own.items() if base.get(rel) == data], "a variant file equal to its base's"
    assert seed_dir("math", variant) == built_dir and seed_dir("math", str(folder)) == built_dir  # by name or path
    check_seed_api(built_dir)
    result = run_selftest(built_dir)
    assert result["n"] > 0 and not result["failed"], result["failed"]


def test_a_variant_s_folder_is_rebuilt_when_its_files_change(tmp_path: Path):
    from evotrainer.harness.repo import BASE, seed_dir

    variant = tmp_path / "mine"
    variant.mkdir()
    (variant / BASE).write_text("math\n")
    (variant / "filters.py").write_text("def keep_rollout(rollout):\n    return True\n\n\n"
                                        "def keep_group(group):\n    return len(group) > 1\n")
    first = seed_dir("math", str(variant))
    assert (first / "filters.py").read_text() == (variant / "filters.py").read_text()
    assert (first / "rewards.py").read_bytes() == (seed_dir("math") / "rewards.py").read_bytes()
    (variant / "filters.py").write_text((variant / "filters.py").read_text().replace("> 1", "> 2"))
    second = seed_dir("math", str(variant))
    assert second != first and "> 2" in (second / "filters.py").read_text()
    (variant / BASE).write_text("mine\n")
    with pytest.raises(FileNotFoundError, match="names itself"):
        seed_dir("math", str(variant))
