"""An agent's history read back from a real broker, and the query service recording retrievals
on ``memory.access`` as it answers them."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pydantic import BaseModel
from typer.testing import CliRunner

from projections.history import LogPosition, LogUnavailableError
from projections.service.client import AsyncEngramClient
from schemas.agent_events import Observation
from schemas.codec import decode_retrieval, encode_event
from schemas.memory_events import (
    ConsolidationCompleted,
    ImportanceInputs,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
    PromotionDecision,
    RetrievedItem,
    encode_vector,
)
from schemas.topics import Topics
from streams.cli.console import UNREACHABLE
from streams.cli.main import app as cli
from streams.eventlog.history import partition_for, read_agent_history
from streams.eventlog.publisher import AsyncPublisher
from streams.eventlog.topic_admin import ensure_topics
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings, log_sealer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 3
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def agents_sharing_a_partition() -> tuple[str, str, str]:
    """Two agents on one partition (the reader must filter) and one on another."""
    by_partition: dict[int, list[str]] = {}
    for i in range(100):
        agent = f"H{i:03d}"
        by_partition.setdefault(partition_for(agent, PARTITIONS), []).append(agent)
    shared, *others = sorted(by_partition, key=lambda p: -len(by_partition[p]))
    first, second = by_partition[shared][:2]
    return first, second, by_partition[others[0]][0]


def memory_fields(agent: str, memory_id: str, content: str) -> dict[str, Any]:
    return {
        "agent_id": agent,
        "memory_id": memory_id,
        "agent_type": "household",
        "source_event_id": f"source-{memory_id}",
        "source_event_type": "observation",
        "seq": 0,
        "content": content,
        "importance": 0.9,
        "destination": "working",
        "embedding": encode_vector([0.0, 1.0]),
        "embedder": "hashing-64",
        "config_version": "cfg1",
    }


def recorded(agent: str, memory_id: str, content: str, minute: int) -> MemoryRecorded:
    return MemoryRecorded(
        occurred_at=at(minute),
        scoring=ImportanceInputs(method="explicit"),
        **memory_fields(agent, memory_id, content),
    )


def retrieved(agent: str, ids: list[str], minute: int) -> MemoryRetrieved:
    return MemoryRetrieved(
        agent_id=agent,
        occurred_at=at(minute),
        mode="two_phase",
        parameters={"top_k": 5},
        results=tuple(
            RetrievedItem(memory_id=m, rank=i + 1, score=0.5, store="working")
            for i, m in enumerate(ids)
        ),
        took_ms=2.0,
    )


@pytest.fixture
async def producer(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=False
    )
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


async def put(
    producer: AIOKafkaProducer,
    topic: str,
    event: BaseModel,
    *,
    key: str,
    partition: int | None = None,
    raw: bytes | None = None,
) -> LogPosition:
    """Written as the processors and the service write: keyed by agent id."""
    value = raw if raw is not None else encode_event(event)
    md = await producer.send_and_wait(topic, value, key=key.encode(), partition=partition)
    return LogPosition(topic=md.topic, partition=md.partition, offset=md.offset)


async def test_the_partition_is_the_one_the_producer_picks(
    kafka_bootstrap: str, topic_prefix: str, producer: AIOKafkaProducer
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics, PARTITIONS)
    agents = [f"agent-{i}" for i in range(12)]
    for agent in agents:
        landed = await put(producer, topics.access, retrieved(agent, [], 0), key=agent)
        assert landed.partition == partition_for(agent, PARTITIONS), agent
    assert {partition_for(a, PARTITIONS) for a in agents} == set(range(PARTITIONS))


async def test_the_history_is_the_agents_records_from_its_partition_in_order(
    kafka_bootstrap: str, topic_prefix: str, producer: AIOKafkaProducer
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics, PARTITIONS)
    me, neighbour, elsewhere = agents_sharing_a_partition()
    mine = partition_for(me, PARTITIONS)

    flood = recorded(me, "m-flood", "Year 3: A major flood caused $60,000 in damages", 0)
    wait = recorded(me, "m-wait", "Year 4: I chose to wait", 5)
    pushed_out = MemoryForgotten(
        agent_id=me,
        occurred_at=flood.occurred_at,
        memory_id="m-old",
        destination="working",
        reason="capacity",
        caused_by=flood.event_id,
        config_version="cfg1",
    )
    promoted = MemoryPromoted(
        occurred_at=at(10),
        promoted_from="m-flood",
        decision=PromotionDecision(rule="threshold", consolidated_year=3),
        **(memory_fields(me, "m-flood-copy", flood.content) | {"destination": "episodic"}),
    )
    consolidated = ConsolidationCompleted(
        agent_id=me,
        occurred_at=at(10),
        consolidated_year=3,
        considered=(),
        promoted=("m-flood-copy",),
        working_after=2,
        episodic_after=1,
        caused_by="tick",
        config_version="cfg1",
    )
    summary = MemorySummarised(
        occurred_at=at(20),
        summarises=("m-flood", "m-wait"),
        covers_upto_seq=1,
        summariser="extractive-v1",
        trigger="year",
        **(memory_fields(me, "m-summary", "A flood, then waiting") | {"level": 1}),
    )
    asked = retrieved(me, ["m-wait", "m-flood"], 15)

    written: dict[str, LogPosition] = {}
    # Interleaved with a neighbour on the same partition, in the order a worker would write.
    written[flood.event_id] = await put(producer, topics.items, flood, key=me)
    await put(producer, topics.items, recorded(neighbour, "n-1", "their flood", 1), key=neighbour)
    written[pushed_out.event_id] = await put(producer, topics.lifecycle, pushed_out, key=me)
    written[wait.event_id] = await put(producer, topics.items, wait, key=me)
    await put(producer, topics.access, retrieved(neighbour, ["n-1"], 2), key=neighbour)
    written[promoted.event_id] = await put(producer, topics.lifecycle, promoted, key=me)
    written[consolidated.event_id] = await put(producer, topics.lifecycle, consolidated, key=me)
    written[asked.event_id] = await put(producer, topics.access, asked, key=me)
    written[summary.event_id] = await put(producer, topics.lifecycle, summary, key=me)
    # Not the agent's partition: the reader does not look there.
    stray = recorded(me, "m-stray", "on the wrong partition", 30)
    await put(producer, topics.items, stray, key=me, partition=(mine + 1) % PARTITIONS)
    # A record nobody can read is left out, and the rest of the history still shows.
    await put(producer, topics.items, flood, key=me, raw=b"not json {")
    other = recorded(elsewhere, "e-1", "another partition", 3)
    other_at = await put(producer, topics.items, other, key=elsewhere)
    assert {p.partition for p in written.values()} == {mine}
    assert other_at.partition != mine

    history = await read_agent_history(kafka_bootstrap, topics, me, PARTITIONS, timeout=30)
    expected = [flood, pushed_out, wait, promoted, consolidated, asked, summary]
    assert [e.event_id for e in history.entries] == [e.event_id for e in expected]
    assert [e.position for e in history.entries] == [written[e.event_id] for e in expected]
    assert [e.kind for e in history.entries] == [
        "recorded",
        "forgotten",
        "recorded",
        "promoted",
        "consolidated",
        "retrieved",
        "summarised",
    ]
    assert history.entries[0].text.endswith('"Year 3: A major flood caused $60,000 in damages"')
    assert history.entries[5].related_ids == ("m-wait", "m-flood")
    assert history.counts == {
        "recorded": 2,
        "promoted": 1,
        "summarised": 1,
        "forgotten": 1,
        "consolidated": 1,
        "agent_forgotten": 0,
        "retrieved": 1,
        "procedure": 0,
        "plan": 0,
        "fact": 0,
        "rated": 0,
        "fact_accessed": 0,
    }

    theirs = await read_agent_history(kafka_bootstrap, topics, neighbour, PARTITIONS, timeout=30)
    assert [e.kind for e in theirs.entries] == ["recorded", "retrieved"]
    (far,) = (await read_agent_history(kafka_bootstrap, topics, elsewhere, PARTITIONS)).entries
    assert (far.event_id, far.position) == (other.event_id, other_at)

    nobody = await read_agent_history(kafka_bootstrap, topics, "nobody", PARTITIONS)
    assert (nobody.total, nobody.entries) == (0, ())

    latest = await read_agent_history(kafka_bootstrap, topics, me, PARTITIONS, limit=2)
    assert [e.event_id for e in latest.entries] == [asked.event_id, summary.event_id]
    assert (latest.total, latest.truncated) == (7, True)

    # The command line prints the same history, as JSON or as a table.
    env = {
        "ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ENGRAM_TOPIC_PREFIX": topic_prefix,
        "ENGRAM_PARTITIONS": str(PARTITIONS),
    }
    as_json = await asyncio.to_thread(
        CliRunner().invoke, cli, ["history", me, "--json", "--limit", "3"], env=env
    )
    assert as_json.exit_code == 0, as_json.output
    printed = json.loads(as_json.stdout)
    assert [e["event_id"] for e in printed["entries"]] == [
        consolidated.event_id,
        asked.event_id,
        summary.event_id,
    ]
    assert printed["total"] == 7
    wide = env | {"COLUMNS": "200"}
    table = await asyncio.to_thread(CliRunner().invoke, cli, ["history", me], env=wide)
    assert table.exit_code == 0, table.output
    assert "Year 3: A major flood" in table.output
    assert "consolidated" in table.output
    assert f"{me}: 7 entries" in table.output


async def test_a_history_on_topics_never_written_is_empty(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    history = await read_agent_history(kafka_bootstrap, Topics(topic_prefix), "H001", 2)
    assert history.total == 0


async def test_a_partition_count_other_than_the_topics_is_refused(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics, PARTITIONS)
    with pytest.raises(LogUnavailableError, match=f"has {PARTITIONS} partitions, not 2"):
        await read_agent_history(kafka_bootstrap, topics, "H001", 2)


async def test_an_unreachable_broker_is_named_as_unavailable_without_waiting() -> None:
    """A refused connection says at once that the broker is down, naming it: it is not a
    read that retries until its timeout and then raises the ``TimeoutError`` of a log too
    slow to answer."""
    from streams.runtime.devstack.ports import free_port

    bootstrap = f"127.0.0.1:{free_port()}"
    with pytest.raises(
        LogUnavailableError, match=f"^cannot read the event log at {re.escape(bootstrap)}: "
    ):
        await read_agent_history(bootstrap, Topics("x."), "H001", 2, timeout=10)


def test_the_command_line_names_a_bad_agent_id_and_an_unreachable_broker() -> None:
    from streams.runtime.devstack.ports import free_port

    runner = CliRunner()
    bad = runner.invoke(cli, ["history", "bad id"], env={"ENGRAM_KAFKA_BOOTSTRAP": "x:1"})
    assert bad.exit_code == 2, bad.output
    assert "'bad id' is not an agent id: it must be" in bad.output
    assert "Traceback" not in bad.output
    bootstrap = f"127.0.0.1:{free_port()}"
    down = runner.invoke(
        cli, ["history", "H001", "--timeout", "5"], env={"ENGRAM_KAFKA_BOOTSTRAP": bootstrap}
    )
    assert down.exit_code == UNREACHABLE, down.output  # worth another attempt
    assert f"cannot read the event log at {bootstrap}" in down.output
    assert "Traceback" not in down.output
    unset = runner.invoke(cli, ["history", "H001"], env={"ENGRAM_KAFKA_BOOTSTRAP": ""})
    assert unset.exit_code == 2
    assert "ENGRAM_KAFKA_BOOTSTRAP" in unset.output


async def read_access(bootstrap: str, topic: str, partition: int, want: int) -> list[Any]:
    """The records of one access partition, polled until ``want`` arrived (delivery is async)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    records: list[Any] = []
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 30
        while len(records) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=300)
            records.extend(batch.get(tp, []))
    finally:
        await consumer.stop()
    return records


