"""The order a worker writes a batch in: every derived event and dead letter, then, once the
broker took them, one "logged up to" marker per partition number, and only then the
projections. Two awaited round trips per batch, whatever the batch holds."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from processors.batch import RawRecord
from projections.memory import StoredMemory
from schemas.agent_events import Observation
from schemas.codec import decode_derived_record, encode_event
from schemas.memory_events import DerivedEvent, DerivedUpTo, ScheduleTick, SourcePosition
from schemas.sealed import is_sealed
from schemas.topics import Topics
from streams.worker import snapshotting
from streams.worker.batch_send import Landed
from streams.worker.pipeline import IngestPipeline
from streams.worker.snapshotting import Snapshotter
from tests.agent_streams import CONFIG, EMBEDDER, START
from tests.unit.streams.worker.test_snapshotting import Log

TOPICS = Topics()


@dataclass
class Metadata:
    topic: str
    partition: int
    offset: int


@dataclass
class Broker:
    """Takes records as a producer hands them over, and answers only when ``flush`` runs: the
    round trips a worker waits for are the flushes it needs."""

    logs: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)
    pending: list[tuple[asyncio.Future[Metadata], Metadata]] = field(default_factory=list)
    journal: list[str] = field(default_factory=list)
    round_trips: int = 0

    async def send(
        self, topic: str, key: bytes | None, value: bytes, partition: int | None
    ) -> asyncio.Future[Metadata]:
        where = (topic, partition or 0)
        log = self.logs.setdefault(where, [])
        log.append(value)
        future: asyncio.Future[Metadata] = asyncio.get_running_loop().create_future()
        self.pending.append((future, Metadata(topic, where[1], len(log) - 1)))
        if is_sealed(value):
            kind = "sealed"  # a worker with a keyring: what it seals is not read here
        elif topic == TOPICS.deadletter:
            kind = "dead"
        else:
            kind = decode_derived_record(value).event_type
        self.journal.append(f"send {kind}")
        return future

    async def run(self) -> None:
        """Answer whatever is pending, a round trip at a time, until cancelled."""
        while True:
            await asyncio.sleep(0)
            if self.pending:
                self.round_trips += 1
                for future, metadata in self.pending:
                    future.set_result(metadata)
                self.pending = []


@dataclass
class Store:
    journal: list[str]
    marks: dict[tuple[str, int], int] = field(default_factory=dict)

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        self.journal.append(f"apply {len(events)}")

    async def advance(self, positions: Mapping[tuple[str, int], int]) -> None:
        for key, offset in positions.items():
            self.marks[key] = max(self.marks.get(key, -1), offset)

    async def memories(self, agent_id: str) -> list[StoredMemory]:
        return []

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        return self.marks.get((topic, partition))

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


def observation(n: int, partition: int) -> RawRecord:
    event = Observation(
        agent_id="A", event_id=f"a-{n}", content=f"flood {n}", importance=0.3, step=0
    )
    return RawRecord(TOPICS.observations, partition, n, b"A", encode_event(event), "observation")


async def test_a_batch_logs_its_events_then_its_markers_then_applies_them() -> None:
    broker = Broker()
    store = Store(broker.journal)
    pipeline = IngestPipeline(CONFIG, EMBEDDER, TOPICS, store, None, broker.send)
    answering = asyncio.create_task(broker.run())
    tick = ScheduleTick(
        event_id="t", occurred_at=START + timedelta(hours=1), partition=1, interval_seconds=60
    )
    try:
        early = tick.model_copy(update={"event_id": "t0", "occurred_at": START})
        first = [
            observation(0, 0),
            observation(1, 0),
            RawRecord(TOPICS.schedule, 1, 2, None, encode_event(early), None, "tick"),
        ]
        await pipeline.handle(first)
        opened = broker.round_trips
        second = [
            observation(2, 0),
            RawRecord(TOPICS.observations, 1, 5, b"B", b"{not json", "observation"),
            RawRecord(TOPICS.schedule, 1, 3, None, encode_event(tick), None, "tick"),
        ]
        broker.journal.clear()
        await pipeline.handle(second)
    finally:
        answering.cancel()

    assert opened == 1 + 2, "first markers for the new partitions, then the batch's two"
    assert broker.round_trips - opened == 2, "the events and dead letters, then the markers"
    assert broker.journal == [
        "send memory.recorded",
        "send dead",
        "send memory.logged",
        "send memory.logged",
        "apply 1",
    ]
    markers = [
        decode_derived_record(value)
        for (topic, _), values in broker.logs.items()
        if topic == TOPICS.lifecycle
        for value in values
    ]
    assert all(isinstance(m, DerivedUpTo) for m in markers)
    last = {m.partition: m for m in markers if isinstance(m, DerivedUpTo)}
    assert last[0].upto == (SourcePosition(topic=TOPICS.observations, partition=0, offset=2),)
    assert last[0].items is not None
    assert (last[0].items.first, last[0].items.last) == (2, 2)
    assert set(last[1].upto) == {
        SourcePosition(topic=TOPICS.observations, partition=1, offset=5),
        SourcePosition(topic=TOPICS.schedule, partition=1, offset=3),
    }
    assert last[1].items is None
    assert last[1].lifecycle is None
    assert store.marks[(TOPICS.schedule, 1)] == 3, "the tick derived nothing, and is applied"


async def test_markers_leave_as_record_batches_of_their_own_and_say_where_they_landed() -> None:
    """A closed batch leaves without the producer's linger; where each marker landed is what
    the snapshots and the agent index read."""
    broker = Broker()
    batches: list[tuple[str, int, int]] = []

    async def send_batch(
        topic: str, partition: int, records: Sequence[tuple[bytes | None, bytes]]
    ) -> Any:
        batches.append((topic, partition, len(records)))
        sent = [await broker.send(topic, key, value, partition) for key, value in records]

        async def landed() -> list[Landed]:
            return [Landed(topic, partition, (await each).offset) for each in sent]

        return landed()

    pipeline = IngestPipeline(
        CONFIG, EMBEDDER, TOPICS, Store(broker.journal), None, broker.send, send_batch
    )
    answering = asyncio.create_task(broker.run())
    try:
        await pipeline.handle([observation(0, 0), observation(1, 2)])
        markers = [
            DerivedUpTo(event_id=f"m{p}", occurred_at=START, partition=p, upto=(), items=None)
            for p in (2, 0)
        ]
        landed = await pipeline._log_markers(markers)
    finally:
        answering.cancel()

    lifecycle = [b for b in batches if b[0] == TOPICS.lifecycle]
    assert lifecycle, "the markers went as batches"
    assert all(count == 1 for _, _, count in lifecycle)
    assert [(m.partition, m.offset) for m in landed] == [
        (2, len(broker.logs[(TOPICS.lifecycle, 2)]) - 1),
        (0, len(broker.logs[(TOPICS.lifecycle, 0)]) - 1),
    ]


async def test_a_snapshot_due_after_a_batch_gives_way_to_the_next_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its sync and chunks run between batches, not at the awaits of the one in flight."""
    monkeypatch.setattr(snapshotting, "GIVE_WAY", 30.0)  # however slow this machine
    broker = Broker()
    during_a_batch: list[bool] = []

    async def sync() -> None:
        during_a_batch.append(pipeline.write_lock.batch().locked())

    written = Log()  # the snapshot topic
    snapshots = Snapshotter(written.send, TOPICS, every_records=1, before_write=sync)
    pipeline = IngestPipeline(
        CONFIG, EMBEDDER, TOPICS, Store(broker.journal), None, broker.send, snapshots=snapshots
    )
    answering = asyncio.create_task(broker.run())
    try:
        await pipeline.handle([observation(0, 0)])  # makes partition 0's snapshot due
        await pipeline.handle([observation(1, 0)])  # the snapshot starts during this one
        await asyncio.wait_for(snapshots.settled(), 10)
    finally:
        answering.cancel()
    # The second batch's snapshot, due while the first was written, follows it.
    assert during_a_batch == [False, False]
    assert written.happened[-1] == "send b'0/manifest'"


