"""What the episodic projector commits: every partition up to its oldest event still waiting,
including partitions the last fetch did not touch. A batch's recordings wait on
``memory.items`` until its marker comes on ``memory.lifecycle``; when the marker comes in a
fetch of its own (the end of the stream), the recordings are applied, and their partition's
commit must move too, or a restart (and anything watching the group) sees them unapplied."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.memory import StoredMemory
from schemas.agent_events import Observation
from schemas.codec import encode_event
from schemas.memory_events import (
    DerivedEvent,
    DerivedUpTo,
    LogRange,
    MemoryRecorded,
    SourcePosition,
)
from schemas.topics import Topics
from streams.rebuild.projector import EpisodicProjector

TOPICS = Topics()
ITEMS = TopicPartition(TOPICS.items, 0)
LIFECYCLE = TopicPartition(TOPICS.lifecycle, 0)
AT = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Record:
    offset: int
    value: bytes


Fetched = dict[TopicPartition, list[Record]]


@dataclass
class Consumer:
    commits: dict[TopicPartition, int] = field(default_factory=dict)
    store: Store | None = None
    """When given, every commit checks that what the store applied was synced first."""

    def assignment(self) -> set[TopicPartition]:
        return {ITEMS, LIFECYCLE}

    async def getmany(self, timeout_ms: int, max_records: int) -> Fetched:
        await asyncio.sleep(timeout_ms / 1000)
        return {}  # an idle stream

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.commits.get(tp)

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        if self.store is not None:
            assert self.store.synced == self.store.applied, "committed before the store synced"
        self.commits.update({tp: meta.offset for tp, meta in offsets.items()})


@dataclass
class Store:
    applied: list[str] = field(default_factory=list)
    synced: list[str] = field(default_factory=list)

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        self.applied.extend(e.event_id for e in events)

    async def advance(self, positions: Mapping[tuple[str, int], int]) -> None:
        return None

    async def sync(self) -> None:
        self.synced = list(self.applied)

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        return None

    async def memories(self, agent_id: str) -> list[StoredMemory]:
        return []

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


def recordings(count: int) -> list[MemoryRecorded]:
    state, out = AgentMemoryState(), []
    for i in range(count):
        event = Observation(agent_id="A", event_id=f"o-{i}", content=f"flood {i}", importance=0.9)
        position = SourcePosition(topic=TOPICS.observations, partition=0, offset=i)
        made = record(
            event,
            state,
            config=load_processing_config(),
            embedder=HashingEmbedder(),
            config_version="v",
            position=position,
        )
        state = made.state
        out.append(made.memory)
    return out


def marker(event_id: str, upto: int | None, items: LogRange | None) -> DerivedUpTo:
    positions = (
        ()
        if upto is None
        else (SourcePosition(topic=TOPICS.observations, partition=0, offset=upto),)
    )
    return DerivedUpTo(event_id=event_id, occurred_at=AT, partition=0, upto=positions, items=items)


async def test_a_marker_fetched_alone_moves_the_commit_of_the_recordings_it_releases() -> None:
    store, consumer = Store(), Consumer()
    projector = EpisodicProjector("unused:9092", TOPICS, store, "group")  # type: ignore[arg-type]
    projector._consumer = consumer  # type: ignore[assignment]
    recorded = recordings(2)

    await projector.project(
        {
            LIFECYCLE: [Record(0, encode_event(marker("opening", None, None)))],
            ITEMS: [Record(i, encode_event(e)) for i, e in enumerate(recorded)],
        }
    )
    assert consumer.commits[ITEMS] == 0, "the recordings wait for their batch's marker"

    await projector.project(
        {LIFECYCLE: [Record(1, encode_event(marker("batch", 1, LogRange(first=0, last=1))))]}
    )

    assert store.applied == [e.event_id for e in recorded]
    assert consumer.commits == {ITEMS: 2, LIFECYCLE: 2}


def checked_projector(
    store: Store, commit_every: float = 0.0
) -> tuple[EpisodicProjector, Consumer]:
    """A projector on ``store`` whose consumer checks every commit came after a sync."""
    consumer = Consumer(store=store)
    projector = EpisodicProjector(
        "unused:9092",
        TOPICS,
        store,  # type: ignore[arg-type]
        "group",
        commit_every=commit_every,
    )
    projector._consumer = consumer  # type: ignore[assignment]
    return projector, consumer


async def test_the_commit_waits_for_the_store_to_make_what_it_applied_durable() -> None:
    """Qdrant Edge lets its durable checkpoint lag its applies (group commit): a commit that
    did not sync first would vouch for memories a power loss could take."""
    store = Store()
    projector, consumer = checked_projector(store)
    recorded = recordings(3)

    await projector.project(
        {
            LIFECYCLE: [Record(0, encode_event(marker("batch", 2, LogRange(first=0, last=2))))],
            ITEMS: [Record(i, encode_event(e)) for i, e in enumerate(recorded)],
        }
    )

    assert store.applied == [e.event_id for e in recorded]
    assert consumer.commits == {ITEMS: 3, LIFECYCLE: 1}


async def test_commits_come_at_most_once_per_interval_and_then_cover_every_fetch() -> None:
    """Each commit syncs the store, so a commit per fetch would be a flush per fetch."""
    store = Store()
    projector, consumer = checked_projector(store, commit_every=3600)
    recorded = recordings(4)

    def fetch(first: int, last: int) -> Fetched:
        mark = marker(f"batch-{first}", last, LogRange(first=first, last=last))
        return {
            LIFECYCLE: [Record(first, encode_event(mark))],
            ITEMS: [Record(i, encode_event(recorded[i])) for i in range(first, last + 1)],
        }

    await projector.project(fetch(0, 1))
    assert consumer.commits == {ITEMS: 2, LIFECYCLE: 1}
    await projector.project(fetch(2, 3))
    assert store.applied == [e.event_id for e in recorded]
    assert consumer.commits == {ITEMS: 2, LIFECYCLE: 1}, "within the interval: no commit"
    assert store.synced == [e.event_id for e in recorded[:2]]

    assert projector._committed_at is not None
    projector._committed_at -= 3600
    await projector.project({})
    assert consumer.commits == {ITEMS: 4, LIFECYCLE: 3}
    assert store.synced == store.applied


async def test_an_idle_projector_commits_what_the_interval_held_back() -> None:
    store = Store()
    projector, consumer = checked_projector(store, commit_every=0.2)
    recorded = recordings(2)
    await projector.project({ITEMS: [Record(0, encode_event(recorded[0]))]})
    await projector.project({ITEMS: [Record(1, encode_event(recorded[1]))]})
    assert consumer.commits == {ITEMS: 1}

    running = asyncio.create_task(projector._run())
    try:
        async with asyncio.timeout(10):
            while consumer.commits != {ITEMS: 2}:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        running.cancel()
    assert store.synced == store.applied
