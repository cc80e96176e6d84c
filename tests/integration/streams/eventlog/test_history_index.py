"""An agent's history read by the agent index: only its own records are fetched, and the
timeline is the one the whole partition gives."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from projections.history import build_timeline
from projections.working.agent_index import AgentIndex
from schemas.agent_events import Observation
from schemas.memory_events import ForgetAgent
from schemas.topics import Topics
from streams.eventlog.history import partition_for, read_agent_events
from streams.eventlog.publisher import AsyncPublisher
from streams.privacy.forgetting import request_forget
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings, log_sealer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROUNDS = 3
BIG_PER_ROUND = 100


def observation(agent: str, n: int) -> Observation:
    return Observation(
        agent_id=agent,
        agent_type="household",
        year=1 + n // 50,
        kind="flood.major" if n % 7 == 0 else "weather",
        content=f"{agent} observation {n}: the river is at level {n % 13}",
    )


async def test_a_small_agents_history_reads_its_own_records_and_equals_the_scan(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"hix{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path)
    partitions = settings.partitions
    on = {}
    for i in range(200):
        on.setdefault(partition_for(f"H{i:03d}", partitions), []).append(f"H{i:03d}")
    big, small = next(agents for agents in on.values() if len(agents) >= 2)[:2]
    topics = Topics(prefix)
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        publisher = await AsyncPublisher(
            kafka_bootstrap, topics=topics, keyring=node.keyring
        ).start()
        assert node.pipeline is not None
        # Each burst is its own batch: the small agent's records sit between the big one's.
        for r in range(ROUNDS):
            many = [observation(big, r * BIG_PER_ROUND + n) for n in range(BIG_PER_ROUND)]
            await node.pipeline.stats.wait_for(await publisher.publish_many(many))
            few = [observation(small, r)]
            await node.pipeline.stats.wait_for(await publisher.publish_many(few))
        index = AgentIndex.from_url(redis_server_url, settings.redis_namespace)
        try:
            async with log_sealer(redis_server_url, settings.redis_namespace) as sealer:
                for agent in (small, big):
                    scan = await read_agent_events(
                        kafka_bootstrap, topics, agent, partitions, sealer
                    )
                    indexed = await read_agent_events(
                        kafka_bootstrap, topics, agent, partitions, sealer, index
                    )
                    assert (scan.indexed, indexed.indexed) == (False, True)
                    assert build_timeline(agent, indexed.events) == build_timeline(
                        agent, scan.events
                    )
                    assert build_timeline(agent, scan.events).total > 0
                    if agent == small:
                        small_read, total = indexed.read, scan.read
                # Forgetting the agent drops its old life from the index, and keeps the
                # erasure, also once a new life is indexed after it.
                assert node.keyring is not None
                request = ForgetAgent(
                    event_id=str(uuid.uuid4()),
                    agent_id=small,
                    requested_at=datetime.now(UTC),
                    key_ids=tuple(await node.keyring.key_ids(small)),
                )
                forgot = await request_forget(kafka_bootstrap, topics, request)
                await node.pipeline.stats.wait_for([forgot])
                # A publisher of its own: one that ran through the forget trusts the deleted
                # key for 5 s (what `engram forget-agent` waits out).
                async with AsyncPublisher(
                    kafka_bootstrap, topics=topics, keyring=node.keyring
                ) as anew:
                    reborn = await anew.publish_many([observation(small, 99)])
                await node.pipeline.stats.wait_for(reborn)
                names = (topics.items, topics.lifecycle, topics.access)
                partition = partition_for(small, partitions)
                assert await index.lookup(big, partition, names) is not None
                # A reader of its own, as the service makes per history: the first one still
                # holds the deleted key.
                async with log_sealer(redis_server_url, settings.redis_namespace) as fresh:
                    after = await read_agent_events(
                        kafka_bootstrap, topics, small, partitions, fresh, index
                    )
                    after_scan = await read_agent_events(
                        kafka_bootstrap, topics, small, partitions, fresh
                    )
                timeline = build_timeline(small, after.events)
                scanned = build_timeline(small, after_scan.events)
                assert [(e.kind, e.position) for e in timeline.entries] == [
                    (e.kind, e.position) for e in scanned.entries
                ], (after.indexed, timeline.counts, scanned.counts)
                assert timeline == scanned
                assert timeline.counts["agent_forgotten"] == 1
                assert timeline.counts["recorded"] == 1  # the new life
        finally:
            await index.close()
            await publisher.close()
    # The small agent's few records and their batches' neighbours, not the big agent's 300.
    assert total >= ROUNDS * BIG_PER_ROUND
    assert small_read <= total // 10, (small_read, total)


async def test_a_trimmed_agents_history_reads_the_log_before_its_index_and_equals_the_scan(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"hcap{uuid.uuid4().hex[:8]}."
    cap = 4
    settings = isolated_settings(prefix, tmp_path, agent_index_cap=cap)
    partitions = settings.partitions
    on: dict[int, list[str]] = {}
    for i in range(200):
        on.setdefault(partition_for(f"C{i:03d}", partitions), []).append(f"C{i:03d}")
    big, small, other = next(agents for agents in on.values() if len(agents) >= 3)[:3]
    topics = Topics(prefix)
    names = (topics.items, topics.lifecycle, topics.access)
    async with (
        Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node,
        AsyncPublisher(kafka_bootstrap, topics=topics) as publisher,
    ):
        assert node.pipeline is not None
        # Each burst its own batch: the big agent gets a member per burst, past the cap.
        for r in range(2 * cap):
            many = [observation(big, r * 20 + n) for n in range(20)]
            await node.pipeline.stats.wait_for(await publisher.publish_many(many))
        # Then another agent, on the same partition: what the index spares a read of.
        for r in range(4):
            many = [observation(other, r * 100 + n) for n in range(100)]
            await node.pipeline.stats.wait_for(await publisher.publish_many(many))
        await node.pipeline.stats.wait_for(await publisher.publish_many([observation(small, 0)]))
        index = AgentIndex.from_url(redis_server_url, settings.redis_namespace)
        client = aioredis.Redis.from_url(redis_server_url)
        try:
            assert await client.zcard(f"{settings.redis_namespace}:idx:a:{big}") == cap
            partition = partition_for(big, partitions)
            trimmed = await index.lookup(big, partition, names)
            assert trimmed is not None
            assert trimmed.trimmed
            untrimmed = await index.lookup(small, partition, names)
            assert untrimmed is not None
            assert not untrimmed.trimmed
            async with log_sealer(redis_server_url, settings.redis_namespace) as sealer:
                scan = await read_agent_events(kafka_bootstrap, topics, big, partitions, sealer)
                capped = await read_agent_events(
                    kafka_bootstrap, topics, big, partitions, sealer, index
                )
                # Every record, none silently left out: the log before the watermarks, and
                # by the index the rest, but not the other agent's records after them.
                assert capped.indexed
                assert build_timeline(big, capped.events) == build_timeline(big, scan.events)
                assert build_timeline(big, scan.events).counts["recorded"] == 2 * cap * 20
                assert capped.read <= scan.read // 2, (capped.read, scan.read)
                small_scan = await read_agent_events(
                    kafka_bootstrap, topics, small, partitions, sealer
                )
                small_indexed = await read_agent_events(
                    kafka_bootstrap, topics, small, partitions, sealer, index
                )
                assert small_indexed.indexed
                assert build_timeline(small, small_indexed.events) == build_timeline(
                    small, small_scan.events
                )
        finally:
            await index.close()
            await client.aclose()
    # The untrimmed agent's few records and their neighbours, not the other agents' 560.
    assert small_scan.read >= 2 * cap * 20 + 400
    assert small_indexed.read <= small_scan.read // 10, (small_indexed.read, small_scan.read)


async def test_records_far_apart_in_one_fetch_are_read_once(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    """The index's places of an agent, far apart (past the merging gap) but in one record
    batch of the log: a fetch at the first brought back the others, which were kept, then
    read and kept again at their own places. Histories showed records up to nine times."""
    prefix = f"hixonce{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path)
    partitions = settings.partitions
    on: dict[int, list[str]] = {}
    for i in range(200):
        on.setdefault(partition_for(f"H{i:03d}", partitions), []).append(f"H{i:03d}")
    big, small = next(agents for agents in on.values() if len(agents) >= 2)[:2]
    topics = Topics(prefix)
    mixed = [
        observation(small if n % 40 == 0 else big, n) for n in range(200)
    ]  # small's every 40 records, in one batch
    async with (
        Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node,
        AsyncPublisher(kafka_bootstrap, topics=topics) as publisher,
    ):
        assert node.pipeline is not None
        await node.pipeline.stats.wait_for(await publisher.publish_many(mixed))
        index = AgentIndex.from_url(redis_server_url, settings.redis_namespace)
        try:
            async with log_sealer(redis_server_url, settings.redis_namespace) as sealer:
                scan = await read_agent_events(kafka_bootstrap, topics, small, partitions, sealer)
                indexed = await read_agent_events(
                    kafka_bootstrap, topics, small, partitions, sealer, index
                )
        finally:
            await index.close()
    assert indexed.indexed
    places = [(e.position.topic, e.position.offset) for e in indexed.events]
    assert len(places) == len(set(places)), "a record read twice"
    assert build_timeline(small, indexed.events) == build_timeline(small, scan.events)
    assert build_timeline(small, scan.events).counts["recorded"] == 5


async def test_an_index_that_outlived_its_log_is_passed_over(
    kafka_bootstrap: str, redis_server_url: str
) -> None:
    """Topics recreated while Redis was kept: the index named offsets the new log never
    reaches, and a history polled for them until its timeout (504). It reads the partition."""
    from aiokafka import AIOKafkaProducer

    from projections.working.agent_index import BatchEntries
    from streams.eventlog.topic_admin import ensure_topics
    from streams.privacy.sealing import RecordSealer

    topics = Topics(f"stale{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 2)
    partition = partition_for("X1", 2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:  # the new log: three records of another agent
        for _ in range(3):
            await producer.send_and_wait(topics.items, b"{}", key=b"Y1", partition=partition)
    finally:
        await producer.stop()
    index = AgentIndex.from_url(redis_server_url, f"stale{uuid.uuid4().hex[:8]}")
    try:
        # What the index kept of the old, longer log.
        place = (topics.items, partition)
        await index.add_batch(
            BatchEntries({"X1": {place: [500, 501]}}, {place: 501}, {partition: 900})
        )
        await index.set_whole([partition], True)
        events = await asyncio.wait_for(
            read_agent_events(kafka_bootstrap, topics, "X1", 2, RecordSealer(None), index=index),
            30,
        )
    finally:
        await index.close()
    assert events.indexed is False
    assert events.events == []
