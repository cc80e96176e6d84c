"""Batch markers, and which derived events of the log count.

A worker logs what a batch derived on ``memory.items`` and ``memory.lifecycle``, waits until
the broker took all of it, then logs one "logged up to" marker per partition number of the
batch (:class:`~schemas.memory_events.DerivedUpTo`, on ``memory.lifecycle``), naming the
highest offset of every source topic there and where the batch's events landed. Only events a
marker covers count: a derived event no marker covers was logged by an attempt at a batch that
a crash cut short, and every reader of the log (the takeover's fold, history, replay and
rebuild, the episodic projector) leaves it out, so the batch is derived again from the state
before it, whole, maybe otherwise (a redelivery may cut the batch elsewhere).

Markers rule a partition number once any marker of it is in the log: a worker writes one
before its first batch there (:func:`opening_markers`, covering what the log held before, or
nothing), so even a crash in its first batch leaves nothing that counts. In a partition number
without any marker (a log written before markers existed) the older rule decides instead: a
record is derived once its recording is in the log (a tick, or a command on the schedule
topic, once anything it derived is), and what lies beyond that is left out the same way.

This module is the one owner of that rule: the worker builds its markers here, and every
reader asks :func:`logged_batches` (the whole log at once) or a :class:`MarkerIndex` (a log
read pass by pass) whether an event counts, and :func:`marker_upto` or :func:`derives` what one
marker says of the source records.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from processors.batch import RawRecord
from schemas.envelope import new_event_id
from schemas.memory_events import (
    DerivedEvent,
    DerivedRecord,
    DerivedTopic,
    DerivedUpTo,
    LogRange,
    SourcePosition,
    derived_topic_of,
)
from schemas.topics import Topics

SourceKey = tuple[str, int]
"""A source (topic, partition)."""

Logged = tuple[SourcePosition, DerivedRecord]
"""A record of the derived log and where it was read (its topic, partition and offset)."""

Ranges = Mapping[int, LogRange]
"""Per partition number, where a batch's events landed in one derived topic."""

Verdict = Literal["counts", "waits", "left_out"]
"""What a reader does with an event of a partition number that markers rule: apply it (a
marker covers it), hold it (its batch's marker may still come), or drop it (a leftover of an
attempt cut short, never to be covered)."""


def recording_rule_applies(event: DerivedEvent, schedule_topic: str | None) -> bool:
    """Whether, without markers, ``event`` being in the log says its source record is done:
    a recording (the last of what an agent event derives but for the forgettings it caused),
    or anything derived from the schedule topic, which records nothing."""
    position = event.source_position
    if position is None:
        return False
    return derived_topic_of(event) == "items" or position.topic == schedule_topic


def marker_upto(marker: DerivedUpTo) -> dict[SourceKey, int]:
    """The highest source offset per source partition that one marker says its batch (with
    those before it) derived."""
    upto: dict[SourceKey, int] = {}
    for position in marker.upto:
        key = (position.topic, position.partition)
        if upto.get(key, -1) < position.offset:
            upto[key] = position.offset
    return upto


def derives(marker: DerivedUpTo, position: SourcePosition) -> bool:
    """Whether ``marker`` says the source record at ``position`` is derived: it names that
    record, or a later one of its partition (a source partition is derived in order)."""
    return marker_upto(marker).get((position.topic, position.partition), -1) >= position.offset


def marked_upto(markers: Iterable[DerivedUpTo]) -> dict[SourceKey, int]:
    """The highest source offset per source partition that markers say is wholly logged."""
    upto: dict[SourceKey, int] = {}
    for marker in markers:
        for key, offset in marker_upto(marker).items():
            if upto.get(key, -1) < offset:
                upto[key] = offset
    return upto


