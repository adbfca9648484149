"""The skill library on a real Chroma folder with real MiniLM embeddings (evotrainer/skills.py).

The embedder is loaded once for the module; subprocess tests load their own, offline, with sockets disabled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import chromadb
from chromadb.config import Settings

from evotrainer.contracts import Skill
from evotrainer.skills import MiniLMEmbeddingFunction, SkillStore, embedder_load_seconds, load_embedder

REPO = Path(__file__).resolve().parents[1]

# Prepended to every subprocess script: any non-Unix socket connection fails, so the code must work offline.
NO_NETWORK = textwrap.dedent(
    """
    import socket

    _connect = socket.socket.connect

    def _guarded(self, address):
        if self.family == getattr(socket, "AF_UNIX", None):
            return _connect(self, address)
        raise OSError(f"network disabled in this test: {address!r}")

    socket.socket.connect = _guarded
    socket.socket.connect_ex = _guarded
    """
)


def make_skill(skill_id: str, **overrides: object) -> Skill:
    """A realistic skill from a small catalogue, keyed by id."""
    catalogue: dict[str, dict[str, object]] = {
        "drop-dead-groups": dict(
            trigger="Most GRPO groups get identical rewards for every completion, so their advantage is zero",
            failure_mode="dead_groups",
            intervention="Drop zero-variance groups in filters.keep_group (dynamic sampling)",
            expected_outcome="Every kept group carries a learning signal; dead-group ratio of trained batches -> 0",
            domains=["math"],
        ),
        "raise-max-length": dict(
            trigger="Many completions are cut off at max_completion_length before they reach an answer",
            failure_mode="truncation",
            intervention="Raise max_completion_length in harness.yaml from 256 to 512 tokens",
            expected_outcome="Truncated rate falls below 5% and verified accuracy of long problems rises",
        ),
        "mask-truncated": dict(
            trigger="Truncated completions receive negative advantage and teach the policy to stop early",
            failure_mode="truncation",
            intervention="Mask truncated completions out of the loss (truncation masking)",
            expected_outcome="Truncated rollouts stop contributing gradient; mean length stops collapsing",
            domains=["code"],
        ),
        "format-hack": dict(
            trigger="The format reward is paid for answer tags wrapped around a wrong answer (reward hacking)",
            failure_mode="reward_hack",
            intervention="Gate the format reward on a parseable answer and cut its weight to 0.1",
            expected_outcome="Reward-verified correlation rises; hacked completions score near zero",
        ),
    }
    fields = {**catalogue[skill_id], **overrides}
    fields.setdefault("validation", "backtest on 512 retained rollouts: passed every check")
    return Skill(id=skill_id, **fields)  # type: ignore[arg-type]


HF_FLAGS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@pytest.fixture(scope="module", autouse=True)
def hf_settings_before_load() -> dict[str, object]:
    """Load MiniLM once for the module (every later test embeds in milliseconds); return HF settings from before."""
    import huggingface_hub.constants as hub_constants

    before = {key: os.environ.get(key) for key in HF_FLAGS} | {"hub_flag": hub_constants.HF_HUB_OFFLINE}
    load_embedder()
    return before


@pytest.fixture()
def store(tmp_path: Path) -> SkillStore:
    skills = SkillStore(tmp_path / "skills")
    for skill_id in ("drop-dead-groups", "raise-max-length", "mask-truncated", "format-hack"):
        skills.add(make_skill(skill_id))
    return skills


def run_python(script: str, *args: str) -> subprocess.Popen[str]:
    """Start a fresh offline Python process running ``script`` (network guard first)."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_ENDPOINT": "http://127.0.0.1:9",  # a hub call, if any slipped through, would fail rather than hang
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen(
        [sys.executable, "-c", NO_NETWORK + textwrap.dedent(script), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stored(store: SkillStore, skill_id: str) -> tuple[dict, str]:
    """The raw metadata and document Chroma holds for a skill, read through a separate client."""
    with chromadb.PersistentClient(str(store.path), settings=Settings(anonymized_telemetry=False)) as client:
        collection = client.get_collection(store.collection_name, embedding_function=MiniLMEmbeddingFunction())
        raw = collection.get(ids=[skill_id], include=["metadatas", "documents"])
    return dict(raw["metadatas"][0]), raw["documents"][0]


def finish(process: subprocess.Popen[str], timeout: float = 300) -> dict:
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr[-4000:]
    return json.loads(stdout.strip().splitlines()[-1])


def test_embedder_loads_once_and_leaves_hugging_face_settings_as_they_were(
    hf_settings_before_load: dict[str, object],
) -> None:
    import huggingface_hub.constants as hub_constants

    assert load_embedder() is load_embedder()
    assert embedder_load_seconds() is not None
    vectors = MiniLMEmbeddingFunction()(["drop zero-variance groups", "raise max completion length"])
    assert len(vectors) == 2 and len(vectors[0]) == 384
    after = {key: os.environ.get(key) for key in HF_FLAGS} | {"hub_flag": hub_constants.HF_HUB_OFFLINE}
    assert after == hf_settings_before_load


def test_search_finds_the_semantically_closest_skill_first(store: SkillStore) -> None:
    results = store.search("many groups have zero reward variance, so nothing is learned from them", k=4)

    ids = [skill.id for skill, _ in results]
    assert ids[0] == "drop-dead-groups"
    assert ids.index("drop-dead-groups") < ids.index("raise-max-length")
    scores = [score for _, score in results]
    assert all(0.0 <= score <= 1.0 for score in scores)
    assert scores == sorted(scores, reverse=True)
    assert scores[0] > scores[-1]

    top, _ = store.search("completions get cut off before the final answer", k=1)[0]
    assert top.failure_mode == "truncation"


def test_search_respects_k_and_empty_store(store: SkillStore, tmp_path: Path) -> None:
    assert len(store.search("anything", k=2)) == 2
    assert store.search("anything", k=0) == []
    assert SkillStore(tmp_path / "empty").search("anything") == []


def test_failure_mode_filter(store: SkillStore) -> None:
    # The query is about dead groups, but only truncation skills may come back.
    results = store.search("many groups have zero reward variance", failure_mode="truncation", k=5)

    assert {skill.id for skill, _ in results} == {"raise-max-length", "mask-truncated"}
    assert store.search("many groups have zero reward variance", failure_mode="no_such_mode") == []


def test_domain_filter_keeps_listed_and_domain_free_skills(store: SkillStore) -> None:
    math_ids = {skill.id for skill, _ in store.search("truncated completions", domain="math", k=10)}
    code_ids = {skill.id for skill, _ in store.search("truncated completions", domain="code", k=10)}

    assert math_ids == {"drop-dead-groups", "raise-max-length", "format-hack"}
    assert code_ids == {"raise-max-length", "mask-truncated", "format-hack"}
    assert [s.id for s, _ in store.search("truncated", failure_mode="truncation", domain="math")] == [
        "raise-max-length"
    ]


def test_get_all_len_and_stored_metadata(store: SkillStore) -> None:
    assert len(store) == 4
    assert [skill.id for skill in store.all()] == sorted(
        ["drop-dead-groups", "raise-max-length", "mask-truncated", "format-hack"]
    )
    assert store.get("drop-dead-groups") == make_skill("drop-dead-groups")
    assert store.get("missing") is None

    metadata, document = stored(store, "drop-dead-groups")
    skill = make_skill("drop-dead-groups")
    assert metadata["failure_mode"] == "dead_groups"
    assert metadata["intervention"] == skill.intervention
    assert metadata["domains"] == "math"
    assert (metadata["uses"], metadata["wins"]) == (0, 0)
    assert Skill.model_validate_json(metadata["skill"]) == skill
    assert skill.trigger in document and skill.intervention in document and skill.expected_outcome in document


def test_upsert_with_same_id_replaces(store: SkillStore) -> None:
    replacement = make_skill(
        "raise-max-length",
        intervention="Raise max_completion_length from 256 to 1024 tokens",
        domains=["code"],
    )
    store.add(replacement)

    assert len(store) == 4
    assert store.get("raise-max-length") == replacement
    hits = store.search("raise max_completion_length to 1024", failure_mode="truncation", k=5)
    assert [skill.id for skill, _ in hits].count("raise-max-length") == 1
    assert "raise-max-length" not in {s.id for s, _ in store.search("truncation", domain="math", k=10)}


def test_record_use_updates_counts_and_evidence_and_persists(store: SkillStore) -> None:
    first = store.record_use("drop-dead-groups", won=True, evidence={"phase": 2, "dead_group_ratio": [0.6, 0.1]})
    second = store.record_use("drop-dead-groups", won=False, evidence={"phase": 3, "commit": "abc123"})

    assert (first.uses, first.wins) == (1, 1)
    assert (second.uses, second.wins) == (2, 1)
    assert second.evidence == [{"phase": 2, "dead_group_ratio": [0.6, 0.1]}, {"phase": 3, "commit": "abc123"}]

    reopened = SkillStore(store.path)
    assert reopened.get("drop-dead-groups") == second
    raw, _ = stored(reopened, "drop-dead-groups")
    assert (raw["uses"], raw["wins"]) == (2, 1)

    with pytest.raises(KeyError):
        store.record_use("missing", won=True, evidence={})


def test_persists_across_a_fresh_store_instance(store: SkillStore) -> None:
    reopened = SkillStore(str(store.path))

    assert len(reopened) == 4
    assert reopened.all() == store.all()
    assert reopened.search("zero reward variance in every group", k=1)[0][0].id == "drop-dead-groups"


@pytest.mark.slow  # fresh processes, each loading the embedding model: about 30 s
def test_fresh_offline_processes_read_and_update_one_store_concurrently(store: SkillStore) -> None:
    """Two new Python processes, sockets disabled and HF offline, reopen the folder this process wrote: each reads
    and searches it, then both update it at once; no write is lost (one subprocess batch keeps the file fast)."""
    store.record_use("format-hack", won=True, evidence={"phase": 4})
    script = """
        import json, os, sys
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        from evotrainer.contracts import Skill
        from evotrainer.skills import SkillStore
        path, tag = sys.argv[1], sys.argv[2]
        skills = SkillStore(path)
        hits = skills.search("groups where every completion gets the same reward", k=2)
        read = {"top": hits[0][0].id, "score": hits[0][1], "hack": skills.get("format-hack").model_dump(mode="json"),
                "ids": [s.id for s in skills.all()]}
        for i in range(10):
            skills.record_use("drop-dead-groups", won=i % 2 == 0, evidence={"by": tag, "i": i})
        skills.add(Skill(id=f"from-{tag}", trigger=f"trigger written by {tag}", failure_mode="shared",
                         intervention="none", expected_outcome="none", validation="none"))
        print(json.dumps(read))
    """
    before = [skill.id for skill in store.all()]
    workers = [run_python(script, str(store.path), tag) for tag in ("a", "b")]
    for worker in workers:
        read = finish(worker)
        assert read["top"] == "drop-dead-groups" and 0.0 < read["score"] <= 1.0
        assert Skill.model_validate(read["hack"]) == store.get("format-hack")
        assert set(before) <= set(read["ids"])

    skill = store.get("drop-dead-groups")
    assert skill is not None
    assert (skill.uses, skill.wins) == (20, 10)
    assert sorted((e["by"], e["i"]) for e in skill.evidence) == sorted((t, i) for t in "ab" for i in range(10))
    assert len(store) == 6
    assert {s.id for s, _ in store.search("trigger written", failure_mode="shared", k=5)} == {"from-a", "from-b"}


@pytest.fixture
def chroma_server(tmp_path: Path):
    """A real Chroma server process (``chroma run``) on a free loopback port, data in a temporary folder."""
    import shutil
    import time
    import urllib.request

    from tests.conftest import free_port

    exe = Path(sys.executable).parent / "chroma"
    if not exe.exists():
        exe = Path(shutil.which("chroma") or "chroma")
    port = free_port()
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    proc = subprocess.Popen([str(exe), "run", "--path", str(tmp_path / "server"), "--host", "127.0.0.1", "--port",
                             str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1)
                break
            except OSError:
                assert proc.poll() is None, "the chroma server exited at start"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow  # a real `chroma run` server and a fresh process: about 25 s
def test_a_shared_chroma_server_holds_one_library_for_several_processes(chroma_server: str, tmp_path: Path) -> None:
    """skills.url: this process writes through the server, a fresh process (network only to loopback) finds and
    updates the skills, this process sees the update; the report's reader reads it without writing."""
    from evotrainer.skills import stored_skills

    store = SkillStore(chroma_server)
    for skill_id in ("drop-dead-groups", "raise-max-length", "mask-truncated"):
        store.add(make_skill(skill_id))
    script = """
        import json, sys
        from evotrainer.skills import SkillStore
        skills = SkillStore(sys.argv[1])
        hit = skills.search("groups where every completion gets the same reward", k=1)[0][0].id
        skills.record_use(hit, won=True, evidence={"by": "second process"})
        print(json.dumps({"top": hit, "n": len(skills)}))
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), chroma_server], capture_output=True,
                          text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"top": "drop-dead-groups", "n": 3}
    skill = store.get("drop-dead-groups")
    assert (skill.uses, skill.wins, skill.evidence) == (1, 1, [{"by": "second process"}])
    assert [s.id for s in stored_skills(chroma_server)] == ["drop-dead-groups", "mask-truncated", "raise-max-length"]
    assert not (tmp_path / "skills").exists()  # nothing was written locally


def test_a_skills_url_with_no_server_is_one_readable_error() -> None:
    from tests.conftest import free_port

    port = free_port()  # a port nobody listens on
    with pytest.raises(ConnectionError, match=f"skills.url: no Chroma server answers at http://127.0.0.1:{port}"):
        SkillStore(f"http://127.0.0.1:{port}")
    with pytest.raises(ValueError, match="is not an http"):
        SkillStore("http://")
