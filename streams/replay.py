"""Replay: build a new version of the projections from the log, then switch everything to it.

The running system keeps serving and writing the active version meanwhile. The replay:

1. registers a new version (``building``) and bulk-applies ``memory.items`` and
   ``memory.lifecycle``, one partition number at a time, in large batches (no per-record
   commit: the stores record positions with the data, so a replay that dies is simply run
   again into a new version);
2. follows the log in tail passes until little is left;
3. raises the *fence*: every writer finishes its batch and pauses, so the log stops moving;
4. reads the last of the log into the new version, points ``{ns}#projection:active`` at it,
   and lowers the fence. Writers and query services move to the new version at once.

Why a cut is needed before the fence: a worker logs what a batch derived in two steps (what
records triggered, then their recordings and what those pushed out), and the stores skip an
event whose source offset is below the one they have applied. A pass that read half of a batch
would apply later positions first and then skip the rest of that batch. So a pass applies only
events whose source record the consumer group has *committed* (a worker commits after its
batch is logged and applied): everything derived from them is in the log. The rest is held
back for the next pass; under the fence no batch is in flight, so the last pass applies all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from processors.state_fold import causal_order
from projections.interfaces import EpisodicMemoryStore, WorkingMemoryStore
from projections.versions import ProjectionVersion, ProjectionVersions
from schemas.codec import decode_derived_event
from schemas.memory_events import DerivedEvent
from schemas.topics import Topics
from streams.derived_log import decode_logged, log_reader, read_to_end

log = logging.getLogger("engram.replay")

Stores = Sequence[WorkingMemoryStore | EpisodicMemoryStore]
OpenStores = Callable[[ProjectionVersion], Awaitable[Stores]]
Advance = Callable[[int], None]
"""Called with the number of events just applied (drives a progress bar)."""


class SwitchError(RuntimeError):
    """The new version was built but could not be switched to; the message says why."""


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

    def topic_partitions(self) -> list[TopicPartition]:
        return [
            TopicPartition(topic, p)
            for p in self.partitions
            for topic in (self.topics.items, self.topics.lifecycle)
        ]

    async def start_at(self, since: datetime | None) -> int:
        """Start at the beginning, or at the first record written at or after ``since``;
        returns the number of records to read (a lower bound: see :func:`at_end`)."""
        consumer = log_reader(self.bootstrap)
        await consumer.start()
        try:
            tps = self.topic_partitions()
            ends = await consumer.end_offsets(tps)
            starts = await consumer.beginning_offsets(tps)
            if since is not None:
                found = await consumer.offsets_for_times(
                    {tp: int(since.timestamp() * 1000) for tp in tps}
                )
                for tp in tps:
                    hit = found.get(tp)
                    starts[tp] = ends[tp] if hit is None else hit.offset
        finally:
            await consumer.stop()
        self.next_offset = dict(starts)
        return sum(max(0, ends[tp] - starts[tp]) for tp in tps)

    async def read(self, partition: int) -> list[tuple[TopicPartition, int, DerivedEvent]]:
        """Every derived event of one partition number from the cursor to the end, with where
        it sits in the log; the cursor moves past what was read (a pass moves it back to what
        it held back)."""
        out: list[tuple[TopicPartition, int, DerivedEvent]] = []

        def keep(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
            event = decode_logged(tp, record, decode_derived_event)
            if event is not None:
                out.append((tp, record.offset, event))

        for topic in (self.topics.items, self.topics.lifecycle):
            tp = TopicPartition(topic, partition)
            reached = await read_to_end(
                self.bootstrap, [tp], keep, starts={tp: self.next_offset.get(tp, 0)}, timeout=600
            )
            self.next_offset[tp] = max(self.next_offset.get(tp, 0), reached[tp])
        return out


async def committed_offsets(
    bootstrap: str, group_id: str, tps: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The consumer group's committed offsets (next record to process) of the source
    partitions; a partition it never committed is absent."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        out = {}
        for tp in tps:
            offset = await consumer.committed(tp)
            if offset is not None and offset >= 0:
                out[tp] = offset
        return out
    finally:
        await consumer.stop()


def split_at_commits(
    records: Sequence[tuple[TopicPartition, int, DerivedEvent]],
    committed: dict[TopicPartition, int] | None,
) -> tuple[list[DerivedEvent], dict[TopicPartition, int]]:
    """The events safe to apply now, and per derived partition the first offset held back.

    ``committed`` None applies everything (the writers are paused: no batch is half logged).
    """
    ready: list[DerivedEvent] = []
    held: dict[TopicPartition, int] = {}
    for tp, offset, event in records:
        position = event.source_position
        if committed is not None and position is not None:
            done = committed.get(TopicPartition(position.topic, position.partition), 0)
            if position.offset >= done:
                held[tp] = min(held.get(tp, offset), offset)
                continue
        if tp in held:
            # Everything after a held record waits too, so the next pass, which reads from the
            # first held offset, does not apply a later event before an earlier one.
            continue
        ready.append(event)
    return ready, held


async def apply_in_batches(
    events: Sequence[DerivedEvent],
    stores: Stores,
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
    stores: Stores,
    committed: dict[TopicPartition, int] | None,
    *,
    batch_size: int,
    advance: Advance | None,
) -> tuple[int, int]:
    """One pass over the log from the cursor: returns (events applied, events held back).

    The next partition is read while this one is applied: reading is the broker's and the
    decoder's work, applying Redis's and Qdrant's, so the two overlap.
    """
    applied = held_count = 0
    parts = list(cursor.partitions)
    reading = asyncio.ensure_future(cursor.read(parts[0])) if parts else None
    for i, _ in enumerate(parts):
        assert reading is not None
        records = await reading
        reading = asyncio.ensure_future(cursor.read(parts[i + 1])) if i + 1 < len(parts) else None
        ready, held = split_at_commits(records, committed)
        for tp, offset in held.items():
            cursor.next_offset[tp] = min(cursor.next_offset[tp], offset)
        held_count += len(records) - len(ready)
        ordered = causal_order(ready)
        await apply_in_batches(ordered, stores, batch_size, advance)
        applied += len(ordered)
    return applied, held_count


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

    async def run(
        self,
        *,
        name: str | None = None,
        into: ProjectionVersion | None = None,
        since: datetime | None = None,
        switch: bool = True,
        total: Callable[[int], None] | None = None,
        advance: Advance | None = None,
    ) -> ReplayReport:
        started = time.perf_counter()
        target = into or await self.versions.create(name, note="engram replay")
        report = ReplayReport(version=target, previous=None)
        cursor = DerivedLogCursor(self.bootstrap, self.topics, self.partitions)
        expected = await cursor.start_at(since)
        if total is not None:
            total(expected)
        stores = await self.open_stores(target)
        try:
            for _ in range(1 + self.tail_passes):
                committed = await committed_offsets(
                    self.bootstrap, self.group_id, self._source_partitions()
                )
                applied, held = await replay_pass(
                    cursor, stores, committed, batch_size=self.batch_size, advance=advance
                )
                report.events += applied
                report.passes += 1
                log.info("replay pass %d: %d applied, %d held back", report.passes, applied, held)
                if applied + held < self.tail_small:
                    break
            if target.name is not None and into is None:
                await self.versions.set_state(target.name, "ready")
            if switch:
                await self._switch(cursor, stores, report, advance)
        finally:
            for store in stores:
                await store.close()
        report.seconds = time.perf_counter() - started
        return report

    def _source_partitions(self) -> list[TopicPartition]:
        topics = (*self.topics.agent_inputs, self.topics.schedule, self.topics.access)
        return [TopicPartition(t, p) for t in topics for p in self.partitions]

    async def _switch(
        self,
        cursor: DerivedLogCursor,
        stores: Stores,
        report: ReplayReport,
        advance: Advance | None,
    ) -> None:
        target = report.version
        await self.versions.raise_fence(target.name or "", self.fence_timeout)
        paused_at = time.perf_counter()
        try:
            await self._wait_for_writers(target)
            applied, _ = await replay_pass(
                cursor, stores, None, batch_size=self.batch_size, advance=advance
            )
            report.events += applied
            report.fenced_events = applied
            report.passes += 1
            report.previous = await self.versions.activate(target.name)
            report.switched = True
        finally:
            await self.versions.lower_fence()
            report.pause_seconds = time.perf_counter() - paused_at

    async def _wait_for_writers(self, target: ProjectionVersion) -> None:
        """Until every writer says it paused for this fence; a writer that is not there stops
        mattering when its heartbeat expires."""
        deadline = time.monotonic() + self.fence_timeout
        while True:
            members = await self.versions.members()
            waiting = [
                m for m in members if m.role != "service" and m.paused_for != (target.name or "")
            ]
            if not waiting:
                return
            if time.monotonic() > deadline:
                names = ", ".join(f"{m.role} {m.member_id}" for m in waiting)
                raise SwitchError(
                    f"these writers did not pause within {self.fence_timeout:.0f}s: {names}; "
                    f"version {target.label} is built and can be switched to later "
                    "(engram versions switch)"
                )
            await asyncio.sleep(0.1)


async def wait_until_unused(
    versions: ProjectionVersions, version: ProjectionVersion, timeout: float
) -> None:
    """Until no running process uses ``version`` (so its stores can be dropped)."""
    deadline = time.monotonic() + timeout
    while True:
        users = [m for m in await versions.members() if m.uses(version.name)]
        if not users:
            return
        if time.monotonic() > deadline:
            names = ", ".join(f"{m.role} {m.member_id}" for m in users)
            raise SwitchError(f"version {version.label} is still in use by {names}")
        await asyncio.sleep(0.2)
