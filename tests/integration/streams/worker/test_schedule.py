"""Wall-clock ticks through the real stack: the leader writes one into every partition of
memory.schedule, and a tick closes the session of agents without simulation time."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from schemas.agent_events import Observation
from schemas.codec import decode_tick
from schemas.topics import Topics
from streams.eventlog.derived_log import read_records
from streams.eventlog.publisher import AsyncPublisher
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_ticks_reach_every_partition_and_close_wall_clock_sessions(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"ticks{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    settings = isolated_settings(prefix, tmp_path, schedule_interval=0.5)
    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        assert node.pipeline is not None
        assert node.episodic is not None
        chat = [
            Observation(agent_id="W1", importance=0.4, content=f"The user asked about {topic}")
            for topic in ("invoices", "refunds", "the shipping delay")
        ]
        simulated = [
            Observation(agent_id="S1", importance=0.4, year=1, content=f"Year 1: news {i}")
            for i in range(3)
        ]
        async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
            await node.pipeline.stats.wait_for(await publisher.publish_many(chat + simulated))
        deadline = time.monotonic() + 60
        while not (summaries := await node.episodic.memories("W1", 10, levels=[1])):
            assert time.monotonic() < deadline, "no tick closed the wall-clock session"
            await asyncio.sleep(0.1)
        (summary,) = summaries
        assert "3 memories" in summary.content
        assert summary.source_event_type == "schedule.tick"
        # The simulation agent's session is closed by its own clock only.
        assert await node.episodic.memories("S1", 10, levels=[1]) == []
    finally:
        await node.stop()
    ticks = await read_records(
        kafka_bootstrap, [topics.schedule], range(settings.partitions), decode_tick
    )
    assert {position.partition for position, _ in ticks} == set(range(settings.partitions))
    assert all(tick.partition == position.partition for position, tick in ticks)
