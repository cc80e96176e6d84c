"""The agent index of the version a replay builds: the entries the live workers wrote for the
same log, batch by batch (:mod:`projections.working.agent_index`).

A live batch indexes, per agent and topic partition, where its derived events landed and the
retrievals it consumed, and moves the ends to its marker. A replay reads the same batches back
by their markers: a marker names where its batch's events landed (``items``, ``lifecycle``),
and its source marks name the last ``memory.access`` record the batch consumed, so the
retrievals between the previous marker's mark and its own are the batch's. Each batch is
indexed when its marker is first read: the markers' rule has then every event of it in hand
(``memory.lifecycle`` is read before ``memory.items``, and what waited for the marker in an
earlier pass is read again). Read from the log's start, a partition number's first marker is
its opening marker, which indexed nothing live, and is passed over; read from a later point
(``--since``), the first marker's batch may have begun before it: what of it was read is
indexed (a member of the events read, beside the whole one the live worker wrote while the
version was active), its retrievals are not.

The index is trusted for a partition number (``whole``) only where the replay read the log
from its first record and that record is the opening marker of an empty log, as a live worker
trusts it only for a log it opened empty; a replay from a later point into a version leaves
the version's mark as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition

from processors.batch import RawRecord
from processors.batch_markers import MarkerIndex, marker_upto
from projections.working.agent_index import AgentIndex, BatchEntries, batch_entries
from schemas.memory_events import AgentForgotten, DerivedEvent, DerivedRecord, DerivedUpTo
from schemas.memory_events import SourcePosition as Where
from schemas.topics import Topics
from streams.eventlog.derived_log import read_to_end

Read = Sequence[tuple[TopicPartition, int, DerivedRecord]]
"""One partition number's records as the replay's cursor read them, ``memory.lifecycle``
first."""

INDEXED_PER_CALL = 500
"""Batches indexed in one script call: a pass's can be many."""


@dataclass
class Landed:
    """Where a record landed, as the producer's metadata says (what :func:`batch_entries`
    reads)."""

    topic: str
    partition: int
    offset: int


