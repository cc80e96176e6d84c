"""Replay: build a new version of the projections from the log, then switch everything to it.

The running system keeps serving and writing the active version meanwhile. The replay:

1. registers a new version (``building``) and bulk-applies ``memory.items`` and
   ``memory.lifecycle``, one partition number at a time, in large batches (no per-record
   commit: the stores record positions with the data, so a replay that dies is simply run
   again into a new version);
2. follows the log in tail passes until little is left;
3. raises the *fence*: every writer finishes its batch and pauses, so the log stops moving;
4. reads the last of the log into the new version, closes its stores, points
   ``{ns}#projection:active`` at it, and lowers the fence. Writers and query services move to
   the new version at once.

The stores are let go of before the pointer moves because a Qdrant Edge shard opens in one
process at a time: the running process that follows the pointer opens the very shard this
replay built, and must find it closed and flushed (were it still held here, that process
could not open it, and its paused writers would wait for it).

The pointer, the fence and the writers' pause are the protocol of :mod:`projections.versions`
(:func:`projections.versions.fenced`); which events a pass may apply is the markers' rule
(:class:`processors.batch_markers.MarkerIndex`).

Why a cut is needed: a worker logs what a batch derived on two topics, then a "logged up to"
marker per partition number (:class:`schemas.memory_events.DerivedUpTo`), and the working
store skips an event whose source offset is below the one it has applied (the episodic store
applies it again, idempotently). A pass that applied half of a batch would apply later
positions first, and the working store would then skip the rest of that batch. So a pass
applies only events that a marker read covers (markers name where their batch's events
landed); a batch in flight is held back for the next pass, even under the fence, and what an
attempt cut short by a crash logged (its next owner derives the batch again) is dropped.
Markers also move the stores' applied marks past records that derived nothing. Each
partition's ``memory.lifecycle`` is read before its ``memory.items``, so every recording a
marker covers has been read with it. In a partition number without markers (a log written
before them) a pass applies only events whose source record the consumer group has
*committed* (a worker commits after its batch is logged), and under the fence everything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition

from processors.batch_markers import MarkerIndex, SourceKey, marked_upto
from processors.emission_order import causal_order
from projections.interfaces import EpisodicMemoryStore, WorkingMemoryStore
from projections.versions import (
    OpenStores,
    ProjectionStores,
    ProjectionVersion,
    ProjectionVersions,
    building,
    fenced,
)
from projections.working.agent_index import AgentIndex
from schemas.codec import decode_derived_record
from schemas.memory_events import DerivedEvent, DerivedRecord, DerivedUpTo, SourcePosition
from schemas.topics import Topics
from streams.eventlog.derived_log import decode_opened, read_to_end
from streams.eventlog.kafka_clients import group_offsets_client, log_reader
from streams.eventlog.log_starts import log_starts
from streams.eventlog.offsets_since import offsets_since
from streams.privacy.sealing import RecordSealer
from streams.rebuild.projection_switch import member_id
from streams.rebuild.replay_index import ReplayIndexer

log = logging.getLogger("engram.replay")

Targets = Sequence[WorkingMemoryStore | EpisodicMemoryStore]
"""The stores a pass applies the log to."""
Advance = Callable[[int], None]
"""Called with the number of events just applied (drives a progress bar)."""


@dataclass
class ReplayReport:
    version: ProjectionVersion
    previous: ProjectionVersion | None
    events: int = 0
    passes: int = 0
    fenced_events: int = 0
    """Events applied while writers were paused: the length of the switch's pause, in events."""
    pause_seconds: float = 0.0
    seconds: float = 0.0
    switched: bool = False
    dropped: ProjectionVersion | None = None


