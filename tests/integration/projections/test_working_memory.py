"""Working memory on a real Redis, driven by the events the processor's pure core emits."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.batch import PlainRecords, RawRecord, process_batch
from processors.config import ProcessingConfig, load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.interfaces import ProjectionError
from projections.memory import StoredMemory
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.codec import encode_event
from schemas.memory_events import (
    DerivedEvent,
    ForgetAgent,
    MemoryForgotten,
    MemoryRecorded,
    SourcePosition,
)
from schemas.topics import Topics
from streams.runtime.devstack.redis_server import RedisServer, RedisServerError
from tests.agent_streams import CTX, reused_after_forgetting
from tests.integration.projections.lifecycle_events import (
    agent_forgotten,
    consolidated,
    forgotten_by_utility,
    promoted,
    summarised,
)

pytestmark = pytest.mark.integration

TOPIC = "agent-events"
CONFIG = load_processing_config()
EMBEDDER = HashingEmbedder()


@dataclass
class Processor:
    """The processor's bookkeeping around ``record``: per-agent state and log offsets."""

    config: ProcessingConfig = CONFIG
    partition_of: dict[str, int] = field(default_factory=dict)
    states: dict[str, AgentMemoryState] = field(default_factory=dict)
    next_offset: dict[int, int] = field(default_factory=dict)

    def observe(
        self,
        agent_id: str,
        content: str,
        *,
        importance: float | None = None,
        positioned: bool = True,
    ) -> list[DerivedEvent]:
        partition = self.partition_of.get(agent_id, 0)
        offset = self.next_offset.get(partition, 0)
        self.next_offset[partition] = offset + 1
        position = SourcePosition(topic=TOPIC, partition=partition, offset=offset)
        result = record(
            Observation(agent_id=agent_id, content=content, importance=importance),
            self.states.get(agent_id, AgentMemoryState()),
            config=self.config,
            embedder=EMBEDDER,
            config_version=self.config.version(EMBEDDER.id),
            position=position if positioned else None,
        )
        self.states[agent_id] = result.state
        return [result.memory, *result.forgotten]

    def observe_many(self, agent_id: str, contents: Sequence[str]) -> list[DerivedEvent]:
        return [event for content in contents for event in self.observe(agent_id, content)]

    def working_ids(self, agent_id: str) -> list[str]:
        """What the processor believes the agent's working memory is, newest first."""
        return list(reversed(self.states.get(agent_id, AgentMemoryState()).working_ids))


def recorded(events: Sequence[DerivedEvent]) -> list[MemoryRecorded]:
    return [e for e in events if isinstance(e, MemoryRecorded)]


def batches(events: Sequence[DerivedEvent], size: int) -> list[list[DerivedEvent]]:
    return [list(events[i : i + size]) for i in range(0, len(events), size)]


async def snapshot(
    store: RedisWorkingMemory, agents: Sequence[str], partitions: Sequence[int]
) -> tuple[list[list[StoredMemory]], list[int | None]]:
    memories = [await store.memories(agent) for agent in agents]
    offsets = [await store.applied_offset(TOPIC, p) for p in partitions]
    return memories, offsets


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("batch_size", [1, 5, 100])
async def test_fifo_keeps_the_ten_newest(
    working_store: RedisWorkingMemory, batch_size: int
) -> None:
    """Seed 004: twelve observations into a working memory of ten; the two oldest are gone."""
    processor = Processor()
    events = processor.observe_many("agent-1", [f"Event {i}" for i in range(12)])
    assert all(e.destination == "working" for e in events)

    for batch in batches(events, batch_size):
        await working_store.apply(batch)

    memories = await working_store.memories("agent-1")
    contents = [m.content for m in memories]
    assert len(memories) == 10
    assert "Event 0" not in contents
    assert "Event 1" not in contents
    assert [m.memory_id for m in memories] == processor.working_ids("agent-1")


async def test_memories_are_newest_first_and_read_back_unchanged(
    working_store: RedisWorkingMemory,
) -> None:
    processor = Processor()
    events = processor.observe_many("agent-1", [f"Event {i}" for i in range(5)])

    await working_store.apply(events)

    memories = await working_store.memories("agent-1")
    assert [m.seq for m in memories] == [4, 3, 2, 1, 0]
    assert memories == [StoredMemory.from_event(e) for e in reversed(recorded(events))]


