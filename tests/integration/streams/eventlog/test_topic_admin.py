"""Topics are created once, with one partition count and the replication asked for; a
mismatch of partitions is refused up front."""

from __future__ import annotations

import uuid

import pytest

from schemas.topics import Topics
from streams.eventlog.kafka_clients import admin_client, record_producer
from streams.eventlog.topic_admin import TopicLayoutError, TopicReplication, ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_existing_topics_with_another_partition_count_are_refused(
    kafka_bootstrap: str,
) -> None:
    topics = Topics(f"admin{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 3)
    await ensure_topics(kafka_bootstrap, topics, 3)  # idempotent
    with pytest.raises(TopicLayoutError, match="ENGRAM_PARTITIONS=4"):
        await ensure_topics(kafka_bootstrap, topics, 4)


async def test_topics_are_created_with_the_replication_asked_for(kafka_bootstrap: str) -> None:
    """The dev broker has one node: one replica is what it can hold (three are checked by the
    unit tests' mapping only). A write acknowledged by all in-sync replicas then lands."""
    topics = Topics(f"replicas{uuid.uuid4().hex[:8]}.")
    await ensure_topics(
        kafka_bootstrap, topics, 2, replication=TopicReplication(factor=1, min_insync=1)
    )
    admin = admin_client(kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(list(topics.all()))
    finally:
        await admin.close()
    assert {d["topic"] for d in described} == set(topics.all())
    for topic in described:
        assert [len(p["replicas"]) for p in topic["partitions"]] == [1, 1], topic
    producer = record_producer(kafka_bootstrap)
    await producer.start()
    try:
        sent = await producer.send_and_wait(topics.items, b"v", key=b"k", partition=1)
    finally:
        await producer.stop()
    assert sent.offset == 0
