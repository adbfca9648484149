"""The harness git repository: seed, candidate commits with trailers, backtest notes, promotion.

Each run owns one repo at ``RUN_DIR/harness``. ``main`` is what trains; the tag ``phase-N`` marks the ``main``
commit that phase N trained on; every candidate edit lives on ``candidates/phase-N-k`` with a commit message
that carries its hypothesis and trailers (Diagnosis, Hypothesis, Variable, Target, Expected, Rollback, Backtest); its
backtest report is a git note (``refs/notes/backtest``) and, once the next phase has trained, its realized
effect is another (``refs/notes/effect``). Rejected branches are kept as negative evidence. ``git log`` inside
the repo is readable on its own.

Only this class moves ``main``, and only forward: :meth:`HarnessRepo.promote` merges with ``--no-ff``,
:meth:`HarnessRepo.revert` undoes a promotion and :meth:`HarnessRepo.restore` brings back an earlier harness, each
by a new commit and each safe to re-run after a kill (a half-done merge is aborted first; an already-merged branch is
not merged twice, a revert or restore already made is not made again). Code elsewhere uses these methods, never
GitPython on the repo.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import git

from evotrainer.harness.files import MAX_FILE_BYTES, check_tree, export_tree, tree_problems
from evotrainer.harness.knobs import Knobs, KnobsError, parse_knobs

BOT = git.Actor("EvoTrainer", "evotrainer@localhost")
_BOT_ENV = {"GIT_AUTHOR_NAME": BOT.name, "GIT_AUTHOR_EMAIL": BOT.email,
            "GIT_COMMITTER_NAME": BOT.name, "GIT_COMMITTER_EMAIL": BOT.email}
HARNESS_FILES = ["harness.yaml", "prompt.py", "rewards.py", "filters.py", "curriculum.py", "diagnostics.py"]


def shipped_roots() -> list[Path]:
    """Where the harness folders EvoTrainer ships live, in search order: the source checkout's harness_repo/, then
    the installed data files (the seeds here, the defect catalogue in ``evotrainer.harness.faults``)."""
    import sys

    return [Path(__file__).resolve().parents[2] / "harness_repo", Path(sys.prefix) / "share/evotrainer/harness_repo"]


BASE = "BASE"  # in a seed variant's folder: the name of the seed it is an overlay of (harness_repo/math_chat's: math)


def seed_dir(domain: str, harness: str | None = None) -> Path:
    """The seed harness: ``harness`` (a folder, or the name of one shipped in harness_repo/) or the domain's own,
    from the source checkout, else the installed data files. A seed variant (a folder with a ``BASE`` file: only the
    files that differ from the seed it names) is returned whole, built by :func:`_overlaid`."""
    if harness and Path(harness).expanduser().is_dir():
        path = Path(harness).expanduser().resolve()
        if not (path / "harness.yaml").is_file() and not (path / BASE).is_file():
            raise FileNotFoundError(f"{path}: no harness.yaml (not a harness folder)")
        return _overlaid(domain, path)
    from evotrainer.domains import spec  # a domain's seed folder is its registration's

    name = harness or spec(domain).seed
    for root in shipped_roots():
        folder = root / name
        if Path(name).name == name and ((folder / "harness.yaml").is_file() or (folder / BASE).is_file()):
            return _overlaid(domain, folder)  # a name, not a path under it
    raise FileNotFoundError(f"no seed harness {name!r} (a folder with harness.yaml, or one of harness_repo/)")


def _files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _overlaid(domain: str, folder: Path) -> Path:
    """``folder`` itself, or for a seed variant the seed its ``BASE`` names (itself found by :func:`seed_dir`, so a
    variant of a variant works) with the variant's files copied over it, the ``BASE`` file left out. Built once per
    content under the temporary directory (the files decide the folder, so it is a cache: an edited seed or variant
    builds a new one); another process building the same one at once is harmless."""
    if not (folder / BASE).is_file():
        return folder
    import hashlib
    import os

    base_name = (folder / BASE).read_text().strip()
    if base_name == folder.name:
        raise FileNotFoundError(f"{folder}: its {BASE} names itself")
    files = {**_files_of(seed_dir(domain, base_name)), **_files_of(folder)}
    files.pop(BASE)
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"evotrainer-seeds-{os.getuid() if hasattr(os, 'getuid') else 0}"
    dest = root / f"{folder.name}-{digest}"
    if not (dest / "harness.yaml").is_file():
        root.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(dir=root, prefix=f".{folder.name}-"))
        for rel, data in files.items():
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            (stage / rel).write_bytes(data)
        try:
            os.rename(stage, dest)
        except OSError:  # another process built it first: the same content
            shutil.rmtree(stage, ignore_errors=True)
    return dest


class RevertConflict(ValueError):
    """A promotion git cannot revert on main: a later commit changed the same lines."""


def format_message(subject: str, body: str, trailers: dict[str, str]) -> str:
    lines = [subject.strip(), ""]
    if body.strip():
        lines += [body.strip(), ""]
    lines += [f"{k}: {' '.join(str(v).split())}" for k, v in trailers.items() if v]
    return "\n".join(lines) + "\n"


def parse_trailers(message: str) -> dict[str, str]:
    last = message.strip().split("\n\n")[-1]
    out = {}
    for line in last.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.replace("-", "").isalnum():
            out[key] = value
    return out


TARGET = "Target"  # the trailer of a candidate's targeted metric and direction: "Target: kept_dead_ratio down"


def target_trailer(metric: str, direction: str) -> dict[str, str]:
    """The ``Target`` trailer of a candidate that targets ``metric`` in ``direction`` (up or down)."""
    return {TARGET: f"{metric} {direction}"}


def read_target(trailers: dict[str, str]) -> tuple[str, str] | None:
    """(metric, direction) from a ``Target`` trailer (:func:`target_trailer`), or None when the commit has none that
    reads (a commit from before the trailer, or a person's)."""
    metric, _, direction = trailers.get(TARGET, "").strip().rpartition(" ")
    return (metric.strip(), direction) if metric.strip() and direction in ("up", "down") else None


class Commit(NamedTuple):
    """What code outside this module reads of a commit."""
    sha: str
    message: str
    summary: str
    parents: list[str]
    tree: str


def _as_commit(c: git.Commit) -> Commit:
    return Commit(c.hexsha, c.message, c.summary, [p.hexsha for p in c.parents], c.tree.hexsha)


class HarnessRepo:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.repo = git.Repo(self.path)

    # --- creation --------------------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, domain: str, harness: str | None = None) -> "HarnessRepo":
        path = Path(path)
        shutil.copytree(seed_dir(domain, harness), path, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        repo = git.Repo.init(path, initial_branch="main")
        with repo.config_writer() as cw:
            cw.set_value("user", "name", BOT.name)
            cw.set_value("user", "email", BOT.email)
        (path / ".gitignore").write_text("__pycache__/\n*.pyc\n")
        repo.git.add(A=True)
        repo.git.commit(
            m=format_message(
                f"Seed harness ({domain})",
                "The plain first harness: correctness reward, knobs that let the policy learn, keep-all filters.",
                {},
            ),
            author=f"{BOT.name} <{BOT.email}>",
        )
        return cls(path)

    # --- reading ---------------------------------------------------------------------------------------------
    def sha(self, ref: str = "main") -> str:
        return self.repo.rev_parse(ref).hexsha

    def show_file(self, ref: str, name: str) -> str:
        """A file's text at ``ref``, byte for byte (GitPython would strip its final newline, and an edit built on
        that text would commit the file without one)."""
        return self.repo.git.show(f"{ref}:{name}", strip_newline_in_stdout=False)

    def files_before(self, merge_sha: str, names: list[str]) -> dict[str, str | None]:
        """``names`` as they were on main just before the merge commit ``merge_sha`` (None: not there yet): what
        undoing that merge restores."""
        parent = self.repo.commit(merge_sha).parents[0].hexsha
        return {name: self.read(parent, name) for name in names}

    def knobs(self, ref: str) -> Knobs:
        """harness.yaml at ``ref``, read with ``git show`` (no checkout) and validated."""
        try:
            text = self.show_file(ref, "harness.yaml")
        except git.GitCommandError:
            raise KnobsError("harness.yaml: missing") from None
        return parse_knobs(text)

    def message(self, ref: str) -> str:
        return self.repo.commit(ref).message

    def commit(self, ref: str) -> Commit:
        """The commit ``ref`` names (a branch, tag, sha or expression); ValueError (one line) when it names none."""
        try:
            c = self.repo.commit(ref)  # a tag is peeled to the commit it marks
        except (git.BadName, git.BadObject, git.GitCommandError, ValueError, KeyError, IndexError):
            raise ValueError(f"{ref!r} is not a branch, tag or commit of {self.path}") from None
        return _as_commit(c)

    def log(self, ref: str = "main", max_count: int = 50, first_parent: bool = False) -> list[Commit]:
        """The commits reachable from ``ref``, newest first (``first_parent``: main's own line, not the branches
        merged into it)."""
        return [_as_commit(c) for c in self.repo.iter_commits(ref, first_parent=first_parent, max_count=max_count)]

    def merge_base(self, a: str, b: str) -> str | None:
        bases = self.repo.merge_base(a, b)
        return bases[0].hexsha if bases else None

    def changed_files(self, base: str, ref: str) -> list[str]:
        """The paths the diff from ``base`` to ``ref`` touches (renames as a deletion and an addition)."""
        return self.repo.git.diff("--name-only", "--no-renames", base, ref).splitlines()

    def files(self, ref: str) -> list[str]:
        """Every file path in the tree of ``ref``."""
        return self.repo.git.ls_tree("-r", "--name-only", ref).split()

    def read(self, ref: str, name: str) -> str | None:
        """:meth:`show_file`, or None when ``ref`` has no such file."""
        try:
            return self.show_file(ref, name)
        except git.GitCommandError:
            return None

    def tree_problems(self, ref: str) -> list[str]:
        """What breaks the rules of a harness tree at ``ref`` (links, oversize files, too many files: ``files.py``)."""
        return tree_problems(self.repo, ref)

    def is_branch(self, name: str) -> bool:
        return name in {h.name for h in self.repo.heads}

    def branches(self, prefix: str = "candidates/") -> list[str]:
        return sorted(h.name for h in self.repo.heads if h.name.startswith(prefix))

    def diff(self, base: str | None, ref: str) -> str:
        """The diff from ``base`` to ``ref``; with no base, what the commit ``ref`` itself adds (a root commit)."""
        return self.repo.git.diff(base, ref) if base else self.repo.git.show(ref, format="")

    def note(self, sha: str, ref: str = "backtest") -> dict | None:
        try:
            return json.loads(self.repo.git.notes(f"--ref={ref}", "show", sha))
        except git.GitCommandError:
            return None

    def is_merged(self, branch: str, into: str = "main") -> bool:
        return self.repo.is_ancestor(self.sha(branch), self.sha(into))

    def tags(self) -> dict[str, str]:
        return {t.name: t.commit.hexsha for t in self.repo.tags}

    # --- worktrees -------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def worktree(self, ref: str, *, branch: str | None = None) -> Iterator[Path]:
        """Check ``ref`` out into a fresh temporary worktree (on a new ``branch`` when given); a tree with a link
        or an oversize file is never checked out (``HarnessTreeError``)."""
        check_tree(self.repo, ref)
        tmp = Path(tempfile.mkdtemp(prefix="evo-wt-"))
        wt = tmp / "harness"
        args = ["add", "-b", branch, str(wt), ref] if branch else ["add", "--detach", str(wt), ref]
        self.repo.git.worktree(*args)
        try:
            yield wt
        finally:
            with contextlib.suppress(git.GitCommandError):
                self.repo.git.worktree("remove", "--force", str(wt))
            shutil.rmtree(tmp, ignore_errors=True)
            self.repo.git.worktree("prune")

    def export(self, ref: str, dest: Path) -> Path:
        """Write the files of ``ref`` into ``dest`` (no git metadata): what the sandbox and trainer load. Only
        regular files within the size limits are written (``harness/files.py``: links and oversize files are left
        out, and the backtest's ``harness_tree`` check rejects a candidate that has them)."""
        export_tree(self.repo, ref, Path(dest))
        return Path(dest)

    # --- writing ---------------------------------------------------------------------------------------------
    def commit_candidate(self, branch: str, base: str, edits: dict[str, str], subject: str, body: str,
                         trailers: dict[str, str]) -> str:
        """Create ``branch`` at ``base`` with ``edits`` (path -> new text) in one commit; return its sha.

        Built with git plumbing (a temporary index, ``commit-tree``, ``update-ref``): no working tree is touched,
        and the branch appears, or moves, in one atomic step, so a kill at any moment leaves either the old
        branch or the new one. Re-running with the same branch (after a kill) replaces the earlier attempt.
        """
        g = self.repo.git
        with tempfile.TemporaryDirectory(prefix="evo-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            g.read_tree(base, env=env)
            for i, (rel, text) in enumerate(sorted(edits.items())):
                if len(text.encode("utf-8", "replace")) > MAX_FILE_BYTES:
                    raise ValueError(f"{branch}: {rel} is over the {MAX_FILE_BYTES}-byte limit of a harness file")
                staged = Path(tmp) / f"blob-{i}"
                staged.write_text(text)
                blob = g.hash_object("-w", str(staged))
                g.update_index("--add", "--cacheinfo", f"100644,{blob},{rel}", env=env)
            tree = g.write_tree(env=env)
            if tree == self.repo.commit(base).tree.hexsha:
                raise ValueError(f"{branch}: the edit changes nothing")
            message = Path(tmp) / "message"
            message.write_text(format_message(subject, body, trailers))
            sha = g.commit_tree(tree, "-p", base, "-F", str(message))
        g.update_ref(f"refs/heads/{branch}", sha)
        return sha

    def add_note(self, sha: str, payload: dict[str, Any], ref: str = "backtest") -> None:
        self.repo.git.notes(f"--ref={ref}", "add", "-f", "-m", json.dumps(payload, indent=1, sort_keys=True), sha)

    def tag(self, name: str, ref: str, message: str) -> None:
        if name in self.tags():
            return
        self.repo.create_tag(name, ref=ref, message=message)

    def recover(self) -> None:
        """Undo what a kill can leave behind, losing nothing: a half-done merge, a stale index lock, worktrees of
        EvoTrainer's own left in temporary folders; make ``main`` the checked-out branch again. Uncommitted
        changes someone left in the checkout are stashed (``git stash list`` shows them), never thrown away.
        """
        gitdir = Path(self.repo.git_dir)
        lock = gitdir / "index.lock"
        if lock.exists():
            lock.unlink()
        if (gitdir / "MERGE_HEAD").exists():
            self.repo.git.merge("--abort")
        if (gitdir / "REVERT_HEAD").exists() or self.repo.git.ls_files("-u"):  # a revert that stopped on a conflict
            self.repo.git.reset("--merge")
        for line in self.repo.git.worktree("list", "--porcelain").splitlines():
            path = line.partition(" ")[2]
            if line.startswith("worktree ") and Path(path).parent.name.startswith("evo-wt-"):
                with contextlib.suppress(git.GitCommandError):
                    self.repo.git.worktree("remove", "--force", path)
        self.repo.git.worktree("prune")
        if self.repo.is_dirty(untracked_files=True):
            self.repo.git.stash("push", "--include-untracked", "-m",
                                "evotrainer: uncommitted changes found in the harness checkout at recovery")
        if self.repo.head.is_detached or self.repo.active_branch.name != "main":
            self.repo.git.checkout("main")
        self.repo.git.reset("--hard", "main")

    def revert(self, merge_sha: str, subject: str, body: str, trailers: dict[str, str]) -> str:
        """Undo a promotion by a new commit on ``main`` (never by rewriting history); idempotent. Returns the revert
        commit's sha (main's head when just made). Raises :class:`RevertConflict`, leaving main as it was, when a
        later commit changed the same lines."""
        self.recover()
        for commit in self.repo.iter_commits("main", max_count=50):
            if parse_trailers(commit.message).get("Reverts") == merge_sha:
                return commit.hexsha
        try:
            self.repo.git.revert("-m", "1", "--no-edit", "--no-commit", merge_sha)
        except git.GitCommandError as err:
            conflicted = sorted({line.split("\t")[-1] for line in self.repo.git.ls_files("-u").splitlines()})
            self.recover()
            files = ", ".join(conflicted) or "see git revert"
            raise RevertConflict(f"git cannot take {merge_sha[:8]} out of main: a later commit changed the same "
                                 f"lines ({files}); main is left as it was") from err
        self.repo.git.commit("-m", format_message(subject, body, {**trailers, "Reverts": merge_sha}),
                             author=f"{BOT.name} <{BOT.email}>")
        return self.sha("main")

    def taken_out(self, merge_sha: str, onto: str) -> str | None:
        """A commit (not on any branch; kept under ``refs/evotrainer/without/``) holding ``onto`` with the merge
        ``merge_sha`` reverted: what ``onto`` would be without that promotion, whatever came after it (a rollback
        of an earlier edit, a metric). ``onto`` itself when it is the merge; None when git cannot revert it there."""
        if onto == merge_sha:
            return self.repo.commit(merge_sha).parents[0].hexsha
        date = self.repo.commit(onto).committed_datetime.isoformat()  # the same commit again on a re-run
        with self.worktree(onto) as wt:
            g = git.Repo(wt).git
            try:
                g.revert("-m", "1", "--no-edit", merge_sha,
                         env={**_BOT_ENV, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
            except git.GitCommandError:
                return None
            sha = g.rev_parse("HEAD")
        self.repo.git.update_ref(f"refs/evotrainer/without/{merge_sha[:12]}-{onto[:12]}", sha)
        return sha

    def restore(self, to_sha: str, subject: str, body: str, trailers: dict[str, str]) -> str | None:
        """Make ``main`` hold the tree of ``to_sha`` again by one new commit on top of it (history kept; the
        commit carries ``Rollback-To: to_sha``); None when main already holds that tree (so a re-run after a kill
        commits nothing twice). Returns the new commit's sha. Built like a candidate (``commit-tree``, then
        ``update-ref`` guarded by the old main), so a kill leaves either the old main or the new one."""
        self.recover()
        main = self.sha("main")
        tree = self.repo.commit(to_sha).tree.hexsha
        if self.repo.commit(main).tree.hexsha == tree:
            return None
        g = self.repo.git
        with tempfile.TemporaryDirectory(prefix="evo-msg-") as tmp:
            message = Path(tmp) / "message"
            message.write_text(format_message(subject, body, {"Rollback-To": to_sha, **trailers}))
            sha = g.commit_tree(tree, "-p", main, "-F", str(message), env=_BOT_ENV)
        g.update_ref("refs/heads/main", sha, main)
        g.reset("--hard", "main")
        return sha

    def promote(self, branch: str, subject: str, body: str, trailers: dict[str, str]) -> str:
        """Merge ``branch`` into ``main`` with ``--no-ff`` (idempotent); return the new ``main`` sha."""
        self.recover()
        if self.is_merged(branch):
            return self.sha("main")
        self.repo.git.merge("--no-ff", "--no-edit", "-m", format_message(subject, body, trailers), branch)
        return self.sha("main")