async def test_unknown_agent_has_no_memories(working_store: RedisWorkingMemory) -> None:
    await working_store.apply(Processor().observe_many("agent-1", ["Event 0"]))

    assert await working_store.memories("agent-2") == []


async def test_forgotten_removes_the_memory(working_store: RedisWorkingMemory) -> None:
    processor = Processor()
    events = processor.observe_many("agent-1", ["Event 0", "Event 1", "Event 2"])
    middle = recorded(events)[1]
    await working_store.apply(events)

    await working_store.apply(
        [
            MemoryForgotten(
                agent_id="agent-1",
                memory_id=middle.memory_id,
                destination="working",
                reason="capacity",
                caused_by=middle.event_id,
                config_version=middle.config_version,
            )
        ]
    )

    assert [m.content for m in await working_store.memories("agent-1")] == ["Event 2", "Event 0"]


async def test_episodic_events_are_not_stored_but_their_position_is_applied(
    working_store: RedisWorkingMemory,
) -> None:
    """The checkpoint says how far the log was applied, so read-your-writes can rely on it."""
    processor = Processor(config=load_processing_config(episodic_capacity=1))
    events = [
        *processor.observe("agent-1", "Event 0", importance=0.9),
        *processor.observe("agent-1", "Event 1", importance=0.95),
    ]
    assert {e.destination for e in events} == {"episodic"}
    assert any(isinstance(e, MemoryForgotten) for e in events)

    await working_store.apply(events)

    assert await working_store.memories("agent-1") == []
    last = max(e.source_position.offset for e in events if e.source_position is not None)
    assert await working_store.applied_offset(TOPIC, 0) == last


async def test_consolidation_and_episodic_lifecycle_events_are_ignored_but_applied(
    working_store: RedisWorkingMemory,
) -> None:
    """A year end writes only to episodic memory (promoted copies, summaries, prunings) and
    the log (its audit record); working memory keeps its originals and moves its checkpoint."""
    processor = Processor()
    events = processor.observe_many("agent-1", ["Event 0", "Event 1", "Event 2"])
    await working_store.apply(events)
    before = await working_store.memories("agent-1")
    originals = recorded(events)

    def at(offset: int) -> SourcePosition:
        return SourcePosition(topic=TOPIC, partition=0, offset=offset)

    copies = [promoted(m, position=at(3)) for m in originals[:2]]
    summary = summarised(
        originals,
        level=1,
        content="three events",
        seq=3,
        trigger_event_id=originals[-1].source_event_id,
        position=at(4),
    )

    await working_store.apply([*copies, summary])
    assert await working_store.memories("agent-1") == before
    assert await working_store.applied_offset(TOPIC, 0) == 4

    await working_store.apply([consolidated("agent-1", copies, position=at(5))])
    assert await working_store.applied_offset(TOPIC, 0) == 5

    await working_store.apply([forgotten_by_utility(summary, position=at(6))])
    assert await working_store.memories("agent-1") == before
    assert await working_store.applied_offset(TOPIC, 0) == 6


SCHEDULE = "memory-schedule"


@pytest.mark.parametrize("one_call", [True, False], ids=["one-apply", "apply-per-event"])
async def test_agent_forgotten_erases_that_agent_only_in_log_order(
    working_store: RedisWorkingMemory, redis_server_url: str, one_call: bool
) -> None:
    """A's memories before the forget go, B's stay, and A's recording after it (a new life,
    published after the command) stays whether it arrives in the same apply call or later."""
    processor = Processor()
    before = [
        *processor.observe_many("agent-a", ["A saw the flood", "A moved out"]),
        *processor.observe_many("agent-b", ["B stayed", "B bought insurance"]),
    ]
    forget = agent_forgotten(
        "agent-a", position=SourcePosition(topic=SCHEDULE, partition=0, offset=7)
    )
    processor.states.pop("agent-a")
    after = processor.observe("agent-a", "A came back")
    log = [*before, forget, *after]

    if one_call:
        await working_store.apply(log)
    else:
        for event in log:
            await working_store.apply([event])

    assert [m.content for m in await working_store.memories("agent-a")] == ["A came back"]
    assert [m.content for m in await working_store.memories("agent-b")] == [
        "B bought insurance",
        "B stayed",
    ]
    assert await working_store.applied_offset(TOPIC, 0) == 4
    assert await working_store.applied_offset(SCHEDULE, 0) == 7


