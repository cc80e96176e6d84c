"""Handing a new projection version over from the replay that built it to the running writers.

A Qdrant Edge shard opens in one store at a time, so the replay lets go of the version's stores
before it moves the pointer; and a writer paused by the switch writes its next batch into the
new version even when that version's stores cannot be opened at once (a shard not let go of
yet, a Redis blip): a batch written into the version the pointer left would be missing from
the one it names."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from projections.episodic.edge import EdgeEpisodicMemory
from projections.interfaces import ProjectionError
from projections.versions import (
    ProjectionStores,
    ProjectionVersion,
    ProjectionVersions,
    SwitchError,
    WriteLock,
    fenced,
)
from projections.working.redis_store import RedisWorkingMemory
from streams.rebuild.projection_switch import ProjectionFollower
from tests.integration.fixtures.qdrant import EMBEDDING_DIM

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_an_edge_shard_opens_in_one_store_at_a_time(
    edge_store: EdgeEpisodicMemory,
) -> None:
    with pytest.raises(ProjectionError, match="held by another process or store"):
        EdgeEpisodicMemory.open(edge_store.path, EMBEDDING_DIM)
    await edge_store.close()
    again = EdgeEpisodicMemory.open(edge_store.path, EMBEDDING_DIM)
    await again.close()


async def test_a_writer_stays_paused_until_the_new_version_opens(redis_server_url: str) -> None:
    namespace = f"handover{uuid.uuid4().hex[:8]}"
    registry = ProjectionVersions.from_url(redis_server_url, namespace, "c")
    lock = WriteLock()
    attempts: list[str | None] = []
    opened: list[RedisWorkingMemory] = []

    async def open_stores(version: ProjectionVersion) -> ProjectionStores:
        attempts.append(version.name)
        if len(attempts) < 3:
            raise ProjectionError("Qdrant Edge: the shard is held by another process")
        working = RedisWorkingMemory.from_url(redis_server_url, version.redis_namespace)
        opened.append(working)
        return working, None

    async def on_switch(version: ProjectionVersion, stores: ProjectionStores) -> None:
        return None

    working = RedisWorkingMemory.from_url(redis_server_url, namespace)
    follower = await ProjectionFollower(
        versions=registry,
        role="worker",
        version=registry.version(None),
        stores=(working, None),
        open_stores=open_stores,
        on_switch=on_switch,
        write_lock=lock,
        interval=0.05,
        grace=0.1,
    ).start()
    moved = asyncio.Event()
    batches: list[tuple[bool, str | None]] = []
    """Per write batch: whether the pointer had moved, and the version it wrote into."""

    async def write() -> None:
        while True:
            async with lock.batch():
                batches.append((moved.is_set(), follower.version.name))
            await asyncio.sleep(0.01)

    writer = asyncio.create_task(write())
    try:
        target = await registry.create("v1")
        async with fenced(registry, target, 10.0):
            await registry.activate("v1")
            moved.set()
        for _ in range(200):
            if follower.version.name == "v1" and batches[-1] == (True, "v1"):
                break
            await asyncio.sleep(0.05)
        assert attempts == ["v1", "v1", "v1"]
        after = [version for was_moved, version in batches if was_moved]
        assert after, batches
        assert set(after) == {"v1"}, batches
    finally:
        writer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writer
        await follower.stop()
        for store in [working, *opened]:
            await store.close()
        await registry.close()


async def test_one_switch_at_a_time_and_each_lowers_only_its_own_fence(
    redis_server_url: str,
) -> None:
    """Two replays at once: the second overwrote the first one's fence (the writers paused for
    the first went on writing into the version it was leaving), and the first one's end then
    deleted the second's, which waited out its whole timeout."""
    namespace = f"twofences{uuid.uuid4().hex[:8]}"
    registry = ProjectionVersions.from_url(redis_server_url, namespace, "c")
    try:
        first, second = registry.version("v1"), registry.version("v2")
        async with fenced(registry, first, timeout=5):
            assert await registry.fence() == "v1"
            with pytest.raises(SwitchError, match=r"another switch, to version v1.*--into v2"):
                async with fenced(registry, second, timeout=5):
                    raise AssertionError("a second fence was raised")
            assert await registry.fence() == "v1", "the refused switch lowered the first's"
            await registry.lower_fence("v2")  # never another's
            assert await registry.fence() == "v1"
        assert await registry.fence() is None
        async with fenced(registry, second, timeout=5):
            assert await registry.fence() == "v2"
        assert await registry.fence() is None
    finally:
        await registry.close()


async def test_the_fence_lasts_its_whole_timeout_after_the_writers_paused(
    redis_server_url: str,
) -> None:
    """Raised with the timeout as its life, the fence could expire in the body when the wait
    for the writers took most of it: the writers then wrote into the version being left."""
    namespace = f"fencelife{uuid.uuid4().hex[:8]}"
    registry = ProjectionVersions.from_url(redis_server_url, namespace, "c")
    old, new = registry.version(None), registry.version("v1")

    async def a_slow_writer() -> None:
        await registry.heartbeat("worker-1", "worker", old)
        await asyncio.sleep(1.2)  # finishing its batch
        await registry.heartbeat("worker-1", "worker", old, paused_for="v1")

    try:
        writer = asyncio.create_task(a_slow_writer())
        await asyncio.sleep(0.1)
        async with fenced(registry, new, timeout=2):
            await asyncio.sleep(1.2)  # the body: 2.4 s after the raise, past the first life
            assert await registry.fence() == "v1"
        await writer
        assert await registry.fence() is None
    finally:
        await registry.close()