@dataclass
class MarkerIndex:
    """The markers read so far, to tell for an event of the log whether its batch is whole."""

    ranges: dict[tuple[DerivedTopic, int], list[tuple[int, int, DerivedUpTo]]] = field(
        default_factory=dict
    )
    """(derived topic, partition) -> the batches' (first, last, marker), by first offset."""
    marked: set[int] = field(default_factory=set)
    """Partition numbers with markers: markers alone rule them."""
    last_marker: dict[int, int] = field(default_factory=dict)
    """Per partition number, the highest ``memory.lifecycle`` offset of a marker (if known)."""

    def add(self, marker: DerivedUpTo, at: int | None = None) -> None:
        """Take note of ``marker``, read at offset ``at`` of its lifecycle partition."""
        self.marked.add(marker.partition)
        if at is not None:
            self.last_marker[marker.partition] = max(self.last_marker.get(marker.partition, -1), at)
        topics: tuple[tuple[DerivedTopic, LogRange | None], ...] = (
            ("items", marker.items),
            ("lifecycle", marker.lifecycle),
        )
        for topic, logged in topics:
            if logged is not None:
                runs = self.ranges.setdefault((topic, marker.partition), [])
                insort(runs, (logged.first, logged.last, marker), key=lambda r: r[0])

    def covers(self, where: SourcePosition, event: DerivedEvent) -> bool:
        """Whether a marker covers ``event``, read at ``where``."""
        return self.covering(where, event) is not None

    def covering(self, where: SourcePosition, event: DerivedEvent) -> DerivedUpTo | None:
        """The marker of the batch that logged ``event``, read at ``where``; None if none
        read so far covers it."""
        runs = self.ranges.get((derived_topic_of(event), where.partition), [])
        at = bisect_right(runs, where.offset, key=lambda r: r[0]) - 1
        if at >= 0 and runs[at][2].covers(where, event):
            return runs[at][2]
        return None

    def superseded(self, where: SourcePosition, event: DerivedEvent) -> bool:
        """Whether a batch logged after ``event`` landed in the same partition, or (a lifecycle
        event) a marker follows it: an event no marker covers is then a leftover of an attempt
        cut short, never to be covered. A covered event is never one, even if its marker was
        read with later ones (the episodic projector holds a marker until its batch's last
        recording is applied, and checks what waits at every fetch)."""
        if self.covers(where, event):
            return False
        topic = derived_topic_of(event)
        runs = self.ranges.get((topic, where.partition), [])
        if runs and runs[-1][0] > where.offset:
            return True
        return topic == "lifecycle" and self.last_marker.get(where.partition, -1) > where.offset

    def verdict(self, where: SourcePosition, event: DerivedEvent) -> Verdict:
        """What a reader does with ``event``, read at ``where`` in a partition number markers
        rule, given the markers read so far."""
        if self.covers(where, event):
            return "counts"
        return "left_out" if self.superseded(where, event) else "waits"


@dataclass
class LoggedBatches:
    """The derived log read back, without what crashes cut short."""

    events: list[DerivedEvent]
    """Derived events of wholly logged batches, in the order read."""
    upto: dict[SourceKey, int]
    """Per source partition, the highest offset of wholly logged batches."""
    marked: set[int]
    """Partition numbers with markers, which rule them."""
    partial: list[DerivedEvent]
    """Events left out: logged by an attempt at a batch that never logged its marker."""
    ends: dict[SourceKey, int]
    """Per derived topic and partition, the highest offset read."""


def recorded_upto(
    events: Iterable[DerivedEvent], schedule_topic: str | None
) -> dict[SourceKey, int]:
    """The marks the older rule gives a log without markers: the highest source offset with a
    recording in the log, or (the schedule topic, which records nothing) with any event."""
    upto: dict[SourceKey, int] = {}
    for event in events:
        position = event.source_position
        if position is not None and recording_rule_applies(event, schedule_topic):
            key = (position.topic, position.partition)
            if upto.get(key, -1) < position.offset:
                upto[key] = position.offset
    return upto


def logged_batches(
    records: Iterable[Logged], schedule_topic: str | None = None, marked: Iterable[int] = ()
) -> LoggedBatches:
    """Split the records of ``memory.items`` and ``memory.lifecycle`` (any order of topics and
    partitions) into the derived events of wholly logged batches and their marks.

    In a partition number with markers an event counts if a marker names where it is; in one
    without (a log from before markers), the older rule: if its source offset is at most the
    highest one with a recording in the log. ``marked`` names partition numbers known to have
    markers before ``records`` (a tail read after a snapshot, which may hold none).
    """
    index = MarkerIndex()
    index.marked.update(marked)
    markers: list[DerivedUpTo] = []
    events: list[tuple[SourcePosition, DerivedEvent]] = []
    ends: dict[SourceKey, int] = {}
    for where, record in records:
        key = (where.topic, where.partition)
        ends[key] = max(ends.get(key, -1), where.offset)
        if isinstance(record, DerivedUpTo):
            index.add(record, where.offset)
            markers.append(record)
        else:
            events.append((where, record))
    upto = marked_upto(markers)
    legacy = recorded_upto(
        (e for where, e in events if where.partition not in index.marked), schedule_topic
    )
    upto.update(legacy)
    kept: list[DerivedEvent] = []
    partial: list[DerivedEvent] = []
    for where, event in events:
        if where.partition in index.marked:
            whole = index.covers(where, event)
        else:
            source = event.source_position
            whole = source is None or source.offset <= legacy.get(
                (source.topic, source.partition), -1
            )
        (kept if whole else partial).append(event)
    return LoggedBatches(kept, upto, set(index.marked), partial, ends)


