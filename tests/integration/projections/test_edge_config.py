"""How an Edge shard stores its dense vectors: float16 for a new shard by default, and an
existing shard keeps the kind it was made with, whatever the store is opened with."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from processors.embedding import HashingEmbedder
from projections.episodic.candidates import CandidateSignals
from projections.episodic.edge import SHARD_DIR, EdgeEpisodicMemory
from projections.episodic.edge_config import StoredLayout, stored_layout, stored_size
from projections.interfaces import ProjectionError
from projections.memory import StoredMemory
from schemas.memory_events import DerivedEvent, MemoryWritten
from tests.integration.fixtures.qdrant import EMBEDDING_DIM, FLOAT16_COSINE
from tests.integration.projections.test_episodic_candidates_contract import small_log

pytestmark = pytest.mark.integration

EMBEDDER = HashingEmbedder()
QUERY = "the river at mark 7"


def cosines(log: Sequence[DerivedEvent], query: np.ndarray) -> dict[str, float]:
    """The exact cosine of each memory's vector with ``query``, by memory id."""
    written = [e for e in log if isinstance(e, MemoryWritten)]
    norm = np.linalg.norm(query)
    return {
        e.memory_id: float(e.vector() @ query) / float(np.linalg.norm(e.vector()) * norm)
        for e in written
    }


async def searched(store: EdgeEpisodicMemory) -> list[StoredMemory]:
    """Every memory of the agent, the archived too, with its cosine to the query, by id."""
    signals = CandidateSignals(1000, vector=EMBEDDER.embed(QUERY))
    found = await store.candidates("alice", signals, scope="all")
    return sorted(found, key=lambda m: m.memory_id)


async def test_a_new_shard_stores_float16_and_reads_cosines_within_its_precision(
    tmp_path: Path,
) -> None:
    log = small_log("alice", 60)
    store = EdgeEpisodicMemory.open(tmp_path / "s", EMBEDDING_DIM)
    try:
        await store.apply(log)
        found = await searched(store)
    finally:
        await store.close()
    assert store.vectors == "float16"
    assert stored_layout(tmp_path / "s" / SHARD_DIR).vectors == "float16"
    exact = cosines(log, EMBEDDER.embed(QUERY))
    assert len(found) > 30
    for memory in found:
        assert memory.similarity == pytest.approx(exact[memory.memory_id], abs=FLOAT16_COSINE)


async def test_a_float32_shard_keeps_float32_and_exact_cosines_when_reopened(
    tmp_path: Path,
) -> None:
    log = small_log("alice", 60)
    store = EdgeEpisodicMemory.open(tmp_path / "s", EMBEDDING_DIM, vectors="float32")
    try:
        await store.apply(log)
        before = await searched(store)
    finally:
        await store.close()
    reopened = EdgeEpisodicMemory.open(tmp_path / "s", EMBEDDING_DIM)  # the default: float16
    try:
        assert reopened.vectors == "float32"
        after = await searched(reopened)
    finally:
        await reopened.close()
    assert after == before
    exact = cosines(log, EMBEDDER.embed(QUERY))
    for memory in after:
        assert memory.similarity == pytest.approx(exact[memory.memory_id], abs=1e-5)


async def test_a_shard_from_before_the_choice_opens_as_float32(tmp_path: Path) -> None:
    """A shard made before the datatype was configurable names none in its config: Edge made it
    float32, and loading it as float16 would fail."""
    store = EdgeEpisodicMemory.open(tmp_path / "s", EMBEDDING_DIM, vectors="float32")
    try:
        await store.apply(small_log("alice", 10))
    finally:
        await store.close()
    config_path = tmp_path / "s" / SHARD_DIR / "edge_config.json"
    config = json.loads(config_path.read_bytes())
    del config["vectors"][""]["datatype"]
    config_path.write_text(json.dumps(config))

    old = EdgeEpisodicMemory.open(tmp_path / "s", EMBEDDING_DIM)
    try:
        assert old.vectors == "float32"
        assert await old.count("alice") > 0
    finally:
        await old.close()


def test_an_unknown_datatype_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="float16, float32"):
        EdgeEpisodicMemory.open(tmp_path / "s", EMBEDDING_DIM, vectors="float64")
    assert not (tmp_path / "s" / SHARD_DIR).exists()


def test_a_shard_whose_config_does_not_tell_its_size_is_an_error(tmp_path: Path) -> None:
    """Loading a shard with another size fails, so its size is never guessed; no shard at all
    has none. Its layout, by contrast, falls back to the oldest one."""
    shard = tmp_path / SHARD_DIR
    assert stored_size(shard) is None
    shard.mkdir()
    (shard / "edge_config.json").write_text("{not json")
    with pytest.raises(ProjectionError, match="no readable config"):
        stored_size(shard)
    assert stored_layout(shard) == StoredLayout(lexical=False, vectors="float32")
    (shard / "edge_config.json").write_text(json.dumps({"vectors": {"": {"size": "16"}}}))
    with pytest.raises(ProjectionError, match="names no vector size"):
        stored_size(shard)
    (shard / "edge_config.json").write_text(json.dumps({"vectors": {"": {"size": 16}}}))
    assert stored_size(shard) == 16
