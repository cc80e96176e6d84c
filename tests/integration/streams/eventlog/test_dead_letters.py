"""`engram dead-letters` once a reprocessed version is active: its workers write the letters
of the derived log they continue, and the command read the live topic only."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka import AIOKafkaProducer
from typer.testing import CliRunner

from projections.versions import DerivedLog, ProjectionVersions
from schemas.codec import encode_event
from schemas.deadletter import DeadLetter
from schemas.topics import Topics
from streams.cli.main import app as cli
from streams.eventlog.topic_admin import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def letter(offset: int, at: datetime) -> DeadLetter:
    return DeadLetter(
        reason=f"reason {offset}",
        error_kind="invalid",
        topic="agent.observations",
        partition=0,
        offset=offset,
        value_b64=DeadLetter.b64(b'{"content": 5}') or "",
        failed_at=at,
    )


async def test_the_letters_of_the_active_versions_derived_log_are_shown_too(
    kafka_bootstrap: str, redis_server_url: str
) -> None:
    prefix = f"dl{uuid.uuid4().hex[:8]}."
    live, version = Topics(prefix), Topics(prefix, f"{prefix}v1.")
    await ensure_topics(kafka_bootstrap, live, 1)
    await ensure_topics(kafka_bootstrap, version, 1)
    registry = ProjectionVersions.from_url(redis_server_url, prefix.rstrip("."), "episodic")
    try:
        await registry.create("v1")
        await registry.set_derived_log(
            "v1", DerivedLog(f"{prefix}v1.", f"{prefix}engram.v1", "0123456789ab", "hashing")
        )
        await registry.set_state("v1", "ready")
        await registry.activate("v1")
    finally:
        await registry.close()
    now = datetime.now(UTC)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(live.deadletter, encode_event(letter(1, now)))
        later = now + timedelta(seconds=1)
        await producer.send_and_wait(version.deadletter, encode_event(letter(2, later)))
    finally:
        await producer.stop()

    env = {
        "ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ENGRAM_REDIS_URL": redis_server_url,
        "ENGRAM_TOPIC_PREFIX": prefix,
        "ENGRAM_REDIS_NAMESPACE": prefix.rstrip("."),
        "ENGRAM_QDRANT_COLLECTION": "episodic",
    }
    shown = await asyncio.to_thread(CliRunner().invoke, cli, ["dead-letters"], env=env)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "the latest 2 of 2 dead letters" in text
    assert text.index("reason 2") < text.index("reason 1"), "newest first"
