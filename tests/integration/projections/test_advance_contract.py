"""The ``advance`` contract, on every store: Redis, Qdrant Edge and the qdrant-client adapter.

The worker calls ``advance`` after a batch whose last records derived nothing (dead letters,
retrievals, ticks), so a read-your-writes wait on them completes. An applied offset must then
only ever go up, per partition, whatever order or concurrency the calls come in.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.episodic.edge import EdgeEpisodicMemory
from projections.interfaces import EpisodicMemoryStore, WorkingMemoryStore
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.memory_events import DerivedEvent, SourcePosition
from schemas.topics import Topics
from tests.integration.fixtures.qdrant import EMBEDDING_DIM, _client_store, _edge_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

Store = WorkingMemoryStore | EpisodicMemoryStore
TOPIC = Topics().observations
OTHER = Topics().access
CONFIG = load_processing_config()
EMBEDDER = HashingEmbedder()


@pytest.fixture(params=["redis", "edge", "qdrant-local"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store of each backend, built as the session's store fixtures build them."""
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_server_url")
        redis = RedisWorkingMemory.from_url(url, namespace=f"test-{uuid.uuid4().hex}")
        try:
            yield redis
        finally:
            await redis.clear()
            await redis.close()
    elif request.param == "edge":
        async for edge in _edge_store(tmp_path / "edge"):
            yield edge
    else:
        async for client in _client_store(request):
            yield client


def observed(offset: int, importance: float, partition: int = 0) -> list[DerivedEvent]:
    result = record(
        Observation(agent_id="alice", content=f"event at {offset}", importance=importance),
        AgentMemoryState(),
        config=CONFIG,
        embedder=EMBEDDER,
        config_version=CONFIG.version(EMBEDDER.id),
        position=SourcePosition(topic=TOPIC, partition=partition, offset=offset),
    )
    return [result.memory, *result.forgotten]


async def marks(store: Store) -> tuple[int | None, ...]:
    return (
        await store.applied_offset(TOPIC, 0),
        await store.applied_offset(TOPIC, 1),
        await store.applied_offset(OTHER, 0),
    )


async def test_advance_raises_each_partition_and_never_lowers(store: Store) -> None:
    await store.advance({(TOPIC, 0): 5, (OTHER, 0): 2})
    assert await marks(store) == (5, None, 2)

    await store.advance({(TOPIC, 0): 3, (TOPIC, 1): 8})
    assert await marks(store) == (5, 8, 2), "a lower offset leaves the mark where it is"

    await store.advance({(TOPIC, 0): 5, (OTHER, 0): 9})
    await store.advance({(TOPIC, 0): 5, (OTHER, 0): 9})
    assert await marks(store) == (5, 8, 9), "the same advance twice equals once"

    await store.advance({})
    assert await marks(store) == (5, 8, 9)


async def test_advance_and_apply_share_one_mark(store: Store) -> None:
    """Whichever moves the mark, the other never takes it back."""
    await store.apply(observed(4, 0.9))
    await store.advance({(TOPIC, 0): 9})
    assert await store.applied_offset(TOPIC, 0) == 9

    await store.apply(observed(6, 0.3))
    assert await store.applied_offset(TOPIC, 0) == 9

    await store.apply(observed(12, 0.3))
    await store.advance({(TOPIC, 0): 10})
    assert await store.applied_offset(TOPIC, 0) == 12


async def test_concurrent_advances_keep_the_highest(store: Store) -> None:
    """Atomic per partition: interleaved calls in any order end at the highest offset."""
    offsets = list(range(40))
    random.Random(7).shuffle(offsets)
    await asyncio.gather(*(store.advance({(TOPIC, o % 2): o, (OTHER, 0): o}) for o in offsets))
    assert await marks(store) == (38, 39, 39)


async def test_a_redis_event_below_an_advanced_mark_is_skipped_as_a_replay(
    working_store: RedisWorkingMemory,
) -> None:
    """``advance`` vouches that everything up to the mark is applied; an older event arriving
    afterwards is a replay and must not bring back a memory."""
    await working_store.advance({(TOPIC, 0): 9})
    await working_store.apply(observed(6, 0.3))
    assert await working_store.memories("alice") == []
    await working_store.apply(observed(9, 0.3))
    assert [m.content for m in await working_store.memories("alice")] == ["event at 9"]


async def test_edge_keeps_an_advanced_mark_across_a_restart(
    edge_store: EdgeEpisodicMemory,
) -> None:
    await edge_store.apply(observed(2, 0.9))
    await edge_store.advance({(TOPIC, 0): 7, (OTHER, 1): 3})
    await edge_store.close()

    reopened = EdgeEpisodicMemory.open(edge_store.path, EMBEDDING_DIM)
    try:
        assert await reopened.applied_offset(TOPIC, 0) == 7
        assert await reopened.applied_offset(OTHER, 1) == 3
        assert await reopened.count("alice") == 1
    finally:
        await reopened.close()
