"""``engram replay --since``: a replay into an existing version starts, in every partition of
``memory.items`` and ``memory.lifecycle``, at the first record written at or after the time
given (the broker's ListOffsets by timestamp), asked of the real broker."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from aiokafka import TopicPartition

from schemas.topics import Topics
from streams.eventlog.kafka_clients import record_producer
from streams.eventlog.topic_admin import ensure_topics
from streams.rebuild.replay import DerivedLogCursor

pytestmark = pytest.mark.integration

PARTITIONS = 2
BEFORE_MS = 1_900_000_000_000
"""When the older records were written (2030-03-17), as their timestamps say."""
AFTER_MS = BEFORE_MS + 3_600_000
"""An hour later: the newer records."""


async def write(bootstrap: str, tps: list[TopicPartition], older: int, newer: int) -> None:
    producer = record_producer(bootstrap)
    await producer.start()
    try:
        for tp in tps:
            for n in range(older + newer):
                at = BEFORE_MS if n < older else AFTER_MS
                await producer.send_and_wait(
                    tp.topic, f"{n}".encode(), partition=tp.partition, timestamp_ms=at
                )
    finally:
        await producer.stop()


async def test_a_replay_since_a_time_starts_at_the_first_record_written_then(
    kafka_bootstrap: str,
) -> None:
    topics = Topics(f"since{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, PARTITIONS)
    cursor = DerivedLogCursor(kafka_bootstrap, topics, range(PARTITIONS))
    tps = cursor.topic_partitions()
    await write(kafka_bootstrap, tps, older=3, newer=2)

    half_an_hour_later = datetime.fromtimestamp((BEFORE_MS + 1_800_000) / 1000, UTC)
    assert await cursor.start_at(half_an_hour_later) == 2 * len(tps)
    assert cursor.next_offset == {tp: 3 for tp in tps}

    at_the_older = datetime.fromtimestamp(BEFORE_MS / 1000, UTC)
    assert await cursor.start_at(at_the_older) == 5 * len(tps)
    assert cursor.next_offset == {tp: 0 for tp in tps}

    after_everything = datetime.fromtimestamp((AFTER_MS + 1) / 1000, UTC)
    assert await cursor.start_at(after_everything) == 0, "nothing written since: nothing to read"
    assert cursor.next_offset == {tp: 5 for tp in tps}