async def test_agent_forgotten_leaves_no_key_of_the_agent(
    working_store: RedisWorkingMemory, redis_server_url: str
) -> None:
    processor = Processor()
    await working_store.apply(processor.observe_many("agent-a", ["A saw the flood"]))
    await working_store.apply(processor.observe_many("agent-b", ["B stayed"]))
    admin = aioredis.Redis.from_url(redis_server_url)
    try:
        pattern = f"{working_store.namespace}:*agent-a*"
        assert [k async for k in admin.scan_iter(match=pattern)], "the agent had keys"

        at = SourcePosition(topic=SCHEDULE, partition=0, offset=0)
        await working_store.apply([agent_forgotten("agent-a", position=at, next_seq=1)])

        # Where its next life's seq begins, and nothing else: no memory, no reading.
        (left,) = [k async for k in admin.scan_iter(match=pattern)]
        assert await admin.hgetall(left) == {b"#erased_below": b"1"}
        # An agent that never recorded leaves nothing.
        later = SourcePosition(topic=SCHEDULE, partition=0, offset=1)
        await working_store.apply([agent_forgotten("ghost", position=later, next_seq=0)])
        assert [k async for k in admin.scan_iter(match=f"{working_store.namespace}:*ghost*")] == []
    finally:
        await admin.aclose()
    assert await working_store.memories("agent-a") == []
    assert [m.content for m in await working_store.memories("agent-b")] == ["B stayed"]
    assert await working_store.applied_offset(SCHEDULE, 0) == 1


async def test_an_old_event_replayed_after_agent_forgotten_does_not_bring_it_back(
    working_store: RedisWorkingMemory,
) -> None:
    """Below the applied offset an event is a replay and is skipped; the whole batch delivered
    again (the forget and the new life at their applied offsets, in order) ends where it was."""
    processor = Processor()
    old = processor.observe_many("agent-a", ["A saw the flood", "A moved out"])
    later = processor.observe_many("agent-b", ["B stayed"])
    forget = agent_forgotten(
        "agent-a", position=SourcePosition(topic=SCHEDULE, partition=0, offset=3)
    )
    processor.states.pop("agent-a")
    new_life = processor.observe("agent-a", "A came back")
    batch = [*old, *later, forget, *new_life]
    await working_store.apply(batch)
    once = await snapshot(working_store, ["agent-a", "agent-b"], [0])
    assert [m.content for m in once[0][0]] == ["A came back"]

    await working_store.apply(old)
    assert await snapshot(working_store, ["agent-a", "agent-b"], [0]) == once
    await working_store.apply(batch)
    assert await snapshot(working_store, ["agent-a", "agent-b"], [0]) == once


async def test_applying_a_batch_twice_equals_once(working_store: RedisWorkingMemory) -> None:
    processor = Processor()
    events = processor.observe_many("agent-1", [f"Event {i}" for i in range(14)])
    await working_store.apply(events)
    once = await snapshot(working_store, ["agent-1"], [0])

    await working_store.apply(events)

    assert await snapshot(working_store, ["agent-1"], [0]) == once


