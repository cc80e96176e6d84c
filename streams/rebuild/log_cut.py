"""Cutting an agent's derived log at a point: the derived events its memory was made of then.

Pure: it takes the records of the agent's partition of ``memory.items`` and
``memory.lifecycle`` already read (with their log timestamps) and reads nothing itself;
:mod:`streams.rebuild.as_of` reads them and applies the cut to scratch stores.

**What a point is.** The memory changes a batch at a time: the stores apply a batch only once
its "logged up to" marker is in the log (:mod:`processors.batch_markers`), and markers are
totally ordered in the partition of ``memory.lifecycle``. So every point is a prefix of the
partition's markers, and the memory at the point is what the batches of that prefix logged
(the events those markers cover, as every reader of the log counts them). A point is given as:

* a **time** ``T``: the markers whose log timestamp is at or before ``T``, up to the first
  that is not. The marker's log time, not the events' ``occurred_at``: ``occurred_at`` is the
  source event's own time (a simulation's, or a producer's, which may lie in the past), not
  when the memory changed, while a batch counts from the moment its marker is logged. A
  marker's timestamp is its producer's clock (the worker's), so times compare across hosts
  only as well as their clocks agree.
* a **position on a topic the processors consume** (``agent.observations:2:17``, what
  publishing returned; ``memory.schedule``, ``memory.access``): the markers up to the first
  that names that record as derived (its ``upto``), i.e. the memory once that record was.
* a **position on the derived log**: on ``memory.lifecycle``, the markers at or before it, and
  if the record there is an event, up to the marker of its batch; on ``memory.items``, up to
  the marker of the batch that logged that recording.

A recorded retrieval adds a bound of its own (:attr:`LogPoint.served_before`): a batch that
derived the retrieval's own record, or a later one of ``memory.access``, was logged after the
retrieval was answered, so it never counts, whatever the clocks say.

A partition number without markers (a log written before them, never taken over since) can be
cut by time only, each event at its own log time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from processors.batch_markers import MarkerIndex, derives, logged_batches
from processors.emission_order import causal_order
from projections.retrieval.as_of import AsOfNotInLogError
from schemas.memory_events import (
    DerivedEvent,
    DerivedRecord,
    DerivedUpTo,
    MemoryWritten,
    SourcePosition,
)
from schemas.topics import Topics, parse_position

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MILLISECOND = timedelta(milliseconds=1)


def epoch_ms(moment: datetime) -> int:
    """``moment`` in milliseconds since the epoch, floored, as Kafka stamps records. Computed by
    subtraction, which holds for any aware datetime (converting one near year 1 or 9999 to UTC
    may overflow)."""
    return (moment - EPOCH) // MILLISECOND


@dataclass(frozen=True)
class LoggedRecord:
    """A record of the derived log as read: where it is, what it holds, when it was logged."""

    where: SourcePosition
    record: DerivedRecord
    logged_ms: int
    """The record's log timestamp, in milliseconds since the epoch."""


@dataclass(frozen=True)
class LogPoint:
    """A point of the log (see the module docstring); at least one bound is given."""

    time: datetime | None = None
    position: SourcePosition | None = None
    served_before: SourcePosition | None = None
    """A retrieval's own record on ``memory.access``: no batch that derived it (or a later
    record there) counts."""

    def __str__(self) -> str:
        said = []
        if self.position is not None:
            p = self.position
            said.append(f"{p.topic}:{p.partition}:{p.offset}")
        if self.time is not None:
            said.append(self.time.isoformat())
        if self.served_before is not None:
            p = self.served_before
            said.append(f"before {p.topic}:{p.partition}:{p.offset} was derived")
        return ", ".join(said) or "the end of the log"


