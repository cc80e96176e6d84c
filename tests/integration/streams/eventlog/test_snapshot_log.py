"""The snapshot a takeover starts from, read back from the real broker: the latest whole one,
even when a worker killed while it wrote the next left its chunks after it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaProducer

from processors.recording import AgentMemoryState
from processors.state_snapshot import PartitionSnapshot, chunk_records, manifest_record
from schemas.topics import Topics
from streams.eventlog.snapshot_log import LOOK_BACK, read_snapshots
from streams.eventlog.topic_admin import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

PARTITION = 1


def snapshot(marker: str, upto: int, agents: int = 3) -> PartitionSnapshot:
    topics = Topics()
    return PartitionSnapshot(
        partition=PARTITION,
        states={f"agent-{n}": AgentMemoryState(next_seq=upto + n) for n in range(agents)},
        derived_upto={(topics.observations, PARTITION): upto},
        logged_upto={(topics.observations, PARTITION): upto},
        log_ends={(topics.lifecycle, PARTITION): upto},
        marker=marker,
    )


async def write(
    producer: AIOKafkaProducer, topic: str, taken: PartitionSnapshot, whole: bool
) -> None:
    """A snapshot as a worker writes it: its chunks, then (``whole``) its manifest."""
    snapshot_id = uuid.uuid4().hex
    chunks = chunk_records(taken, snapshot_id, chunk_bytes=64)
    assert len(chunks) > 1, "a snapshot of several chunks, so one can be cut short"
    landed = [await producer.send_and_wait(topic, chunk, partition=PARTITION) for chunk in chunks]
    if whole:
        manifest = manifest_record(
            taken, snapshot_id, len(chunks), landed[0].offset, datetime.now(UTC)
        )
        await producer.send_and_wait(topic, manifest, partition=PARTITION)


@pytest.mark.parametrize("cut_agents", [3, LOOK_BACK + 8])
async def test_chunks_left_after_the_last_manifest_leave_the_snapshot_before_them(
    kafka_bootstrap: str, cut_agents: int
) -> None:
    """Also when the snapshot cut short wrote more chunks than the look-back (one an agent
    here): a large partition's snapshot runs to dozens."""
    topics = Topics(f"snap{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        older, cut_short = snapshot("m-1", 10), snapshot("m-2", 20, cut_agents)
        await write(producer, topics.snapshots, older, whole=True)
        await write(producer, topics.snapshots, cut_short, whole=False)
    finally:
        await producer.stop()

    found, _ = await read_snapshots(kafka_bootstrap, topics.snapshots, [0, PARTITION])

    assert list(found) == [PARTITION]
    assert found[PARTITION].marker == "m-1"
    assert found[PARTITION].derived_upto == older.derived_upto
