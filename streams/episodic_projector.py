"""The episodic projection fed from the log, for when workers cannot write it themselves.

Qdrant Edge lives inside one process, so with several worker processes the workers write
working memory (Redis, shared) and this projector, in the process that owns the Edge shard,
applies ``memory.items`` and ``memory.lifecycle`` to episodic memory. It is a plain consumer
(no Faust hop: PARTS.md puts a raw ``getmany`` at ~300k records/s).

Ordering: the two topics are fetched independently, and lifecycle records are small, so under a
backlog a MemoryForgotten can arrive before the MemoryRecorded of the memory it forgets. Every
lifecycle event carries the source position of the record that caused it, and the worker emitted
it around the recording at that position (promotions and summaries just before, forgettings just
after), after every earlier recording of that source partition. So a lifecycle event is applied
only once the recordings applied from ``memory.items`` have reached its position, in log order
per lifecycle partition; until then it is held, and lifecycle offsets are committed only up to
the oldest held record, so a restart reads it again. Events of ticks (positions on
``memory.schedule``) follow nothing in ``memory.items`` and wait for nothing. Items offsets are
committed after the store applied them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from projections.interfaces import EpisodicMemoryStore, latest_positions
from schemas.codec import DecodeError, decode_derived_event
from schemas.memory_events import DerivedEvent, MemoryRecorded
from schemas.topics import Topics

log = logging.getLogger("engram.episodic_projector")


@dataclass(frozen=True)
class HeldEvent:
    event: DerivedEvent
    record: TopicPartition
    offset: int


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
    records: int = 0
    failures: int = 0
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while a batch is applied; :mod:`streams.projection_switch` takes it to pause."""
    _consumer: AIOKafkaConsumer | None = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> EpisodicProjector:
        self._consumer = AIOKafkaConsumer(
            self.topics.items,
            self.topics.lifecycle,
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=int(self.fetch_max_wait * 1000),
            max_partition_fetch_bytes=4 << 20,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=1_000,
        )
        await self._consumer.start()
        self._task = asyncio.create_task(self._run(), name="episodic-projector")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
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
                    async with self.write_lock:
                        await self.project(batch)
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

    async def project(self, batch: dict[TopicPartition, list[object]]) -> None:
        recorded: list[DerivedEvent] = []
        arriving: list[HeldEvent] = []
        ends: dict[TopicPartition, int] = {}
        for tp, records in batch.items():
            for record in records:
                ends[tp] = record.offset + 1  # type: ignore[attr-defined]
                value = record.value  # type: ignore[attr-defined]
                if value is None:
                    continue
                try:
                    event = decode_derived_event(value)
                except DecodeError as exc:
                    log.error("unreadable derived record %s@%d: %s", tp, record.offset, exc)  # type: ignore[attr-defined]
                    continue
                if isinstance(event, MemoryRecorded):
                    recorded.append(event)
                else:
                    arriving.append(HeldEvent(event, tp, record.offset))  # type: ignore[attr-defined]
        await self.store.apply(recorded)
        # Only recordings move the hold mark: a lifecycle event at an agent-topic position is
        # emitted before (promotions, summaries) or after (forgettings) the recording at that
        # position, and must not be applied ahead of it, nor let a forgetting overtake the
        # recording of the memory it forgets.
        for key, offset in latest_positions(recorded).items():
            self.applied[key] = max(self.applied.get(key, -1), offset)
        ready: list[DerivedEvent] = []
        held: list[HeldEvent] = []
        blocked: set[TopicPartition] = set()
        for h in [*self.held, *arriving]:
            # In log order per lifecycle partition: once one waits, the ones after it wait too.
            if h.record not in blocked and await self._due(h.event):
                ready.append(h.event)
            else:
                blocked.add(h.record)
                held.append(h)
        await self.store.apply(ready)
        self.held = held
        self.records += sum(len(r) for r in batch.values())
        await self._commit(ends)

    async def _due(self, event: DerivedEvent) -> bool:
        """A tick's events follow nothing in ``memory.items``: only earlier lifecycle events."""
        position = event.source_position
        if position is None or position.topic == self.topics.schedule:
            return True
        return await self._applied_offset(position.topic, position.partition) >= position.offset

    async def _commit(self, ends: dict[TopicPartition, int]) -> None:
        assert self._consumer is not None
        oldest: dict[TopicPartition, int] = {}
        for h in self.held:
            oldest[h.record] = min(oldest.get(h.record, h.offset), h.offset)
        offsets = {
            tp: OffsetAndMetadata(min(end, oldest.get(tp, end)), "") for tp, end in ends.items()
        }
        if offsets:
            await self._consumer.commit(offsets)
        if len(self.held) > self.max_held:
            log.warning("%d lifecycle events wait for their recordings", len(self.held))