def parse_point(text: str) -> LogPoint:
    """An ISO 8601 time (UTC when it gives no offset) or ``topic:partition:offset``; raises
    ``ValueError`` saying which forms are understood. A time is tried first: ``2026-01-01T10:00``
    would otherwise read as offset 0 of partition 0 of a topic ``2026-01-01T10``."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        pass
    else:
        return LogPoint(time=moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    try:
        return LogPoint(position=parse_position(text))
    except ValueError:
        pass
    raise ValueError(
        f"{text!r} is neither topic:partition:offset (as `engram publish` and `engram "
        "history` print positions) nor an ISO 8601 time such as 2026-11-22T10:00:00+00:00"
    )


@dataclass
class CutLog:
    """The agent's derived log cut at a point."""

    events: list[DerivedEvent]
    """The agent's events of the batches before the cut, in emission order: its memory then."""
    later: list[DerivedEvent]
    """The agent's events of the batches after it (what the memory became), in log order."""
    batches: int
    """Batches (markers) of the partition before the cut."""
    last_batch: SourcePosition | None = None
    """Where the last marker before the cut is on ``memory.lifecycle``."""
    last_batch_ms: int | None = None
    """That marker's log time (ms since the epoch)."""
    batches_after: int = 0
    written_ms: dict[str, int] = field(default_factory=dict)
    """Per memory written before the cut, the log time of the marker of the batch that last
    wrote it: how long before the point it came."""
    marked: bool = True
    """Whether markers rule the partition (else the cut was made by each event's time)."""


@dataclass(frozen=True)
class _Marker:
    where: SourcePosition
    marker: DerivedUpTo
    logged_ms: int


def cut_at(
    records: Sequence[LoggedRecord],
    point: LogPoint,
    *,
    agent_id: str,
    partition: int,
    topics: Topics,
    now: datetime,
    ends: Mapping[tuple[str, int], int] | None = None,
) -> CutLog:
    """The agent's events at ``point``, from the records of its ``partition`` of the derived
    log (any order of the two topics, each in offset order).

    ``ends`` holds what is known of where partitions end (the offset the next record gets):
    a position at or past one is not in the log. Raises :class:`AsOfNotInLogError` for a point
    the log does not hold: a time after ``now``, a position on another partition than the
    agent's, at or past its end, or that no marker names yet.
    """
    _check_in_log(point, partition=partition, now=now, ends=ends or {})
    markers = sorted(
        (
            _Marker(r.where, r.record, r.logged_ms)
            for r in records
            if isinstance(r.record, DerivedUpTo) and r.where.topic == topics.lifecycle
        ),
        key=lambda m: m.where.offset,
    )
    if not markers:
        return _cut_by_time(records, point, agent_id=agent_id, schedule=topics.schedule)
    limit = _lifecycle_limit(records, markers, point, topics)
    kept: list[_Marker] = []
    for m in markers:  # a prefix: up to the first marker past the point
        if not _before_cut(m, point, limit):
            break
        kept.append(m)
    before, everything = MarkerIndex(), MarkerIndex()
    for m in markers:
        everything.add(m.marker, m.where.offset)
    for m in kept:
        before.add(m.marker, m.where.offset)
    logged_ms = {id(m.marker): m.logged_ms for m in kept}
    written_ms: dict[str, int] = {}

    def counted_before(where: SourcePosition, event: DerivedEvent) -> bool:
        found = before.covering(where, event)
        if found is not None and isinstance(event, MemoryWritten):
            written_ms[event.memory_id] = logged_ms[id(found)]
        return found is not None

    events, later = _split(records, agent_id, counted_before, everything.covers)
    last = kept[-1] if kept else None
    return CutLog(
        events=causal_order(events),
        later=later,
        batches=len(kept),
        last_batch=None if last is None else last.where,
        last_batch_ms=None if last is None else last.logged_ms,
        batches_after=len(markers) - len(kept),
        written_ms=written_ms,
    )