@dataclass
class DerivedLogCursor:
    """Where a replay is in the derived log of some partitions, pass after pass."""

    bootstrap: str
    topics: Topics
    partitions: Sequence[int]
    next_offset: dict[TopicPartition, int] = field(default_factory=dict)
    markers: MarkerIndex = field(default_factory=MarkerIndex)
    """The markers read so far: which events belong to wholly logged batches."""
    upto: dict[SourceKey, int] = field(default_factory=dict)
    """What the markers read so far cover, per source partition."""
    sealer: RecordSealer = field(default_factory=lambda: RecordSealer(None))
    """Opens sealed records; a forgotten agent's are skipped."""

    def topic_partitions(self) -> list[TopicPartition]:
        return [
            TopicPartition(topic, p)
            for p in self.partitions
            for topic in (self.topics.lifecycle, self.topics.items)
        ]

    async def start_at(self, since: datetime | None) -> int:
        """Start at the beginning, or at the first record written at or after ``since``;
        returns the number of records to read (a lower bound: see :func:`at_end`)."""
        consumer = log_reader(self.bootstrap)
        try:
            await consumer.start()
            tps = self.topic_partitions()
            ends = await consumer.end_offsets(tps)
            if since is None:
                starts = await log_starts(consumer, tps)
            else:
                starts = await offsets_since(consumer, tps, int(since.timestamp() * 1000), ends)
        finally:
            await consumer.stop()
        self.next_offset = dict(starts)
        return sum(max(0, ends[tp] - starts[tp]) for tp in tps)

    async def backlog(self) -> int:
        """Records between the cursor and the ends the broker reports now (a lower bound)."""
        consumer = log_reader(self.bootstrap)
        try:
            await consumer.start()
            ends = await consumer.end_offsets(self.topic_partitions())
        finally:
            await consumer.stop()
        return sum(max(0, end - self.next_offset.get(tp, 0)) for tp, end in ends.items())

    async def read(self, partition: int) -> list[tuple[TopicPartition, int, DerivedRecord]]:
        """Every record (derived event or marker) of one partition number from the cursor to
        the end, with where it sits in the log, ``memory.lifecycle`` first; the cursor moves
        past what was read (a pass moves it back to what it held back) and keeps what the
        markers say."""
        return (await self.read_many([partition]))[partition]

    async def read_many(
        self, partitions: Sequence[int]
    ) -> dict[int, list[tuple[TopicPartition, int, DerivedRecord]]]:
        """:meth:`read` of several partition numbers in two reads of the broker (their
        ``memory.lifecycle``, then their ``memory.items``), not two per partition number: a
        read costs a consumer and a fetch wait (~125 ms on Tansu) however little it finds, so
        a tail of a few records took ~1 s over 4 partitions, all of it with writers paused
        under the fence. Everything read is held at once: for a small backlog."""
        raw: dict[TopicPartition, list[tuple[int, bytes | None]]] = {}

        def keep(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
            raw.setdefault(tp, []).append((record.offset, record.value))

        # All of lifecycle before any of items: a marker's batch then has its recordings read.
        for topic in (self.topics.lifecycle, self.topics.items):
            tps = [TopicPartition(topic, p) for p in partitions]
            reached = await read_to_end(
                self.bootstrap,
                tps,
                keep,
                starts={tp: self.next_offset.get(tp, 0) for tp in tps},
                timeout=600,
            )
            for tp in tps:
                self.next_offset[tp] = max(self.next_offset.get(tp, 0), reached[tp])
        return {p: await self._decoded(p, raw) for p in partitions}

    async def _decoded(
        self, partition: int, raw: dict[TopicPartition, list[tuple[int, bytes | None]]]
    ) -> list[tuple[TopicPartition, int, DerivedRecord]]:
        """One partition number's records read, opened and decoded, lifecycle first, with
        what their markers say taken in."""
        mine = [
            (tp, offset, value)
            for topic in (self.topics.lifecycle, self.topics.items)
            for tp in [TopicPartition(topic, partition)]
            for offset, value in raw.get(tp, [])
        ]
        opened = await self.sealer.open_all([value for _, _, value in mine])
        out: list[tuple[TopicPartition, int, DerivedRecord]] = []
        for (tp, offset, _), value in zip(mine, opened, strict=True):
            where = SourcePosition(topic=tp.topic, partition=tp.partition, offset=offset)
            event = decode_opened(where, value, decode_derived_record)
            if event is not None:
                out.append((tp, offset, event))
        markers = [(offset, r) for _, offset, r in out if isinstance(r, DerivedUpTo)]
        for offset, marker in markers:
            self.markers.add(marker, offset)
        for key, mark in marked_upto(m for _, m in markers).items():
            if self.upto.get(key, -1) < mark:
                self.upto[key] = mark
        return out

    def marks_of(self, partition: int) -> dict[SourceKey, int]:
        """What the markers read cover of one partition number's sources."""
        return {key: offset for key, offset in self.upto.items() if key[1] == partition}


async def committed_offsets(
    bootstrap: str, group_id: str, tps: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The consumer group's committed offsets (next record to process) of the source
    partitions; a partition it never committed is absent."""
    consumer = group_offsets_client(bootstrap, group_id)
    try:
        await consumer.start()
        out = {}
        for tp in tps:
            offset = await consumer.committed(tp)
            if offset is not None and offset >= 0:
                out[tp] = offset
        return out
    finally:
        await consumer.stop()


def split_at_markers(
    records: Sequence[tuple[TopicPartition, int, DerivedRecord]],
    cursor: DerivedLogCursor,
    committed: dict[TopicPartition, int] | None,
) -> tuple[list[DerivedEvent], dict[TopicPartition, int]]:
    """The events safe to apply now, and per derived partition the first offset held back.

    Safe: covered by the markers the cursor has read. In a partition number without markers:
    of a committed source record, or anything when ``committed`` is None (the writers are
    paused). An event no marker covers but that a later batch followed is a leftover of an
    attempt cut short: dropped. Markers themselves are never held: what they say is known once
    read.
    """
    ready: list[DerivedEvent] = []
    held: dict[TopicPartition, int] = {}
    index = cursor.markers
    for tp, offset, event in records:
        if isinstance(event, DerivedUpTo):
            continue
        if tp.partition in index.marked:
            where = SourcePosition(topic=tp.topic, partition=tp.partition, offset=offset)
            verdict = index.verdict(where, event)
            if verdict == "waits":
                held[tp] = min(held.get(tp, offset), offset)
            if verdict != "counts":
                continue
        elif _uncommitted(event, committed):
            held[tp] = min(held.get(tp, offset), offset)
            continue
        if tp in held:
            # Everything after a held record waits too, so the next pass, which reads from the
            # first held offset, does not apply a later event before an earlier one.
            continue
        ready.append(event)
    return ready, held


def _uncommitted(event: DerivedEvent, committed: dict[TopicPartition, int] | None) -> bool:
    """Whether the consumer group has not committed the source record of ``event`` yet."""
    position = event.source_position
    if committed is None or position is None:
        return False
    return position.offset >= committed.get(TopicPartition(position.topic, position.partition), 0)


async def apply_in_batches(
    events: Sequence[DerivedEvent],
    stores: Targets,
    batch_size: int,
    advance: Advance | None,
) -> None:
    for start in range(0, len(events), batch_size):
        chunk = events[start : start + batch_size]
        await asyncio.gather(*(store.apply(chunk) for store in stores))
        if advance is not None:
            advance(len(chunk))


async def replay_pass(
    cursor: DerivedLogCursor,
    stores: Targets,
    committed: dict[TopicPartition, int] | None,
    *,
    batch_size: int,
    advance: Advance | None,
    indexer: ReplayIndexer | None = None,
    together: bool = False,
) -> tuple[int, int]:
    """One pass over the log from the cursor: returns (events applied, events held back).

    ``together``: every partition number is read at once (:meth:`DerivedLogCursor.read_many`),
    for a small backlog. Else one at a time, the next read while this one is applied: reading
    is the broker's and the decoder's work, applying Redis's and Qdrant's, so the two overlap.
    """
    applied = held_count = 0
    parts = list(cursor.partitions)
    async for i, records in _partition_reads(cursor, parts, together=together):
        ready, held = split_at_markers(records, cursor, committed)
        if indexer is not None:
            await indexer.index_read(parts[i], records, cursor.markers)
        for tp, offset in held.items():
            cursor.next_offset[tp] = min(cursor.next_offset[tp], offset)
        events = sum(1 for _, _, record in records if not isinstance(record, DerivedUpTo))
        held_count += events - len(ready)
        ordered = causal_order(ready)
        await apply_in_batches(ordered, stores, batch_size, advance)
        applied += len(ordered)
        marks = cursor.marks_of(parts[i])
        if marks:
            # Past the records that derived nothing: every event the marks cover is applied
            # (held ones after a held record are copies of applied ones: a batch done again).
            await asyncio.gather(*(store.advance(marks) for store in stores))
    return applied, held_count


async def _partition_reads(
    cursor: DerivedLogCursor, parts: list[int], *, together: bool
) -> AsyncIterator[tuple[int, list[tuple[TopicPartition, int, DerivedRecord]]]]:
    """(index in ``parts``, records read) for each partition number, in order."""
    if together:
        read = await cursor.read_many(parts)
        for i, part in enumerate(parts):
            yield i, read[part]
        return
    reading = asyncio.ensure_future(cursor.read(parts[0])) if parts else None
    for i, _ in enumerate(parts):
        assert reading is not None
        records = await reading
        reading = asyncio.ensure_future(cursor.read(parts[i + 1])) if i + 1 < len(parts) else None
        yield i, records


class HeldStores(list[WorkingMemoryStore | EpisodicMemoryStore]):
    """The stores of the version a replay builds, closed once: when it lets go of them before
    the switch, or when it ends without one."""

    closed: bool = False
    episodic: EpisodicMemoryStore | None = None

    @classmethod
    def of(cls, stores: ProjectionStores) -> HeldStores:
        working, episodic = stores
        held = cls([working] if episodic is None else [working, episodic])
        held.episodic = episodic
        return held

    async def sync(self) -> None:
        """Before the version is called ready on their word: the episodic store's durable
        checkpoint may lag what it applied (Qdrant Edge's group commit)."""
        if self.episodic is not None and not self.closed:
            await self.episodic.sync()

    async def let_go(self) -> None:
        if self.closed:
            return
        self.closed = True
        for store in self:
            await store.close()


@dataclass
class Replay:
    """One replay into a version; see the module docstring for the steps."""

    bootstrap: str
    topics: Topics
    partitions: Sequence[int]
    group_id: str
    """The processors' consumer group, whose commits say which source records are done."""
    versions: ProjectionVersions
    open_stores: OpenStores
    batch_size: int = 20_000
    fence_timeout: float = 30.0
    """Longest the switch waits for writers to pause, and the fence's own lifetime."""
    tail_passes: int = 5
    tail_small: int = 2_000
    sealer: RecordSealer = field(default_factory=lambda: RecordSealer(None))
    """Opens the sealed records of the log."""
    open_index: Callable[[ProjectionVersion], AgentIndex] | None = None
    """The agent index of a version, which the replay writes as the live workers do (none:
    the version's histories scan partitions until its workers index anew)."""

    async def run(
        self,
        *,
        name: str | None = None,
        into: ProjectionVersion | None = None,
        since: datetime | None = None,
        switch: bool = True,
        total: Callable[[int], None] | None = None,
        advance: Advance | None = None,
        begun: Callable[[ReplayReport], None] | None = None,
    ) -> ReplayReport:
        """``begun`` is given the report once the target version exists, so a run stopped
        half way can still say which version it left, and whether it switched to it."""
        started = time.perf_counter()
        target = into or await self.versions.create(name, note="engram replay")
        report = ReplayReport(version=target, previous=None)
        if begun is not None:
            begun(report)
        async with building(self.versions, "replay", target, member_id("replay")):
            await self._build(target, report, since, switch, total, advance, into is None)
        report.seconds = time.perf_counter() - started
        return report

    async def _build(
        self,
        target: ProjectionVersion,
        report: ReplayReport,
        since: datetime | None,
        switch: bool,
        total: Callable[[int], None] | None,
        advance: Advance | None,
        registered_here: bool,
    ) -> None:
        cursor = DerivedLogCursor(self.bootstrap, self.topics, self.partitions, sealer=self.sealer)
        expected = await cursor.start_at(since)
        if total is not None:
            total(expected)
        stores = HeldStores.of(await self.open_stores(target))
        index = None if self.open_index is None else self.open_index(target)
        indexer = None
        if index is not None:
            indexer = ReplayIndexer(index, self.bootstrap, self.topics, dict(cursor.next_offset))
        try:
            for _ in range(1 + self.tail_passes):
                committed = await committed_offsets(
                    self.bootstrap, self.group_id, self._source_partitions()
                )
                applied, held = await replay_pass(
                    cursor,
                    stores,
                    committed,
                    batch_size=self.batch_size,
                    advance=advance,
                    indexer=indexer,
                    together=await self._small(cursor),
                )
                report.events += applied
                report.passes += 1
                log.info("replay pass %d: %d applied, %d held back", report.passes, applied, held)
                if applied + held < self.tail_small:
                    break
            if target.name is not None and registered_here:
                await stores.sync()
                await self.versions.set_state(target.name, "ready")
            if switch:
                await self._switch(cursor, stores, report, advance, indexer)
        finally:
            await stores.let_go()
            if index is not None:
                await index.close()

    async def _small(self, cursor: DerivedLogCursor) -> bool:
        """Whether what is left fits one batch, so a pass may read it all at once."""
        return await cursor.backlog() <= self.batch_size

    def _source_partitions(self) -> list[TopicPartition]:
        topics = (*self.topics.agent_inputs, self.topics.schedule, self.topics.access)
        return [TopicPartition(t, p) for t in topics for p in self.partitions]

    async def _switch(
        self,
        cursor: DerivedLogCursor,
        stores: HeldStores,
        report: ReplayReport,
        advance: Advance | None,
        indexer: ReplayIndexer | None,
    ) -> None:
        target = report.version
        paused_at = time.perf_counter()
        try:
            async with fenced(self.versions, target, self.fence_timeout):
                applied, _ = await replay_pass(
                    cursor,
                    stores,
                    None,
                    batch_size=self.batch_size,
                    advance=advance,
                    indexer=indexer,
                    together=await self._small(cursor),
                )
                report.events += applied
                report.fenced_events = applied
                report.passes += 1
                await stores.let_go()
                report.previous = await self.versions.activate(target.name)
                report.switched = True
        finally:
            report.pause_seconds = time.perf_counter() - paused_at