async def test_an_erasure_applied_again_leaves_the_agents_next_life(
    working_store: RedisWorkingMemory,
) -> None:
    """A takeover applies a suffix of the log again: the erasure was at its topic's applied
    offset, so it ran again and erased the next life, whose recording, below the applied
    offset of its own topic (another agent's recording came after it), was not applied
    again: the agent's working memory was lost."""
    topics = Topics()
    forget = ForgetAgent(event_id="forget-1", agent_id="W1", requested_at=datetime.now(UTC))

    def observe(offset: int, agent: str, text: str) -> RawRecord:
        value = encode_event(Observation(agent_id=agent, content=text, importance=0.1))
        return RawRecord(topics.observations, 0, offset, agent.encode(), value, "observation")

    records = [
        RawRecord(topics.schedule, 0, 0, b"W1", encode_event(forget), None, "tick"),
        observe(0, "W1", "the next life"),
        observe(1, "S1", "another agent, later on the same topic"),
    ]
    derived = process_batch(
        records,
        lambda a: AgentMemoryState(),
        ctx=CTX,
        failed_at=datetime.now(UTC),
        opener=PlainRecords(),
    ).derived
    await working_store.apply(derived)
    once = await snapshot(working_store, ["W1", "S1"], [0])
    assert [m.content for m in await working_store.memories("W1")] == ["the next life"]

    await working_store.apply(derived)

    assert await snapshot(working_store, ["W1", "S1"], [0]) == once


async def test_replaying_an_old_prefix_does_not_resurrect_evicted_memories(
    working_store: RedisWorkingMemory,
) -> None:
    processor = Processor()
    events = processor.observe_many("agent-1", [f"Event {i}" for i in range(12)])
    await working_store.apply(events)
    before = await working_store.memories("agent-1")

    await working_store.apply(events[:5])

    after = await working_store.memories("agent-1")
    assert after == before
    assert "Event 0" not in [m.content for m in after]


async def test_redelivery_completes_a_partly_applied_source_event(
    working_store: RedisWorkingMemory,
) -> None:
    """The recorded memory and the one it evicts share a source offset; a crash between the
    two must not leave the evicted memory behind once the offset is delivered again."""
    processor = Processor()
    await working_store.apply(processor.observe_many("agent-1", [f"Event {i}" for i in range(10)]))
    eleventh = processor.observe("agent-1", "Event 10")
    assert [type(e) for e in eleventh] == [MemoryRecorded, MemoryForgotten]

    await working_store.apply(eleventh[:1])
    await working_store.apply(eleventh)

    memories = await working_store.memories("agent-1")
    assert [m.memory_id for m in memories] == processor.working_ids("agent-1")
    assert "Event 0" not in [m.content for m in memories]


async def test_events_without_position_are_applied_idempotently(
    working_store: RedisWorkingMemory,
) -> None:
    processor = Processor()
    events = [
        event
        for i in range(12)
        for event in processor.observe("agent-1", f"Event {i}", positioned=False)
    ]

    await working_store.apply(events)
    await working_store.apply(events)

    memories = await working_store.memories("agent-1")
    assert [m.memory_id for m in memories] == processor.working_ids("agent-1")
    assert await working_store.applied_offset(TOPIC, 0) is None


async def test_applied_offset_is_the_highest_per_partition(
    working_store: RedisWorkingMemory,
) -> None:
    processor = Processor(partition_of={"agent-a": 0, "agent-b": 1})
    events = [
        *processor.observe_many("agent-a", [f"Event {i}" for i in range(5)]),
        *processor.observe_many("agent-b", [f"Event {i}" for i in range(3)]),
    ]
    assert await working_store.applied_offset(TOPIC, 0) is None

    await working_store.apply(events)
    await working_store.apply(events[:2])

    assert await working_store.applied_offset(TOPIC, 0) == 4
    assert await working_store.applied_offset(TOPIC, 1) == 2
    assert await working_store.applied_offset(TOPIC, 2) is None
    assert await working_store.applied_offset("other-topic", 0) is None


async def test_namespaces_do_not_share_data(
    working_store: RedisWorkingMemory, redis_server_url: str
) -> None:
    other = RedisWorkingMemory.from_url(redis_server_url, namespace=f"test-{uuid.uuid4().hex}")
    try:
        await working_store.apply(Processor().observe_many("agent-1", ["Event 0"]))

        assert await other.memories("agent-1") == []
        assert await other.applied_offset(TOPIC, 0) is None
    finally:
        await other.close()