class ThreadNotingEmbedder:
    """The hashing embedder, noting the thread each call runs on; ``batches_misses`` says its
    calls are dear, as a model's are."""

    def __init__(self, batches_misses: bool) -> None:
        self.batches_misses = batches_misses
        self.threads: set[int] = set()

    @property
    def id(self) -> str:
        return EMBEDDER.id

    @property
    def dim(self) -> int:
        return EMBEDDER.dim

    def embed(self, text: str) -> np.ndarray:
        self.threads.add(threading.get_ident())
        return EMBEDDER.embed(text)

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        self.threads.add(threading.get_ident())
        return EMBEDDER.embed_many(texts)


@pytest.mark.parametrize("dear", [True, False])
async def test_a_model_embeds_off_the_event_loop(dear: bool) -> None:
    """MiniLM takes ~10 ms of CPU a text, seconds for a batch: on the loop it would stall what
    else the process serves and time out the stores' replies (a benchmark's Redis read did, at
    10 s). The hashing embedder, microseconds a text, stays on the loop."""
    broker = Broker()
    embedder = ThreadNotingEmbedder(batches_misses=dear)
    pipeline = IngestPipeline(CONFIG, embedder, TOPICS, Store(broker.journal), None, broker.send)
    answering = asyncio.create_task(broker.run())
    try:
        await pipeline.handle([observation(0, 0), observation(1, 0)])
    finally:
        answering.cancel()
    assert embedder.threads, "nothing was embedded"
    loop_thread = threading.get_ident()
    assert (loop_thread in embedder.threads) is not dear
