"""Process faults of a real ``engram worker`` (issue 4, item 6): SIGKILL in the middle of a
stream, and SIGTERM, which must drain, flush and commit.

The reference is the pure batch function (streams/README.md, invariant 2) over the published
records. An agent's events arrive on two topics (observations and decisions), and which of the two a
worker fetches first is up to the fetcher, so no single "faultless" interleaving exists; the order a
worker applied is in the log (every agent event is recorded once, with the agent's next ``seq``).
Re-deriving every agent's events in that order must give exactly the derived log the crashed and
restarted workers wrote, and the projections must hold exactly what that log implies: a redelivery
derived twice, a lost batch or a state folded back wrongly after the crash all show as a difference.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, TopicPartition

from processors.batch import RawRecord, process_batch
from processors.embedding import embedder_from_name
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState
from processors.summarising import ExtractiveSummariser
from projections.episodic.edge import EdgeEpisodicMemory
from projections.memory import StoredMemory
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import AgentEvent
from schemas.codec import encode_event
from schemas.memory_events import (
    DerivedEvent,
    MemoryForgotten,
    MemoryRecorded,
    MemoryWritten,
)
from schemas.topics import Topics
from streams.eventlog.derived_log import read_partitions
from streams.eventlog.publisher import AsyncPublisher, Position
from streams.eventlog.topic_admin import ensure_topics
from streams.runtime.devstack.broker import TansuBroker
from streams.settings import EngramSettings, processing_config
from tests.benchmarks.workload import make_events
from tests.integration.streams.isolated import isolated_settings, log_sealer
from tests.integration.streams.worker_process import WorkerProcess, worker_environment

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PARTITIONS = 4
ALL_APPLIED_WITHIN_S = 150.0
"""Generous: a restart waits out the dead member's session, then folds the derived log back."""
EXIT_WITHIN_S = 60.0
PAUSE_S = 4.0
"""How long Redis holds writes (CLIENT PAUSE) while SIGTERM arrives."""

Published = dict[tuple[str, int], int]
"""The last offset published to each agent topic partition."""


@dataclass
class Stream:
    """A test's own topics, stores and worker, and what was published to it."""

    settings: EngramSettings
    topics: Topics
    worker: WorkerProcess
    working: RedisWorkingMemory
    redis_url: str
    events: list[AgentEvent]
    positions: list[Position]

    @property
    def last_offsets(self) -> Published:
        last: Published = {}
        for p in self.positions:
            last[(p.topic, p.partition)] = max(last.get((p.topic, p.partition), -1), p.offset)
        return last

    @property
    def group(self) -> str:
        return f"{self.settings.topic_prefix}{self.settings.app_id}"

    def open_edge(self) -> EdgeEpisodicMemory:
        """The worker's Edge store (as ``open_episodic_store`` lays it out); only once the
        worker has stopped, since the shard is the worker's while it runs."""
        assert not self.worker.running
        assert self.settings.qdrant_path is not None
        path = self.settings.qdrant_path / self.settings.qdrant_collection
        assert (path / "shard").is_dir(), f"the worker made no Edge shard at {path}"
        return EdgeEpisodicMemory.open(path, deriving(self.settings).embedder.dim)