def _check_in_log(
    point: LogPoint, *, partition: int, now: datetime, ends: Mapping[tuple[str, int], int]
) -> None:
    if point.time is not None and epoch_ms(point.time) > epoch_ms(now):
        raise AsOfNotInLogError(
            f"{point.time.isoformat()} is in the future: the log ends at {now.isoformat()}"
        )
    position = point.position
    if position is None:
        return
    where = f"{position.topic}:{position.partition}:{position.offset}"
    if position.partition != partition:
        raise AsOfNotInLogError(
            f"{where} is not on the agent's partition: its records are on partition "
            f"{partition} of every topic"
        )
    end = ends.get((position.topic, position.partition))
    if end is not None and position.offset >= end:
        raise AsOfNotInLogError(
            f"{where} is not in the log: the partition ends at {end}", log_end=end
        )


def _lifecycle_limit(
    records: Sequence[LoggedRecord], markers: Sequence[_Marker], point: LogPoint, topics: Topics
) -> int | None:
    """The offset on ``memory.lifecycle`` of the last marker a position lets in (None: no
    position)."""
    position = point.position
    if position is None:
        return None
    where = f"{position.topic}:{position.partition}:{position.offset}"
    if position.topic in (topics.items, topics.lifecycle):
        held = next(
            (r for r in records if r.where == position and not isinstance(r.record, DerivedUpTo)),
            None,
        )
        covering = None
        if held is not None and not isinstance(held.record, DerivedUpTo):
            event = held.record
            covering = next((m for m in markers if m.marker.covers(position, event)), None)
        if covering is not None:
            return max(covering.where.offset, position.offset)
        if position.topic == topics.lifecycle:
            return position.offset
        raise AsOfNotInLogError(
            f"no batch marker covers {where}: a recording an attempt cut short by a crash left "
            "(it never counted), or a batch still being logged; give a time or a "
            f"{topics.lifecycle} position"
        )
    first = next((m for m in markers if derives(m.marker, position)), None)
    if first is None:
        raise AsOfNotInLogError(
            f"{where} is in the log but not derived yet: the processors are behind or stopped; "
            "retry when they have caught up"
        )
    return first.where.offset


def _before_cut(m: _Marker, point: LogPoint, limit: int | None) -> bool:
    if point.time is not None and m.logged_ms > epoch_ms(point.time):
        return False
    if limit is not None and m.where.offset > limit:
        return False
    return point.served_before is None or not derives(m.marker, point.served_before)


def _split(
    records: Sequence[LoggedRecord],
    agent_id: str,
    before: Callable[[SourcePosition, DerivedEvent], bool],
    counted: Callable[[SourcePosition, DerivedEvent], bool],
) -> tuple[list[DerivedEvent], list[DerivedEvent]]:
    """The agent's counted events, split into those of batches before the cut and after it."""
    events: list[DerivedEvent] = []
    later: list[DerivedEvent] = []
    for r in records:
        event = r.record
        if isinstance(event, DerivedUpTo) or event.agent_id != agent_id:
            continue
        if before(r.where, event):
            events.append(event)
        elif counted(r.where, event):
            later.append(event)
    return events, later


def _cut_by_time(
    records: Sequence[LoggedRecord], point: LogPoint, *, agent_id: str, schedule: str
) -> CutLog:
    """A partition without markers: what counts by the older rule, each event at its own log
    time; a position cannot be placed among batches nobody marked."""
    if point.position is not None:
        raise AsOfNotInLogError(
            "this partition of the derived log has no batch markers (written before them): "
            "give a time, not a position"
        )
    counted = logged_batches(((r.where, r.record) for r in records), schedule).events
    ids = {id(event) for event in counted}
    limit = None if point.time is None else epoch_ms(point.time)
    events: list[DerivedEvent] = []
    later: list[DerivedEvent] = []
    for r in _events_of(records, agent_id):
        if id(r.record) not in ids:
            continue
        assert not isinstance(r.record, DerivedUpTo)
        (events if limit is None or r.logged_ms <= limit else later).append(r.record)
    return CutLog(
        events=causal_order(events),
        later=later,
        batches=0,
        marked=False,
    )


def _events_of(records: Iterable[LoggedRecord], agent_id: str) -> Iterable[LoggedRecord]:
    for r in records:
        if not isinstance(r.record, DerivedUpTo) and r.record.agent_id == agent_id:
            yield r