@dataclass
class ReplayIndexer:
    """Indexes the batches a replay reads, once each, in log order."""

    index: AgentIndex
    bootstrap: str
    topics: Topics
    starts: dict[TopicPartition, int] = field(default_factory=dict)
    """Where the replay began reading each derived partition."""
    marker_upto: dict[int, int] = field(default_factory=dict)
    """Per partition number, the ``memory.lifecycle`` offset of the last marker indexed."""
    access_upto: dict[int, int] = field(default_factory=dict)
    """Per partition number, the last ``memory.access`` offset a marker indexed named."""

    async def index_read(self, partition: int, records: Read, markers: MarkerIndex) -> None:
        """Index the batches whose markers ``records`` holds for the first time."""
        lifecycle = TopicPartition(self.topics.lifecycle, partition)
        last = self.marker_upto.get(partition, -1)
        fresh = [
            (offset, r)
            for tp, offset, r in records
            if tp == lifecycle and isinstance(r, DerivedUpTo) and offset > last
        ]
        if not fresh:
            return
        whole = last < 0 and self._opened_empty(partition, fresh[0])
        if partition not in self.marker_upto:
            offset, first = fresh[0]
            # Its retrievals are not read: the opening marker names what the log held before
            # any batch was indexed, and from a later point its batch may have begun before.
            consumed = marker_upto(first).get((self.topics.access, partition))
            if consumed is not None:
                self.access_upto[partition] = consumed
            if self._from_start(partition):
                self.marker_upto[partition] = offset
                fresh = fresh[1:]
        events = _batches_of(records, markers)
        retrievals = await self._retrievals(partition, [m for _, m in fresh])
        pending: list[BatchEntries] = []
        for offset, marker in fresh:
            mine = events.get(marker.event_id, [])
            forgotten = {e.agent_id for _, e in mine if isinstance(e, AgentForgotten)}
            if forgotten:
                # As the live worker does: the old life out of the index, then the batch in,
                # so that the index keeps the erasure itself.
                await self.index.add_batches(pending)
                pending = []
                for agent in sorted(forgotten):
                    await self.index.forget(agent)
            pending.append(self._entries(marker, offset, mine, retrievals.get(marker.event_id, [])))
            if forgotten or len(pending) >= INDEXED_PER_CALL:
                await self.index.add_batches(pending)
                pending = []
            self.marker_upto[partition] = offset
        await self.index.add_batches(pending)
        if whole:
            await self.index.set_whole([partition], True)

    def _from_start(self, partition: int) -> bool:
        """Whether the replay reads the partition number's ``memory.lifecycle`` from its first
        record: its first marker is then the opening one, which no live batch wrote (one per
        partition number in the life of a log, before any batch's)."""
        return self.starts.get(TopicPartition(self.topics.lifecycle, partition), -1) == 0

    def _entries(
        self,
        marker: DerivedUpTo,
        offset: int,
        events: Sequence[tuple[Where, DerivedEvent]],
        retrievals: Sequence[RawRecord],
    ) -> BatchEntries:
        """What the live worker indexed for the batch of ``marker`` (logged at ``offset``).
        The ends are the marker's ranges: the batch's events include those of forgotten
        agents, which no longer open."""
        p = marker.partition
        delivered = [Landed(w.topic, w.partition, w.offset) for w, _ in events]
        landed = [Landed(self.topics.lifecycle, p, offset)]
        entries = batch_entries(retrievals, [e for _, e in events], delivered, landed)
        if marker.items is None:
            return entries
        items = (self.topics.items, p)
        ends = entries.ends | {items: max(entries.ends.get(items, -1), marker.items.last)}
        return replace(entries, ends=ends)

    def _opened_empty(self, partition: int, first: tuple[int, DerivedUpTo]) -> bool:
        offset, marker = first
        read_from = [
            self.starts.get(TopicPartition(topic, partition), -1)
            for topic in (self.topics.lifecycle, self.topics.items)
        ]
        empty = not marker.upto and marker.items is None and marker.lifecycle is None
        return empty and offset == 0 and read_from == [0, 0]

    async def _retrievals(
        self, partition: int, markers: Sequence[DerivedUpTo]
    ) -> dict[str, list[RawRecord]]:
        """Per marker (by event id), the ``memory.access`` records its batch consumed."""
        access = TopicPartition(self.topics.access, partition)
        bounds: list[tuple[int, str]] = []
        for marker in markers:
            upto = marker_upto(marker).get((access.topic, partition))
            if upto is not None and upto > self.access_upto.get(partition, -1):
                bounds.append((upto, marker.event_id))
        if not bounds:
            return {}
        start = self.access_upto.get(partition, -1) + 1
        stop = max(upto for upto, _ in bounds)
        got: list[RawRecord] = []

        def keep(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
            if start <= record.offset <= stop:
                got.append(
                    RawRecord(
                        tp.topic, tp.partition, record.offset, record.key, None, kind="retrieval"
                    )
                )

        # Read up to the log's end: at most a pass's worth beyond ``stop``.
        await read_to_end(self.bootstrap, [access], keep, starts={access: start}, timeout=600)
        out: dict[str, list[RawRecord]] = {}
        below = start - 1
        for upto, event_id in sorted(bounds):
            out[event_id] = [r for r in got if below < r.offset <= upto]
            below = upto
        self.access_upto[partition] = stop
        return out


def _batches_of(records: Read, markers: MarkerIndex) -> dict[str, list[tuple[Where, DerivedEvent]]]:
    """Per marker (by event id: a marker read again is another object), the derived events of
    its batch in ``records``."""
    out: dict[str, list[tuple[Where, DerivedEvent]]] = {}
    for tp, offset, record in records:
        if isinstance(record, DerivedUpTo):
            continue
        where = Where(topic=tp.topic, partition=tp.partition, offset=offset)
        marker = markers.covering(where, record)
        if marker is not None:
            out.setdefault(marker.event_id, []).append((where, record))
    return out