@pytest.fixture
async def make_stream(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> AsyncIterator[Callable[[str], Stream]]:
    """Unique topics, namespace and Edge shard per stream. The worker's output is printed at
    teardown, which pytest shows only when the test failed."""
    streams: list[Stream] = []

    def make(name: str) -> Stream:
        prefix = f"{name}{uuid.uuid4().hex[:8]}."
        settings = isolated_settings(
            prefix, tmp_path / name, partitions=PARTITIONS, schedule_interval=0
        )
        env = worker_environment(settings, kafka_bootstrap, redis_server_url)
        stream = Stream(
            settings=settings,
            topics=Topics(prefix),
            worker=WorkerProcess(env, tmp_path / f"{name}-worker.log"),
            working=RedisWorkingMemory.from_url(redis_server_url, settings.redis_namespace),
            redis_url=redis_server_url,
            events=[],
            positions=[],
        )
        streams.append(stream)
        return stream

    yield make
    for stream in streams:
        stream.worker.stop()
        await stream.working.clear()
        await stream.working.close()
        # An Edge shard preallocates ~143 MB: not left behind in pytest's kept directories.
        shutil.rmtree(stream.settings.qdrant_path or "", ignore_errors=True)
        print(f"===== {stream.worker.output.name} (last lines) =====")
        print(stream.worker.tail(80))


async def publish(bootstrap: str, stream: Stream, events: list[AgentEvent]) -> None:
    await ensure_topics(bootstrap, stream.topics, PARTITIONS)
    async with AsyncPublisher(bootstrap, topics=stream.topics, linger=0.05) as publisher:
        stream.positions = await publisher.publish_many(events)
    stream.events = events


async def applied_count(stream: Stream) -> int:
    """How many published records Redis says are applied (offsets per partition are dense)."""
    done = 0
    for (topic, partition), last in stream.last_offsets.items():
        applied = await stream.working.applied_offset(topic, partition)
        done += 0 if applied is None else min(applied, last) + 1
    return done


async def wait_until_applied(stream: Stream, count: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while (done := await applied_count(stream)) < count:
        stream.worker.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{done} of {count} records applied after {timeout}s:\n{stream.worker.tail()}"
            )
        await asyncio.sleep(0.02)
    return done


async def committed_offsets(bootstrap: str, stream: Stream) -> dict[tuple[str, int], int | None]:
    """The consumer group's committed offsets of the agent topics (the next offset to read)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=stream.group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        return {
            (topic, partition): await consumer.committed(TopicPartition(topic, partition))
            for topic in stream.topics.agent_inputs
            for partition in range(stream.settings.partitions)
        }
    finally:
        await consumer.stop()


async def applied_offsets(
    stream: Stream, episodic: EdgeEpisodicMemory
) -> dict[tuple[str, int], tuple[int | None, int | None]]:
    return {
        (topic, partition): (
            await stream.working.applied_offset(topic, partition),
            await episodic.applied_offset(topic, partition),
        )
        for topic in stream.topics.agent_inputs
        for partition in range(stream.settings.partitions)
    }


def deriving(settings: EngramSettings) -> Deriving:
    """What the worker derives with, from the same settings it was started with."""
    embedder = embedder_from_name(settings.embedder)
    summariser = ExtractiveSummariser()
    config = processing_config(settings)
    return Deriving(config, embedder, summariser, config.version(embedder.id, summariser.id))


def rederived(stream: Stream, logged: Sequence[DerivedEvent]) -> list[DerivedEvent]:
    """Every published record through the pure batch function, each agent's in the order the
    log says the workers applied them (by the ``seq`` of its recording)."""
    seq_of = {
        e.source_event_id: (e.agent_id, e.seq) for e in logged if isinstance(e, MemoryRecorded)
    }
    in_order = [
        (
            seq_of[event.event_id],
            RawRecord(
                topic=position.topic,
                partition=position.partition,
                offset=position.offset,
                key=event.agent_id.encode(),
                value=encode_event(event),
                expected_type=stream.topics.event_type_of(position.topic),
            ),
        )
        for event, position in zip(stream.events, stream.positions, strict=True)
    ]
    result = process_batch(
        [record for _, record in sorted(in_order, key=lambda pair: pair[0])],
        lambda _: AgentMemoryState(),
        ctx=deriving(stream.settings),
        failed_at=datetime.now(UTC),
    )
    assert not result.dead_letters, result.dead_letters[:3]
    return result.derived


def memories_implied(
    events: Sequence[DerivedEvent],
) -> dict[str, dict[str, list[StoredMemory]]]:
    """Per store, per agent: what the derived events put there and did not forget, newest first."""
    kept: dict[str, dict[str, dict[str, StoredMemory]]] = {"working": {}, "episodic": {}}
    for event in events:
        if isinstance(event, MemoryWritten):
            agent = kept[event.destination].setdefault(event.agent_id, {})
            agent[event.memory_id] = StoredMemory.from_event(event)
        elif isinstance(event, MemoryForgotten):
            kept[event.destination].get(event.agent_id, {}).pop(event.memory_id, None)
    return {
        store: {agent: newest_first(memories.values()) for agent, memories in agents.items()}
        for store, agents in kept.items()
    }


def newest_first(memories: Iterable[StoredMemory]) -> list[StoredMemory]:
    return sorted(memories, key=lambda m: (m.seq, m.memory_id), reverse=True)


async def assert_exactly_once(bootstrap: str, stream: Stream) -> Counter[str]:
    """Every published event is remembered once, the log is what the pure function derives, and
    Redis and Qdrant Edge hold exactly what that log implies. Needs the worker stopped (the
    Edge shard is the worker's while it runs)."""
    assert not stream.worker.running
    async with log_sealer(stream.redis_url, stream.settings.redis_namespace) as sealer:
        logged = await read_partitions(
            bootstrap,
            [stream.topics.items, stream.topics.lifecycle],
            range(stream.settings.partitions),
            sealer=sealer,
        )
    doubled = {i: n for i, n in Counter(e.event_id for e in logged).items() if n > 1}
    assert not doubled, f"{len(doubled)} derived events are on the log more than once"
    recorded = [e for e in logged if isinstance(e, MemoryRecorded)]
    sources = Counter(e.source_event_id for e in recorded)
    published = {e.event_id for e in stream.events}
    missing = published - set(sources)
    assert not missing, f"{len(missing)} of {len(published)} published events have no memory"
    assert set(sources) == published, "memories of events that were never published"
    assert max(sources.values()) == 1, "an agent event was recorded twice"
    written = Counter(e.memory_id for e in logged if isinstance(e, MemoryWritten))
    assert max(written.values()) == 1, "a memory was written twice"

    expected = rederived(stream, logged)
    want = {e.event_id: e for e in expected}
    got = {e.event_id: e for e in logged}
    assert not set(want) - set(got), f"{len(set(want) - set(got))} derived events are missing"
    assert not set(got) - set(want), f"{len(set(got) - set(want))} derived events are extra"
    differing = [i for i in want if got[i] != want[i]]
    assert not differing, f"{len(differing)} derived events differ, e.g. {got[differing[0]]}"

    implied = memories_implied(expected)
    agents = sorted({e.agent_id for e in stream.events})
    for agent in agents:
        in_redis = await stream.working.memories(agent)
        assert in_redis == implied["working"].get(agent, []), f"working memory of {agent}"
    episodic = stream.open_edge()
    try:
        for agent in agents:
            in_edge = newest_first(await episodic.memories(agent, 10_000, levels=None))
            assert in_edge == implied["episodic"].get(agent, []), f"episodic memory of {agent}"
        total_episodic = sum(len(m) for m in implied["episodic"].values())
        assert await episodic.count() == total_episodic
        marks = await applied_offsets(stream, episodic)
    finally:
        await episodic.close()
    for tp, last in stream.last_offsets.items():
        assert marks[tp] == (last, last), f"applied offsets of {tp}"
    return Counter(e.event_type for e in logged) + Counter(
        {
            "in working memory": sum(len(m) for m in implied["working"].values()),
            "in episodic memory": total_episodic,
        }
    )


async def test_a_worker_killed_mid_stream_and_restarted_remembers_everything_once(
    kafka_bootstrap: str, make_stream: Callable[[str], Stream]
) -> None:
    stream = make_stream("sigkill")
    await publish(kafka_bootstrap, stream, make_events(12_000, agents=240))
    total = len(stream.positions)

    stream.worker.start()
    await wait_until_applied(stream, total * 3 // 10, ALL_APPLIED_WITHIN_S)
    stream.worker.kill()
    at_kill = await applied_count(stream)
    assert at_kill < total, "the worker finished before it was killed: nothing was tested"
    # Offsets are committed only after both stores applied the records: never ahead of Redis,
    # which writes its positions with the data. Qdrant Edge's positions on disk may lag what it
    # applied by its group commit (ENGRAM_EDGE_SYNC_SECONDS), so a kill can leave them behind a
    # commit; the restart re-applies past them, which the exactly-once check below holds it to.
    committed = await committed_offsets(kafka_bootstrap, stream)
    episodic = stream.open_edge()
    try:
        marks = await applied_offsets(stream, episodic)
    finally:
        await episodic.close()
    for tp, (in_redis, _in_edge) in marks.items():
        applied = -1 if in_redis is None else in_redis
        assert (committed[tp] or 0) <= applied + 1, (
            f"{tp}: committed {committed[tp]}, applied {marks[tp]}"
        )
    uncommitted = at_kill - sum(n or 0 for n in committed.values())

    stream.worker.start()
    await wait_until_applied(stream, total, ALL_APPLIED_WITHIN_S)
    assert stream.worker.terminate(EXIT_WITHIN_S) == 0, stream.worker.tail()

    counts = await assert_exactly_once(kafka_bootstrap, stream)
    print(f"killed at {at_kill} of {total} applied, {uncommitted} of them uncommitted; {counts}")
    # The workload exercises both stores and every lifecycle rule a simulation agent triggers.
    for what in (
        "in working memory",
        "in episodic memory",
        "memory.forgotten",
        "memory.promoted",
        "memory.summarised",
        "memory.consolidated",
    ):
        assert counts[what] > 0, f"no {what}: {counts}"


async def test_sigterm_drains_the_batch_in_flight_commits_and_exits(
    kafka_bootstrap: str, redis_server_url: str, make_stream: Callable[[str], Stream]
) -> None:
    """Redis holds the worker's writes for a moment, so SIGTERM finds a batch half done every
    time: it must be finished, and its offsets committed, before the worker exits by itself."""
    stream = make_stream("sigterm")
    stream.worker.start()
    await publish(kafka_bootstrap, stream, make_events(8_000, agents=200, seed=11))
    total = len(stream.positions)
    await wait_until_applied(stream, total * 3 // 10, ALL_APPLIED_WITHIN_S)
    redis = aioredis.Redis.from_url(redis_server_url)
    try:
        await redis.client_pause(int(PAUSE_S * 1000), all=False)  # writes wait, reads go on
        await asyncio.sleep(PAUSE_S / 3)
        held_at = await applied_count(stream)
        code = await asyncio.to_thread(stream.worker.terminate, EXIT_WITHIN_S)
    finally:
        await redis.client_unpause()
        await redis.aclose()
    assert code == 0, f"exit code {code}:\n{stream.worker.tail()}"
    committed = await committed_offsets(kafka_bootstrap, stream)
    episodic = stream.open_edge()
    try:
        marks = await applied_offsets(stream, episodic)
    finally:
        await episodic.close()
    for tp, (in_redis, in_edge) in marks.items():
        # Nothing applied but uncommitted (a redelivery to skip), nothing committed unapplied.
        # The test leans on timing (Redis paused under a batch): a failure must show what
        # the worker did, so each assertion carries its last log lines.
        assert in_redis == in_edge, (
            f"{tp}: Redis applied {in_redis}, Edge {in_edge}\n{stream.worker.tail()}"
        )
        expected = None if in_redis is None else in_redis + 1
        assert committed[tp] == expected, (
            f"{tp}: committed {committed[tp]}, but the stores applied up to {in_redis}\n"
            f"{stream.worker.tail()}"
        )

    # Redis held the batch's writes when SIGTERM came: the worker finished it before exiting.
    stopped_at = await applied_count(stream)
    assert held_at < stopped_at < total, (
        f"the batch in flight was not finished: {held_at} applied while Redis held writes, "
        f"{stopped_at} at exit, of {total}\n{stream.worker.tail()}"
    )
    messages = [str(r.get("msg", "")) for r in stream.worker.log_records()]
    assert any(m.startswith("signalled: stopping") for m in messages), stream.worker.tail()
    assert any(m.startswith("stopping: draining the batch in flight") for m in messages), (
        stream.worker.tail()
    )

    stream.worker.start()
    await wait_until_applied(stream, total, ALL_APPLIED_WITHIN_S)
    assert stream.worker.terminate(EXIT_WITHIN_S) == 0, stream.worker.tail()
    committed = await committed_offsets(kafka_bootstrap, stream)
    for tp, last in stream.last_offsets.items():
        assert committed[tp] == last + 1, f"{tp}: committed {committed[tp]} after the end"
    counts = await assert_exactly_once(kafka_bootstrap, stream)
    print(f"stopped at {stopped_at} of {total} applied; {counts}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_signal_while_the_worker_starts_stops_it_once_started(
    make_stream: Callable[[str], Stream], sig: signal.Signals
) -> None:
    """While Faust starts: SIGTERM's default ended the worker at once (exit -15), and Ctrl-C
    cancelled Faust's start half way, which left one of its threads running: the worker hung
    until killed. The signal is kept, and the worker stops as usual once started."""
    stream = make_stream(f"start{sig.name.lower()}")
    stream.worker.start()
    deadline = time.monotonic() + EXIT_WITHIN_S
    while not any("Starting" in str(r.get("msg")) for r in stream.worker.log_records()):
        stream.worker.check_alive()
        assert time.monotonic() < deadline, stream.worker.tail()
        await asyncio.sleep(0.01)
    code = await asyncio.to_thread(stream.worker.terminate, EXIT_WITHIN_S, sig)
    assert code == 0, f"exit code {code}:\n{stream.worker.tail()}"
    messages = [str(r.get("msg", "")) for r in stream.worker.log_records()]
    assert any(m.startswith("signalled: stopping") for m in messages), stream.worker.tail()
    assert "Traceback" not in stream.worker.tail(400)


async def test_a_worker_whose_broker_is_gone_stops_within_its_stop_timeout(
    redis_server_url: str, tmp_path: Path
) -> None:
    """Signalled after its broker died, a worker waited in Faust's last offset commit, which
    retries the broker without end: it never exited by itself, and what stopped it (a kill)
    set its exit code. Now it gives up after ENGRAM_STOP_TIMEOUT and exits 75 (the broker is
    unreachable), committing nothing: what it held is redelivered."""
    prefix = f"brokergone{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(
        prefix, tmp_path / "stream", partitions=PARTITIONS, schedule_interval=0
    )
    with TansuBroker() as broker:
        env = worker_environment(settings, broker.bootstrap, redis_server_url)
        stream = Stream(
            settings=settings,
            topics=Topics(prefix),
            worker=WorkerProcess(env | {"ENGRAM_STOP_TIMEOUT": "8"}, tmp_path / "worker.log"),
            working=RedisWorkingMemory.from_url(redis_server_url, settings.redis_namespace),
            redis_url=redis_server_url,
            events=[],
            positions=[],
        )
        try:
            stream.worker.start()
            await publish(broker.bootstrap, stream, make_events(200, agents=20, seed=5))
            await wait_until_applied(stream, len(stream.positions), ALL_APPLIED_WITHIN_S)
            broker.kill()
            code = await asyncio.to_thread(stream.worker.terminate, 60)
        finally:
            stream.worker.stop()
            await stream.working.clear()
            await stream.working.close()
    assert code == 75, f"exit code {code}:\n{stream.worker.tail()}"
    messages = [str(r.get("msg", "")) for r in stream.worker.log_records()]
    assert any(m.startswith("not stopped within ENGRAM_STOP_TIMEOUT=8 s") for m in messages), (
        stream.worker.tail()
    )