def marked_events(records: Sequence[Logged]) -> list[DerivedEvent]:
    """The derived events of ``records`` in the order read, markers left out: in a partition
    number with markers (read with ``memory.lifecycle``) those of wholly logged batches; in
    one without, all of them (no older rule: what a log without markers holds, as written)."""
    logged = logged_batches(records)
    counted = {id(event) for event in logged.events}
    return [
        record
        for where, record in records
        if not isinstance(record, DerivedUpTo)
        and (where.partition not in logged.marked or id(record) in counted)
    ]


def batch_markers(
    records: Sequence[RawRecord], items: Ranges, lifecycle: Ranges, at: datetime
) -> list[DerivedUpTo]:
    """The markers of a batch whose derived events are all logged: one per partition number,
    naming the highest offset of every source topic there, records that derived nothing or
    were skipped included (a tick that derived nothing is then done too), and where the
    batch's events landed in ``memory.items`` and ``memory.lifecycle``."""
    upto: dict[int, dict[str, int]] = {}
    for raw in records:
        highest = upto.setdefault(raw.partition, {})
        if highest.get(raw.topic, -1) < raw.offset:
            highest[raw.topic] = raw.offset
    return [
        DerivedUpTo(
            event_id=new_event_id(),
            occurred_at=at,
            partition=partition,
            upto=tuple(
                SourcePosition(topic=topic, partition=partition, offset=offset)
                for topic, offset in sorted(highest.items())
            ),
            items=items.get(partition),
            lifecycle=lifecycle.get(partition),
        )
        for partition, highest in sorted(upto.items())
    ]


def logged_ranges(
    derived: Sequence[DerivedEvent], delivered: Sequence[object]
) -> tuple[dict[int, LogRange], dict[int, LogRange]]:
    """Where the events landed, per partition number, in ``memory.items`` and in
    ``memory.lifecycle``, from the producer's metadata (``delivered[i]`` is what sending
    ``derived[i]`` returned). Metadata without an offset leaves its event uncovered: the
    batch then counts for nothing, never for more than it is."""
    spans: dict[DerivedTopic, dict[int, LogRange]] = {"items": {}, "lifecycle": {}}
    for event, metadata in zip(derived, delivered, strict=False):
        offset = getattr(metadata, "offset", None)
        partition = getattr(metadata, "partition", None)
        if not (isinstance(offset, int) and isinstance(partition, int) and offset >= 0):
            continue
        into = spans[derived_topic_of(event)]
        known = into.get(partition)
        into[partition] = (
            LogRange(first=offset, last=offset)
            if known is None
            else LogRange(first=min(known.first, offset), last=max(known.last, offset))
        )
    return spans["items"], spans["lifecycle"]


def opening_markers(
    partitions: Iterable[int],
    derived_upto: Mapping[SourceKey, int],
    log_ends: Mapping[SourceKey, int],
    topics: Topics,
    at: datetime,
) -> list[DerivedUpTo]:
    """The first marker of each partition number that has none, naming what the log holds
    (``derived_upto``: the older rule's marks, or nothing; ``log_ends``: the highest offset of
    each derived partition): from then on markers rule it, so a crash in a worker's first
    batch there leaves nothing that counts. Once per partition number in the life of a log."""

    def held(topic: str, partition: int) -> LogRange | None:
        end = log_ends.get((topic, partition))
        return None if end is None else LogRange(first=0, last=end)

    return [
        DerivedUpTo(
            event_id=new_event_id(),
            occurred_at=at,
            partition=partition,
            upto=tuple(
                SourcePosition(topic=topic, partition=partition, offset=offset)
                for (topic, p), offset in sorted(derived_upto.items())
                if p == partition
            ),
            items=held(topics.items, partition),
            lifecycle=held(topics.lifecycle, partition),
        )
        for partition in sorted(partitions)
    ]
