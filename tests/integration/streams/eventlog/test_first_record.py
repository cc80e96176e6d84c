"""Where a partition's first record at or after an offset is, asked of the real broker: what
a worker asks before it derives across a gap in a source partition."""

from __future__ import annotations

import socket
import uuid

import pytest

from schemas.topics import Topics
from streams.eventlog.first_record import first_record_at
from streams.eventlog.topic_admin import ensure_topics
from tests.integration.streams.eventlog.test_log_ends import publish_in_one_batch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
async def topic(kafka_bootstrap: str) -> str:
    topics = Topics(f"first{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 1)
    return topics.observations


async def test_the_record_at_an_offset_is_found_even_inside_a_batch(
    kafka_bootstrap: str, topic: str
) -> None:
    offsets = await publish_in_one_batch(kafka_bootstrap, topic, 5)
    offsets += await publish_in_one_batch(kafka_bootstrap, topic, 3)
    assert offsets == list(range(8))
    for offset in (0, 2, 4, 5, 7):
        assert await first_record_at(kafka_bootstrap, topic, 0, offset) == offset


async def test_past_the_end_there_is_none(kafka_bootstrap: str, topic: str) -> None:
    await publish_in_one_batch(kafka_bootstrap, topic, 2)
    assert await first_record_at(kafka_bootstrap, topic, 0, 2, timeout=1.5) is None


async def test_a_broker_that_cannot_be_reached_answers_none() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert await first_record_at(f"127.0.0.1:{port}", "t", 0, 0, timeout=2.0) is None
