"""The episodic projection fed from the log, for when workers cannot write it themselves.

Qdrant Edge lives inside one process, so with several worker processes the workers write
working memory (Redis, shared) and this projector, in the process that owns the Edge shard,
applies ``memory.items`` and ``memory.lifecycle`` to episodic memory. It is a plain consumer
(no Faust hop: PARTS.md puts a raw ``getmany`` at ~300k records/s).

Ordering: the two topics are fetched independently, and lifecycle records are small, so under a
backlog a MemoryForgotten can arrive before the MemoryRecorded of the memory it forgets. A
forgetting carries the source position of its cause (the recording or promotion that pushed the
memory out), which comes after the forgotten memory's own recording in ``memory.items``. So a
forgetting is applied only once the store's applied position for that source partition has
reached it; until then it is held, and lifecycle offsets are committed only up to the oldest held
record, so a restart reads it again. Items offsets are committed after the store applied them.
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
from schemas.memory_events import DerivedEvent, MemoryForgotten
from schemas.topics import Topics

log = logging.getLogger("engram.episodic_projector")


@dataclass(frozen=True)
class HeldForgetting:
    event: MemoryForgotten
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
    held: list[HeldForgetting] = field(default_factory=list)
    applied: dict[tuple[str, int], int] = field(default_factory=dict)
    records: int = 0
    failures: int = 0
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

    async def _applied_offset(self, topic: str, partition: int) -> int:
        key = (topic, partition)
        if key not in self.applied:
            stored = await self.store.applied_offset(topic, partition)
            self.applied[key] = -1 if stored is None else stored
        return self.applied[key]

    async def project(self, batch: dict[TopicPartition, list[object]]) -> None:
        items: list[DerivedEvent] = []
        arriving: list[HeldForgetting] = []
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
                # A summary's put comes before its forgetting in memory.lifecycle itself, so only
                # forgettings of memories of events (whose puts are in memory.items) can overtake
                # them. Holding the others could wait forever: a tick's prunings have a position
                # on memory.schedule that nothing else may ever reach.
                if isinstance(event, MemoryForgotten) and event.level == 0:
                    arriving.append(HeldForgetting(event, tp, record.offset))  # type: ignore[attr-defined]
                else:
                    items.append(event)
        await self.store.apply(items)
        for key, offset in latest_positions(items).items():
            self.applied[key] = max(self.applied.get(key, -1), offset)
        ready: list[DerivedEvent] = []
        held: list[HeldForgetting] = []
        for h in [*self.held, *arriving]:
            position = h.event.source_position
            if (
                position is None
                or await self._applied_offset(position.topic, position.partition) >= position.offset
            ):
                ready.append(h.event)
            else:
                held.append(h)
        await self.store.apply(ready)
        self.held = held
        self.records += sum(len(r) for r in batch.values())
        await self._commit(ends)

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
            log.warning("%d forgettings wait for their recordings", len(self.held))
