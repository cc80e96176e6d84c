"""Where the log ends, asked of the real broker: exact even where the broker's own end offset
leaves out the rest of the last batch, so no published record is taken for one past the end."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer

from schemas.topics import Topics
from streams.eventlog.log_ends import BrokerLogEnds
from streams.eventlog.topic_admin import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

PARTITIONS = 2


@pytest.fixture
async def topics(kafka_bootstrap: str) -> Topics:
    topics = Topics(f"ends{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, PARTITIONS)
    return topics


@pytest.fixture
async def log_ends(kafka_bootstrap: str) -> AsyncIterator[BrokerLogEnds]:
    ends = await BrokerLogEnds(kafka_bootstrap, PARTITIONS).start()
    try:
        yield ends
    finally:
        await ends.stop()


async def publish_in_one_batch(bootstrap: str, topic: str, count: int) -> list[int]:
    """``count`` records sent together, so the producer puts them in one batch."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=200
    )
    await producer.start()
    try:
        sent = [await producer.send(topic, b"x", partition=0) for _ in range(count)]
        return [(await delivery).offset for delivery in sent]
    finally:
        await producer.stop()


async def test_the_end_is_past_every_record_of_the_last_batch(
    kafka_bootstrap: str, topics: Topics, log_ends: BrokerLogEnds
) -> None:
    first = await publish_in_one_batch(kafka_bootstrap, topics.observations, 1)
    offsets = await publish_in_one_batch(kafka_bootstrap, topics.observations, 5)
    assert offsets == list(range(first[0] + 1, first[0] + 6))

    ends = await log_ends([(topics.observations, 0), (topics.observations, 1)])

    assert ends == {(topics.observations, 0): offsets[-1] + 1, (topics.observations, 1): 0}


async def test_partitions_past_the_count_do_not_exist(
    topics: Topics, log_ends: BrokerLogEnds
) -> None:
    ends = await log_ends([(topics.decisions, PARTITIONS), (topics.decisions, 0)])
    assert ends == {(topics.decisions, 0): 0}


async def test_lookups_follow_the_log_as_it_grows(
    kafka_bootstrap: str, topics: Topics, log_ends: BrokerLogEnds
) -> None:
    """One consumer serves every lookup, concurrent ones too: each sees what was published
    before it started."""
    key = (topics.access, 0)
    assert await log_ends([key]) == {key: 0}
    offsets = await publish_in_one_batch(kafka_bootstrap, topics.access, 3)
    both = await asyncio.gather(log_ends([key]), log_ends([key, (topics.access, 1)]))
    assert [answer[key] for answer in both] == [offsets[-1] + 1] * 2


async def test_a_lookup_that_asks_the_broker_nothing_stops_cleanly(
    kafka_bootstrap: str, topics: Topics
) -> None:
    """`engram recall --as-of` on a partition that does not exist started a lookup, asked it
    for nothing and stopped it at once: aiokafka raised CancelledError, a traceback."""
    ends = await BrokerLogEnds(kafka_bootstrap, PARTITIONS).start()
    try:
        assert await ends([(topics.observations, PARTITIONS + 97)]) == {}
    finally:
        await ends.stop()
