"""A worker that takes partitions over folds its state back from the derived log: capacities
continue where the last worker stopped, and redelivered records are not derived twice."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from schemas.agent_events import Observation
from schemas.topics import Topics
from streams.eventlog.derived_log import read_partitions
from streams.eventlog.publisher import AsyncPublisher
from streams.rebuild.reprocess import commit_offsets
from streams.runtime.node import Endpoints, Node
from streams.settings import EngramSettings
from tests.integration.streams.isolated import isolated_settings, log_sealer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def count_records(bootstrap: str, topic: str, partitions: int, redis_url: str) -> int:
    async with log_sealer(redis_url, topic.split(".")[0]) as sealer:
        return len(await read_partitions(bootstrap, [topic], range(partitions), sealer=sealer))


async def test_a_new_worker_continues_the_state_and_derives_nothing_twice(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"takeover{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)

    def settings(app_id: str) -> EngramSettings:
        return isolated_settings(prefix, tmp_path, app_id=app_id)

    endpoints = Endpoints(kafka_bootstrap, redis_server_url)
    events = [
        Observation(agent_id="T1", importance=0.5, step=i, content=f"Event {i}") for i in range(15)
    ]
    async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
        first = await Node(settings("engram"), endpoints, run_service=False).start()
        try:
            assert first.pipeline is not None
            await first.pipeline.stats.wait_for(await publisher.publish_many(events[:12]))
        finally:
            await first.stop()

        second = await Node(settings("engram"), endpoints, run_service=False).start()
        try:
            assert second.pipeline is not None
            await second.pipeline.stats.wait_for(await publisher.publish_many(events[12:]))
            working = await second.working.memories("T1")
        finally:
            await second.stop()
        # Without the folded state the second worker would not evict: 13 memories, not 10.
        assert [m.content for m in working] == [f"Event {i}" for i in range(14, 4, -1)]

        items_before = await count_records(kafka_bootstrap, topics.items, 2, redis_server_url)
        assert items_before == 15
        # A new consumer group reads every agent record again from the start.
        fresh = await Node(settings("engram-fresh-group"), endpoints, run_service=False).start()
        try:
            assert fresh.pipeline is not None
            stats = fresh.pipeline.stats
            deadline = time.monotonic() + 60
            while stats.events < 15:
                assert time.monotonic() < deadline, "redelivered records were not consumed"
                await asyncio.sleep(0.05)
            assert stats.skipped == 15
            assert stats.memories == 0
        finally:
            await fresh.stop()
        assert (
            await count_records(kafka_bootstrap, topics.items, 2, redis_server_url) == items_before
        )


async def test_a_commit_past_records_never_derived_is_read_again_from_the_mark(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    """The group's offset ahead of what the log says was derived (a commit that passed records
    a rebalance left behind): the worker reads the partition again from its mark rather than
    losing the records in between."""
    prefix = f"ahead{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    settings = isolated_settings(prefix, tmp_path, app_id="engram")
    endpoints = Endpoints(kafka_bootstrap, redis_server_url)
    events = [
        Observation(agent_id="T1", importance=0.5, step=i, content=f"Event {i}") for i in range(20)
    ]
    async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
        first = await Node(settings, endpoints, run_service=False).start()
        try:
            assert first.pipeline is not None
            await first.pipeline.stats.wait_for(await publisher.publish_many(events[:10]))
        finally:
            await first.stop()
        later = await publisher.publish_many(events[10:])
    assert [p.offset for p in later] == list(range(10, 20))
    tp = TopicPartition(later[0].topic, later[0].partition)
    # A group of its own, so no member of the first is still in it: its other partitions
    # start from nothing committed, and are skipped as derived.
    second_settings = isolated_settings(prefix, tmp_path, app_id="engram-second")
    await commit_offsets(kafka_bootstrap, f"{prefix}engram-second", {tp: 15})

    second = await Node(second_settings, endpoints, run_service=False).start()
    try:
        assert second.pipeline is not None
        await second.pipeline.stats.wait_for(later)
        held_back = second.pipeline.stats.held_back
    finally:
        await second.stop()
    assert await count_records(kafka_bootstrap, topics.items, 2, redis_server_url) == 20
    assert held_back >= 1, "the records from the committed offset on were read again"
