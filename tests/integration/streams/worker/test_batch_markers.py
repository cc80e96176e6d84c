"""A batch counts once its "logged up to" marker is in the log, on the real broker, Redis and
Qdrant Edge: markers move the projector's marks past records that derived nothing, and a batch
a crash cut short (its events logged, its marker not) is left out of a rebuild and a takeover.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.episodic.edge import EdgeEpisodicMemory
from projections.service.client import AsyncEngramClient
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.codec import encode_event
from schemas.memory_events import DerivedUpTo, LogRange, MemoryRecorded, SourcePosition
from schemas.topics import Topics
from streams.eventlog.derived_log import read_derived_log, recover_state
from streams.eventlog.publisher import AsyncPublisher, Position
from streams.eventlog.topic_admin import ensure_topics
from streams.rebuild.from_log import rebuild_projections
from streams.rebuild.projector import EpisodicProjector
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PATIENT_MS = 30_000
EMBEDDER = HashingEmbedder()


async def test_with_the_projector_a_dead_letter_alone_completes_the_wait(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    """The projector learns positions from the log only: without the batch's marker it would
    never move past a record that derived nothing, and this wait would time out (the last
    record of its partition, so no later recording moves the mark for it)."""
    prefix = f"mark{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    # Nothing sealed: what is checked here is the projector's marks, not the opening of records.
    settings = isolated_settings(prefix, tmp_path, episodic_writer="projector", keyring="off")
    node = await Node(
        settings, Endpoints(kafka_bootstrap, redis_server_url), run_projector=True
    ).start()
    try:
        assert node.http_url is not None
        assert node.episodic is not None
        async with AsyncPublisher(kafka_bootstrap, topics=topics) as agent_log:
            recorded = await agent_log.publish_many(
                [Observation(agent_id="M1", importance=0.9, content="flood")]
            )
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=False
        )
        await producer.start()
        try:
            sent = await producer.send_and_wait(
                topics.observations, b"not json {", key=b"M1", partition=recorded[0].partition
            )
        finally:
            await producer.stop()
        dead = Position(sent.topic, sent.partition, sent.offset)
        async with AsyncEngramClient(node.http_url) as memory:
            response = await memory.retrieve(
                "M1", after=[*recorded, dead], wait_timeout_ms=PATIENT_MS
            )
        episodic_mark = await node.episodic.applied_offset(dead.topic, dead.partition)
    finally:
        await node.stop()
    assert [m.content for m in response.results] == ["flood"]
    assert episodic_mark is not None
    assert episodic_mark >= dead.offset
    logged = await read_derived_log(kafka_bootstrap, [topics.lifecycle], [dead.partition])
    covered = [
        p.offset
        for m in logged
        if isinstance(m, DerivedUpTo)
        for p in m.upto
        if (p.topic, p.partition) == (dead.topic, dead.partition)
    ]
    assert max(covered) == dead.offset, "the dead letter's batch was marked"


def recordings(agent: str, count: int, importance: float = 0.3) -> list[MemoryRecorded]:
    """Memories of one agent (working ones by default), one per record of
    ``agent.observations``[0]."""
    config = load_processing_config()
    state = AgentMemoryState()
    out: list[MemoryRecorded] = []
    for i in range(count):
        event = Observation(
            agent_id=agent, content=f"levee report {i}", importance=importance, step=0
        )
        made = record(
            event,
            state,
            config=config,
            embedder=EMBEDDER,
            config_version="v",
            position=SourcePosition(topic="agent.observations", partition=0, offset=i),
        )
        state = made.state
        out.append(made.memory)
    return out


async def test_a_batch_without_its_marker_is_left_out_of_a_rebuild_and_a_takeover(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    """Records 0-5 were logged by batches with markers; 6-8 by a batch that crashed before its
    marker. A rebuild applies 0-5 only and moves the marks to 5, so the batch the next owner
    derives again is applied whole; a takeover folds 0-5 and derives from 6 on."""
    topics = Topics(f"mark{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 1)
    memories = recordings("M2", 9)
    first = DerivedUpTo(event_id="first", occurred_at=datetime.now(UTC), partition=0, upto=())
    batch = DerivedUpTo(
        event_id="batch",
        occurred_at=datetime.now(UTC),
        partition=0,
        upto=(SourcePosition(topic="agent.observations", partition=0, offset=5),),
        items=LogRange(first=0, last=5),
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=False
    )
    await producer.start()
    try:
        await producer.send_and_wait(topics.lifecycle, encode_event(first), partition=0)
        for memory in memories:
            await producer.send_and_wait(topics.items, encode_event(memory), key=b"M2", partition=0)
            if memory is memories[5]:
                await producer.send_and_wait(topics.lifecycle, encode_event(batch), partition=0)
    finally:
        await producer.stop()

    namespace = f"mark{uuid.uuid4().hex[:8]}"
    working = RedisWorkingMemory.from_url(redis_server_url, namespace=namespace)
    episodic = EdgeEpisodicMemory.open(tmp_path / "edge", EMBEDDER.dim)
    try:
        applied = await rebuild_projections(kafka_bootstrap, topics, [0], [working, episodic])
        kept = [m.content for m in await working.memories("M2")]
        marks = (
            await working.applied_offset("agent.observations", 0),
            await episodic.applied_offset("agent.observations", 0),
        )
    finally:
        await working.close()
        await episodic.close()
    assert applied == 6
    assert kept == [f"levee report {i}" for i in range(5, -1, -1)]
    assert marks == (5, 5)

    folded, logged = await recover_state(kafka_bootstrap, topics, [0])
    assert [e.event_id for e in logged] == [m.event_id for m in memories[:6]]
    assert folded.derived_upto == {("agent.observations", 0): 5}
    assert [w.memory_id for w in folded.states["M2"].working] == [m.memory_id for m in memories[:6]]


async def test_the_projector_applies_the_attempt_a_marker_covers_not_the_one_cut_short(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A worker logged a batch's recordings and crashed before its marker; the next owner
    derived the batch again with other outcomes (here: other seqs, as when a redelivery
    cuts the batch elsewhere) and logged it whole. Episodic memory must hold
    the second attempt, which the fold counts, not the first."""
    topics = Topics(f"mark{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 1)
    second = recordings("M3", 3, importance=0.9)
    first = [m.model_copy(update={"seq": m.seq + 10}) for m in second]
    marker = DerivedUpTo(
        event_id="batch",
        occurred_at=datetime.now(UTC),
        partition=0,
        upto=(SourcePosition(topic="agent.observations", partition=0, offset=2),),
        items=LogRange(first=3, last=5),
    )
    opened = DerivedUpTo(event_id="first", occurred_at=datetime.now(UTC), partition=0, upto=())
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=False
    )
    await producer.start()
    try:
        await producer.send_and_wait(topics.lifecycle, encode_event(opened), partition=0)
        for memory in [*first, *second]:
            await producer.send_and_wait(topics.items, encode_event(memory), key=b"M3", partition=0)
        await producer.send_and_wait(topics.lifecycle, encode_event(marker), partition=0)
    finally:
        await producer.stop()

    store = EdgeEpisodicMemory.open(tmp_path / "edge", EMBEDDER.dim)
    projector = await EpisodicProjector(kafka_bootstrap, topics, store, group_id="g").start()
    try:
        deadline = time.monotonic() + 60
        while projector.records < 8 or projector.waiting:
            assert time.monotonic() < deadline, "the projector did not read the log in time"
            await asyncio.sleep(0.05)
        kept = sorted((m.memory_id, m.seq) for m in await store.memories("M3"))
        mark = await store.applied_offset("agent.observations", 0)
    finally:
        await projector.stop()
        await store.close()
    assert kept == sorted((m.memory_id, m.seq) for m in second)
    assert projector.left_out == len(first)
    assert mark == 2