async def test_the_service_puts_each_retrieval_on_the_access_topic(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"audit{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    settings = isolated_settings(prefix, tmp_path)
    agent = "AUDIT1"
    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        assert node.pipeline is not None
        assert node.http_url is not None
        async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
            flood = Observation(
                agent_id=agent, importance=0.9, year=3, content="Year 3: A major flood"
            )
            await node.pipeline.stats.wait_for([await publisher.publish(flood)])
        async with AsyncEngramClient(node.http_url) as client:
            first = await client.retrieve(agent, top_k=3, current_year=4)
            await client.retrieve(agent, top_k=1, mode="weighted", current_year=5)
            partition = partition_for(agent, settings.partitions)
            records = await read_access(kafka_bootstrap, topics.access, partition, 2)
            # Sealed with the agent's key: a query says what the agent asked.
            assert not [r for r in records if b"two_phase" in r.value]
            async with log_sealer(redis_server_url, settings.redis_namespace) as sealer:
                opened = await sealer.open_all([r.value for r in records])
            events = [decode_retrieval(o) for o in opened if isinstance(o, bytes)]
            assert [r.key for r in records] == [agent.encode()] * 2
            assert [(e.agent_id, e.mode, e.year) for e in events] == [
                (agent, "two_phase", 4),
                (agent, "weighted", 5),
            ]
            assert [i.memory_id for i in events[0].results] == [m.memory_id for m in first.results]
            assert events[0].parameters["top_k"] == 3

            # The service's history route reads the same log.
            history = await client.history(agent, limit=10)
            assert [e.kind for e in history.entries] == ["recorded", "retrieved", "retrieved"]
            assert history.entries[0].memory_id == first.results[0].memory_id
            assert history.entries[1].event_id == events[0].event_id
        assert node.recorder is not None
        assert (node.recorder.delivered, node.recorder.failed) == (2, 0)
    finally:
        await node.stop()
