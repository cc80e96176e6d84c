"""``Publisher.from_environment()`` publishes as ``engram publish`` does: sealed with the
deployment's keys, where the environment says."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import TopicPartition

from schemas.sealed import is_sealed, sealed_header
from schemas.topics import Topics
from streams.eventlog.kafka_clients import log_reader
from streams.eventlog.publisher import Position, Publisher, PublisherSettingsError
from streams.eventlog.topic_admin import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def record_at(bootstrap: str, position: Position) -> bytes:
    consumer = log_reader(bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(position.topic, position.partition)
        consumer.assign([tp])
        consumer.seek(tp, position.offset)
        record = await asyncio.wait_for(consumer.getone(), 10)
        assert record.value is not None
        return bytes(record.value)
    finally:
        await consumer.stop()


async def test_events_are_sealed_with_the_deployments_keys(
    kafka_bootstrap: str, redis_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"pe{uuid.uuid4().hex[:6]}."
    await ensure_topics(kafka_bootstrap, Topics(prefix), 2)
    for name, value in {
        "ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ENGRAM_REDIS_URL": redis_server_url,
        "ENGRAM_TOPIC_PREFIX": prefix,
        "ENGRAM_REDIS_NAMESPACE": prefix.rstrip("."),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("ENGRAM_KEYRING", raising=False)

    def publish() -> Position:
        with Publisher.from_environment() as agent_log:
            return agent_log.observe("P001", "my account number is 12345", step=1)

    position = await asyncio.to_thread(publish)
    assert position.topic == f"{prefix}agent.observations"
    raw = await record_at(kafka_bootstrap, position)
    assert is_sealed(raw)
    assert b"12345" not in raw
    assert sealed_header(raw).agent_id == "P001"


def test_without_a_broker_or_a_keyring_the_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("ENGRAM_KAFKA_BOOTSTRAP", "ENGRAM_REDIS_URL", "ENGRAM_KEYRING"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(PublisherSettingsError, match="ENGRAM_KAFKA_BOOTSTRAP"):
        Publisher.from_environment()
    monkeypatch.setenv("ENGRAM_KAFKA_BOOTSTRAP", "127.0.0.1:9")
    with pytest.raises(PublisherSettingsError, match="ENGRAM_REDIS_URL"):
        Publisher.from_environment()