async def test_apply_survives_a_flushed_script_cache(
    working_store: RedisWorkingMemory, redis_server_url: str
) -> None:
    processor = Processor()
    await working_store.apply(processor.observe_many("agent-1", ["Event 0"]))
    admin = aioredis.Redis.from_url(redis_server_url)
    try:
        await admin.script_flush()
    finally:
        await admin.aclose()

    await working_store.apply(processor.observe_many("agent-1", ["Event 1"]))

    assert [m.content for m in await working_store.memories("agent-1")] == ["Event 1", "Event 0"]


async def test_a_server_side_error_becomes_a_projection_error(
    working_store: RedisWorkingMemory, redis_server_url: str
) -> None:
    admin = aioredis.Redis.from_url(redis_server_url)
    try:
        await admin.set(f"{working_store.namespace}:wm:ids:agent-1", "not a sorted set")
    finally:
        await admin.aclose()

    with pytest.raises(ProjectionError, match=r"applying 1 events failed: .*WRONGTYPE"):
        await working_store.apply(Processor().observe_many("agent-1", ["Event 0"]))


async def test_an_unreachable_server_raises_a_readable_projection_error() -> None:
    port = closed_port()
    store = RedisWorkingMemory.from_url(f"redis://127.0.0.1:{port}/0", connect_timeout=1.0)
    try:
        where = rf"Redis at 127\.0\.0\.1:{port}"
        with pytest.raises(ProjectionError, match=rf"{where}.*ping failed: ConnectionError"):
            await store.ping()
        with pytest.raises(ProjectionError, match=rf"{where}.*applying 1 events failed"):
            await store.apply(Processor().observe_many("agent-1", ["Event 0"]))
        with pytest.raises(ProjectionError, match=rf"{where}.*reading the memories"):
            await store.memories("agent-1")
        with pytest.raises(ProjectionError, match=rf"{where}.*applied offset"):
            await store.applied_offset(TOPIC, 0)
    finally:
        await store.close()


AGENTS = ("agent-a", "agent-b", "agent-c")
PARTITION_OF = {"agent-a": 0, "agent-b": 0, "agent-c": 1}


@dataclass(frozen=True)
class Redelivery:
    processor: Processor
    batches: list[list[DerivedEvent]]
    replayed: int
    """How many leading batches arrive again at the end: any prefix when the events carry
    their source position; the whole log when they do not (an old prefix is then not a no-op)."""


@st.composite
def redeliveries(draw: st.DrawFn) -> Redelivery:
    """A derived log from random observations, cut into random batches.

    Cuts may fall between a memory and the evictions it caused, as a crash or a flush would.
    """
    processor = Processor(
        config=load_processing_config(working_capacity=2, episodic_capacity=2),
        partition_of=PARTITION_OF,
    )
    positioned = draw(st.booleans())
    steps = draw(
        st.lists(st.tuples(st.sampled_from(AGENTS), st.booleans()), min_size=8, max_size=30)
    )
    events: list[DerivedEvent] = []
    for i, (agent, important) in enumerate(steps):
        events += processor.observe(
            agent, f"Event {i}", importance=0.9 if important else None, positioned=positioned
        )
    cuts = draw(st.sets(st.integers(min_value=1, max_value=max(1, len(events) - 1))))
    bounds = [0, *sorted(cuts), len(events)]
    log = [events[a:b] for a, b in itertools.pairwise(bounds) if a < b]
    replayed = draw(st.integers(min_value=0, max_value=len(log))) if positioned else len(log)
    return Redelivery(processor, log, replayed)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=redeliveries())
async def test_applying_batches_twice_equals_once(redis_server_url: str, case: Redelivery) -> None:
    once = RedisWorkingMemory.from_url(redis_server_url, namespace=f"test-{uuid.uuid4().hex}")
    twice = RedisWorkingMemory.from_url(redis_server_url, namespace=f"test-{uuid.uuid4().hex}")
    try:
        for batch in case.batches:
            await once.apply(batch)
        for batch in case.batches:
            await twice.apply(batch)
            await twice.apply(batch)
        for batch in case.batches[: case.replayed]:
            await twice.apply(batch)

        expected = await snapshot(once, AGENTS, [0, 1])
        assert await snapshot(twice, AGENTS, [0, 1]) == expected
        assert [[m.memory_id for m in ms] for ms in expected[0]] == [
            case.processor.working_ids(agent) for agent in AGENTS
        ]
    finally:
        for store in (once, twice):
            await store.clear()
            await store.close()


