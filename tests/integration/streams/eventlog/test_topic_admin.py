"""Topics are created once, with one partition count; a mismatch is refused up front."""

from __future__ import annotations

import uuid

import pytest

from schemas.topics import Topics
from streams.eventlog.topic_admin import TopicLayoutError, ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_existing_topics_with_another_partition_count_are_refused(
    kafka_bootstrap: str,
) -> None:
    topics = Topics(f"admin{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 3)
    await ensure_topics(kafka_bootstrap, topics, 3)  # idempotent
    with pytest.raises(TopicLayoutError, match="ENGRAM_PARTITIONS=4"):
        await ensure_topics(kafka_bootstrap, topics, 4)
