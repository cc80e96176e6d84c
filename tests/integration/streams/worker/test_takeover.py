"""A worker that takes partitions over folds its state back from the derived log: capacities
continue where the last worker stopped, and redelivered records are not derived twice."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from schemas.agent_events import Observation
from schemas.topics import Topics
from streams.eventlog.derived_log import read_partitions
from streams.eventlog.publisher import AsyncPublisher
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