def test_redis_server_starts_answers_and_stops() -> None:
    server = RedisServer()
    with server:
        assert server.running
        client = redis.Redis.from_url(server.url)
        try:
            assert client.ping() is True
        finally:
            client.close()
        port = server.port
        log = server.log_path
        assert log is not None
        assert log.exists()

    assert not server.running
    assert not log.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    with pytest.raises(RedisServerError, match="not running"):
        _ = server.url


def test_redis_server_with_a_data_dir_keeps_data_across_restarts(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        client = redis.Redis.from_url(server.url)
        try:
            client.set("kept", "yes")
        finally:
            client.close()

    with RedisServer(tmp_path) as server:
        client = redis.Redis.from_url(server.url)
        try:
            assert client.get("kept") == b"yes"
        finally:
            client.close()


def test_redis_server_that_cannot_start_says_why() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = RedisServer(port=port, start_timeout=10.0)
        with pytest.raises(RedisServerError, match=r"(?s)exited with code.*Address already in use"):
            server.start()
    assert not server.running


async def test_apply_recovers_when_the_server_restarts(tmp_path: Path) -> None:
    """Pooled connections die and the script cache empties; the data (append-only) stays."""
    server = RedisServer(tmp_path).start()
    port = server.port
    store = RedisWorkingMemory.from_url(server.url, namespace="restart")
    processor = Processor()
    try:
        await store.apply(processor.observe_many("agent-1", ["Event 0"]))
        server.stop()
        server = RedisServer(tmp_path, port=port).start()

        await store.apply(processor.observe_many("agent-1", ["Event 1"]))

        assert [m.content for m in await store.memories("agent-1")] == ["Event 1", "Event 0"]
        assert await store.applied_offset(TOPIC, 0) == 1
    finally:
        await store.close()
        server.stop()


async def test_a_server_that_stops_answering_raises_within_the_timeout() -> None:
    """A stopped server never answers, so only the store's own 0.5 s timeout ends the apply:
    it must raise the store's error naming the timeout. The test's bound, sixty times that,
    only keeps a store that waits forever from hanging the test (it fails with a bare
    TimeoutError instead)."""
    with RedisServer() as server:
        store = RedisWorkingMemory.from_url(server.url, namespace="frozen", socket_timeout=0.5)
        events = Processor().observe_many("agent-1", ["Event 0"])
        try:
            await store.ping()
            os.kill(server.pid, signal.SIGSTOP)
            try:
                with pytest.raises(ProjectionError, match="applying 1 events failed: TimeoutError"):
                    await asyncio.wait_for(store.apply(events), timeout=30)
            finally:
                os.kill(server.pid, signal.SIGCONT)
            await store.apply(events)
            assert [m.content for m in await store.memories("agent-1")] == ["Event 0"]
        finally:
            await store.close()


def test_redis_server_refuses_a_second_start_and_a_missing_binary(tmp_path: Path) -> None:
    with RedisServer() as server, pytest.raises(RedisServerError, match="already running"):
        server.start()

    missing = RedisServer(executable=tmp_path / "no-such-redis-server")
    with pytest.raises(RedisServerError, match="could not run"):
        missing.start()
    assert not missing.running


async def test_a_forgetting_applied_again_keeps_a_later_memory_under_its_id(
    working_store: RedisWorkingMemory,
) -> None:
    """x is pushed out of working memory (capacity 4) by four decisions, then published again
    (its memory forgotten, the id records a new one). A retry of the batch applies the first
    life's forgetting again, at its topic's applied offset: it named seq 0, and the memory
    under x is now seq 5, which stays (it deleted it, and refused its recording as evicted)."""
    log, _ = reused_after_forgetting()
    await working_store.apply(log)
    await working_store.apply(log)

    held = {m.source_event_id: m.content for m in await working_store.memories("A1")}
    assert held["x"] == "life 5 of x"
