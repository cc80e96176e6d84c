"""The episodic projection fed from the log, for when workers cannot write it themselves.

Qdrant Edge lives inside one process, so with several worker processes the workers write
working memory (Redis, shared) and this projector, in the process that owns the Edge shard,
applies ``memory.items`` and ``memory.lifecycle`` to episodic memory. It is a plain consumer
(no Faust hop: a raw ``getmany`` reads ~300k records/s on the dev broker).

Markers. A worker ends every batch with a "logged up to" marker per partition number (on
``memory.lifecycle``, after everything the batch derived; :class:`DerivedUpTo`), naming where
the batch's events landed. In a partition of which a marker has been read, events wait until
a marker covers them, and are then applied in the order the worker emitted them
(:func:`processors.emission_order.causal_order`); one no marker covers that a later batch followed
was logged by an attempt a crash cut short, whose batch was derived again (maybe otherwise:
a redelivery may cut the batch elsewhere), and is dropped. A marker waits in
lifecycle order, and for the batch's last recording (``items``) to be read; it then moves the
store's applied marks past every record of the batch, those that derived nothing included, so
a read-your-writes wait on a dead letter, a tick or a retrieval completes here too.

Until a marker of a partition is read (a log from before markers, or the first records after
a restart), the older rule holds: the two topics are fetched independently, and lifecycle
records are small, so under a backlog a MemoryForgotten can arrive before the MemoryRecorded of
the memory it forgets. Every lifecycle event carries the source position of the record that
caused it, and the worker emitted it around the recording at that position (promotions and
summaries just before, forgettings just after), after every earlier recording of that source
partition. So a lifecycle event is applied only once the recordings applied from
``memory.items`` have reached its position, in log order per lifecycle partition; until then
it is held. Events of ticks (positions on ``memory.schedule``) follow nothing in
``memory.items`` and wait for nothing.

Offsets are committed only up to the oldest event held or waiting, so a restart reads it again,
and at most once per ``commit_every`` seconds: a commit vouches for what the store applied, so
it first makes that durable (``store.sync()``), and Qdrant Edge's group commit would gain
nothing if every fetch forced a flush. A restart re-reads what the last commit left out, which
the idempotent store absorbs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from processors.batch_markers import MarkerIndex, marker_upto
from processors.emission_order import causal_order
from projections.cancellation import cancel_and_wait
from projections.interfaces import EpisodicMemoryStore, latest_positions
from projections.versions import WriteLock
from schemas.codec import decode_derived_record
from schemas.memory_events import (
    DerivedEvent,
    DerivedRecord,
    DerivedUpTo,
    SourcePosition,
    derived_topic_of,
)
from schemas.topics import Topics
from streams.eventlog.derived_log import decode_opened
from streams.eventlog.kafka_clients import projector_consumer
from streams.privacy.sealing import RecordSealer

log = logging.getLogger("engram.episodic_projector")

REPORT_EVERY = 10.0
"""Seconds between two reports of what holds the commit back (only while something does)."""
STOP_WITHIN_S = 30.0
"""What a stop gives the projection loop to end: a batch being applied when the stop came is
cancelled (its records are read again after the committed offsets), which takes well under."""


@dataclass(frozen=True)
class HeldEvent:
    event: DerivedRecord
    record: TopicPartition
    offset: int


@dataclass(frozen=True)
class WaitingEvent:
    """An event of a partition with markers, read at ``offset`` of ``record``."""

    event: DerivedEvent
    record: TopicPartition
    offset: int

    @property
    def where(self) -> SourcePosition:
        tp = self.record
        return SourcePosition(topic=tp.topic, partition=tp.partition, offset=self.offset)


@dataclass
class EpisodicProjector:
    bootstrap: str
    topics: Topics
    store: EpisodicMemoryStore
    group_id: str
    fetch_max_wait: float = 0.05
    max_held: int = 200_000
    held: list[HeldEvent] = field(default_factory=list)
    applied: dict[tuple[str, int], int] = field(default_factory=dict)
    items_read: dict[int, int] = field(default_factory=dict)
    """Per partition, the highest ``memory.items`` offset read (markers wait for it)."""
    markers: MarkerIndex = field(default_factory=MarkerIndex)
    """The markers read in this process's life."""
    waiting: list[WaitingEvent] = field(default_factory=list)
    """Events of partitions with markers, until a marker covers them."""
    left_out: int = 0
    """Events dropped: logged by an attempt at a batch that a crash cut short."""
    records: int = 0
    failures: int = 0
    write_lock: WriteLock = field(default_factory=WriteLock)
    """Held while a fetch is applied; a fence takes it to pause the projector
    (:func:`projections.versions.obey_fence`)."""
    sealer: RecordSealer = field(default_factory=lambda: RecordSealer(None))
    """Opens sealed records; a forgotten agent's are skipped."""
    _reported: float = 0.0
    read_to: dict[TopicPartition, int] = field(default_factory=dict)
    """Per partition, the offset after the last record read."""
    committed_to: dict[TopicPartition, int] = field(default_factory=dict)
    """Per partition, the offset this process last committed."""
    commit_every: float = 0.0
    """Seconds between two commits (0: after every fetch); the node gives Edge's sync interval."""
    _committed_at: float | None = None
    _consumer: AIOKafkaConsumer | None = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> EpisodicProjector:
        self._consumer = projector_consumer(
            self.bootstrap,
            (self.topics.items, self.topics.lifecycle),
            self.group_id,
            fetch_max_wait=self.fetch_max_wait,
        )
        try:
            await self._consumer.start()
        except BaseException:  # nobody stops what did not start: its finaliser warned at exit
            await self._consumer.stop()
            raise
        self._task = asyncio.create_task(self._run(), name="episodic-projector")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task, within=STOP_WITHIN_S)
        if self._consumer is not None:
            await self._consumer.stop()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        """Project forever; on a failure, start again from the committed offsets.

        Everything past them is re-read and re-applied, which the store's idempotence and the
        hold rule make safe; held forgettings are dropped because they will be read again.
        """
        assert self._consumer is not None
        delay = 0.1
        while True:
            try:
                batch = await self._consumer.getmany(timeout_ms=100, max_records=10_000)
                if batch:
                    async with self.write_lock.batch():
                        await self.project(batch)
                elif self.read_to != self.committed_to and self._commit_due():
                    # Idle: what the commit interval held back is committed once it is due.
                    async with self.write_lock.batch():
                        await self._commit({})
                self._maybe_report()
                delay = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                log.warning("episodic projection failed, retrying in %.1fs: %r", delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                self.held = []
                self.applied = {}
                self.items_read = {}
                self.markers = MarkerIndex()
                self.waiting = []
                self.read_to = {}
                self.committed_to = {}
                with contextlib.suppress(Exception):
                    await self._consumer.seek_to_committed()

    def use(self, store: EpisodicMemoryStore) -> None:
        """Write to another projection version from the next batch on (under the write lock)."""
        self.store = store
        self.applied = {}

    async def _applied_offset(self, topic: str, partition: int) -> int:
        key = (topic, partition)
        if key not in self.applied:
            stored = await self.store.applied_offset(topic, partition)
            self.applied[key] = -1 if stored is None else stored
        return self.applied[key]

    async def _items_read(self, partition: int) -> int:
        """The highest items offset of ``partition`` applied, by this process or (committed)
        before it started."""
        if partition not in self.items_read:
            assert self._consumer is not None
            committed = await self._consumer.committed(TopicPartition(self.topics.items, partition))
            self.items_read[partition] = -1 if committed is None else committed - 1
        return self.items_read[partition]

    async def project(self, batch: dict[TopicPartition, list[object]]) -> None:
        ends: dict[TopicPartition, int] = {}
        fetched: list[tuple[TopicPartition, int, bytes | None]] = []
        for tp, records in batch.items():
            for record in records:
                offset: int = record.offset  # type: ignore[attr-defined]
                ends[tp] = offset + 1
                fetched.append((tp, offset, record.value))  # type: ignore[attr-defined]
        await self.sealer.refresh()
        opened = await self.sealer.open_all([value for _, _, value in fetched])
        decoded: list[tuple[TopicPartition, int, DerivedRecord]] = []
        for (tp, offset, _), value in zip(fetched, opened, strict=True):
            where = SourcePosition(topic=tp.topic, partition=tp.partition, offset=offset)
            derived = decode_opened(where, value, decode_derived_record)
            if derived is not None:
                decoded.append((tp, offset, derived))
        # Markers first: whether an event waits for one depends on any of its partition.
        for _, offset, event in decoded:
            if isinstance(event, DerivedUpTo):
                self.markers.add(event, offset)
        recorded: list[DerivedEvent] = []
        arriving: list[HeldEvent] = []
        for tp, offset, event in decoded:
            if isinstance(event, DerivedUpTo):
                arriving.append(HeldEvent(event, tp, offset))
            elif tp.partition in self.markers.marked:
                self.waiting.append(WaitingEvent(event, tp, offset))
            elif derived_topic_of(event) == "items":
                recorded.append(event)
            else:
                arriving.append(HeldEvent(event, tp, offset))
        await self.store.apply(recorded)
        for tp, end in ends.items():
            if tp.topic == self.topics.items:
                self.items_read[tp.partition] = max(await self._items_read(tp.partition), end - 1)
        # Only recordings move the hold mark: a lifecycle event at an agent-topic position is
        # emitted before (promotions, summaries) or after (forgettings) the recording at that
        # position, and must not be applied ahead of it, nor let a forgetting overtake the
        # recording of the memory it forgets.
        for key, offset in latest_positions(recorded).items():
            self.applied[key] = max(self.applied.get(key, -1), offset)
        ready: list[HeldEvent] = []
        held: list[HeldEvent] = []
        blocked: set[TopicPartition] = set()
        for h in [*self.held, *arriving]:
            # In log order per lifecycle partition: once one waits, the ones after it wait too.
            if h.record not in blocked and await self._due(h.event):
                ready.append(h)
            else:
                blocked.add(h.record)
                held.append(h)
        await self._apply_in_order(ready)
        self.held = held
        # What no marker covers and a later batch followed was logged by an attempt a crash
        # cut short: its batch was derived again, maybe otherwise, and that copy counts.
        waiting = [h for h in self.waiting if self.markers.verdict(h.where, h.event) != "left_out"]
        self.left_out += len(self.waiting) - len(waiting)
        self.waiting = waiting
        self.records += sum(len(r) for r in batch.values())
        await self._commit(ends)

    async def _apply_in_order(self, ready: list[HeldEvent]) -> None:
        """Apply events in the order given, and at each marker the events it covers (in the
        order they were emitted), then move the store's marks past its records."""
        events: list[DerivedEvent] = []
        for h in ready:
            marker = h.event
            if not isinstance(marker, DerivedUpTo):
                events.append(marker)
                continue
            covered = [w for w in self.waiting if marker.covers(w.where, w.event)]
            if covered:
                taken = {id(w) for w in covered}
                self.waiting = [w for w in self.waiting if id(w) not in taken]
                events.extend(causal_order([w.event for w in covered]))
            await self.store.apply(events)
            events = []
            marks = marker_upto(marker)
            if marks:
                await self.store.advance(marks)
            for key, offset in marks.items():
                self.applied[key] = max(self.applied.get(key, -1), offset)
        await self.store.apply(events)

    async def _due(self, event: DerivedRecord) -> bool:
        """A tick's events follow nothing in ``memory.items``: only earlier lifecycle events.
        A marker waits for its batch's last recording."""
        if isinstance(event, DerivedUpTo):
            if event.items is None:
                return True
            return await self._items_read(event.partition) >= event.items.last
        position = event.source_position
        if position is None or position.topic == self.topics.schedule:
            return True
        return await self._applied_offset(position.topic, position.partition) >= position.offset

    async def _commit(self, ends: dict[TopicPartition, int]) -> None:
        """Commit every partition read up to its oldest event held or waiting: not only those
        of this fetch, since a marker fetched now may release events of another partition
        (its recordings), and nothing may ever be fetched from that one again."""
        assert self._consumer is not None
        self.read_to.update(ends)
        assigned = self._consumer.assignment()
        oldest: dict[TopicPartition, int] = {}
        for tp, offset in [
            *((h.record, h.offset) for h in self.held),
            *((w.record, w.offset) for w in self.waiting),
        ]:
            oldest[tp] = min(oldest.get(tp, offset), offset)
        offsets = {
            tp: OffsetAndMetadata(at, "")
            for tp, end in self.read_to.items()
            if (at := min(end, oldest.get(tp, end))) != self.committed_to.get(tp) and tp in assigned
        }
        if offsets and self._commit_due():
            self._committed_at = time.monotonic()
            # The store may let its durable checkpoint lag its applies (group commit); what the
            # commit vouches for must be durable first.
            await self.store.sync()
            await self._consumer.commit(offsets)
            self.committed_to.update({tp: o.offset for tp, o in offsets.items()})
        if len(self.held) > self.max_held:
            log.warning("%d lifecycle events wait for their recordings", len(self.held))

    def _commit_due(self) -> bool:
        at = self._committed_at
        return at is None or time.monotonic() - at >= self.commit_every

    def _maybe_report(self) -> None:
        if time.monotonic() - self._reported >= REPORT_EVERY and (self.held or self.waiting):
            self._reported = time.monotonic()
            self._report_holding()

    def _report_holding(self) -> None:
        """What holds the commit back, per partition: the oldest marker held and the oldest
        event waiting for a marker."""
        oldest: dict[tuple[TopicPartition, bool], HeldEvent | WaitingEvent] = {}
        pending: list[HeldEvent | WaitingEvent] = [*self.held, *self.waiting]
        for h in pending:
            key = (h.record, isinstance(h, HeldEvent))
            if key not in oldest or h.offset < oldest[key].offset:
                oldest[key] = h
        for (tp, _), h in sorted(oldest.items()):
            event = h.event
            log.info(
                "holding",
                extra={
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": h.offset,
                    "event_type": event.event_type,
                    "waits_for_items": event.items.last
                    if isinstance(event, DerivedUpTo) and event.items is not None
                    else None,
                    "items_read": self.items_read.get(tp.partition),
                    "source": str(getattr(event, "source_position", None)),
                    "state": "held" if isinstance(h, HeldEvent) else "waiting",
                    "held": len(self.held),
                    "waiting": len(self.waiting),
                },
            )
