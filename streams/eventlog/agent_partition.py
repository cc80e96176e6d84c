"""Reading one agent's records off its partition: the read ``engram history`` and a recall
share.

Every record of an agent is keyed by its id, and all topics share one partition count, so the
agent's records are on one partition number in every topic (the one
:func:`streams.eventlog.history.partition_for` names). The whole partition is read from the
beginning; other agents' records are passed over by their key, undecoded. Records without a
key are kept: the batch markers are the partition's, and say which derived events count
(:mod:`processors.batch_markers`). Where the agent index says where the agent's records lie,
:func:`read_indexed` fetches only those, and the records logged after the index's end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from projections.history import LogUnavailableError
from schemas.codec import DecodeError
from schemas.errors import EngramError
from schemas.memory_events import SourcePosition
from streams.eventlog.derived_log import read_with
from streams.eventlog.kafka_clients import log_reader
from streams.eventlog.log_starts import log_starts
from streams.privacy.sealing import RecordSealer


class AgentRecord(NamedTuple):
    """One record kept from the agent's partition."""

    where: SourcePosition
    value: bytes | DecodeError | None
    """Its bytes opened by the sealer (or why they do not open)."""
    log_ms: int
    """Its log time, in ms since the epoch."""


@dataclass
class AgentPartition:
    """What one read of an agent's partition found."""

    records: list[AgentRecord]
    """In log order per partition."""
    ends: dict[tuple[str, int], int]
    """Per partition read, where reading it stopped: its end when the read began, or later."""
    total: int
    """Records on the partitions when the read began, every agent's: what the read costs."""


async def read_agent_partition(
    bootstrap: str,
    names: Sequence[str],
    partition: int,
    partitions: int,
    agent_id: str,
    sealer: RecordSealer,
    *,
    keep_at: SourcePosition | None = None,
    total: Callable[[int], None] | None = None,
    advance: Callable[[int], None] | None = None,
    poll_ms: int = 300,
) -> AgentPartition:
    """The agent's records of ``partition`` of each topic of ``names`` (those with its key,
    those without, and the record at ``keep_at``, whoever's it is), opened; a topic never
    written has none. ``total`` is told how many records there are to read, ``advance`` of
    each one read.

    Raises :class:`LogUnavailableError` when the broker cannot be read or a topic does not
    have ``partitions`` partitions (the agent's records would then be looked for on the wrong
    partition). The caller bounds the time.
    """
    key = agent_id.encode("utf-8")
    named = None if keep_at is None else (keep_at.topic, keep_at.partition, keep_at.offset)
    kept: list[tuple[TopicPartition, int, bytes, int]] = []

    def keep(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        if advance is not None:
            advance(1)
        value = record.value
        if value is None:
            return
        if (
            record.key is None
            or record.key == key
            or (tp.topic, tp.partition, record.offset) == named
        ):
            kept.append((tp, record.offset, value, record.timestamp))

    consumer = log_reader(bootstrap)
    try:
        try:
            await consumer.start()
            tps = await _agent_partitions(consumer, names, partition, partitions)
            if not tps:
                return AgentPartition([], {}, 0)
            reported = await consumer.end_offsets(tps)
            starts = await log_starts(consumer, tps)
            expected = sum(max(0, reported[tp] - starts[tp]) for tp in tps)
            if total is not None:
                total(expected)
            # No deadline of its own: the caller's ``asyncio.timeout`` bounds the read.
            reached = await read_with(
                consumer, tps, keep, starts=starts, timeout=math.inf, poll_ms=poll_ms
            )
        finally:
            await consumer.stop()
        opened = await sealer.open_all([value for _, _, value, _ in kept])
    except KafkaError as exc:
        raise LogUnavailableError(f"cannot read the event log at {bootstrap}: {exc}") from exc
    return AgentPartition(
        [
            AgentRecord(
                SourcePosition(topic=tp.topic, partition=tp.partition, offset=offset), value, ms
            )
            for (tp, offset, _, ms), value in zip(kept, opened, strict=True)
        ],
        {(tp.topic, tp.partition): end for tp, end in reached.items()},
        expected,
    )


async def _agent_partitions(
    consumer: AIOKafkaConsumer, names: Sequence[str], partition: int, partitions: int
) -> list[TopicPartition]:
    existing = await consumer.topics()
    tps = []
    for name in names:
        if name not in existing:
            continue  # nothing was ever written there: no records, not an error
        count = len(consumer.partitions_for_topic(name) or ())
        if count != partitions:
            raise LogUnavailableError(
                f"{name} has {count} partitions, not {partitions} as configured "
                "(ENGRAM_PARTITIONS): the agent's records cannot be located"
            )
        tps.append(TopicPartition(name, partition))
    return tps


INDEXED_FETCH_BYTES = 1024
"""A read by the index fetches this much past a place at most: the records it wants are few."""
MERGED_GAP = 32
"""Places of the index this close are read in one pass rather than with a seek each."""


EMPTY_POLLS_AT_END = 3
"""Polls that find nothing, at or past the end the broker reports, before a read by the agent
index concludes the log ends there."""


class IndexBeyondLogError(EngramError, LookupError):
    """The agent index names offsets past the log's end: it outlived the log it indexed (the
    topics were recreated while Redis was kept). The caller reads the partition instead."""


@dataclass
class IndexedRead:
    """What a read by the agent index found."""

    records: list[AgentRecord]
    """The indexed records, then those after the index's end, in log order per partition."""
    read: int
    """Records fetched from the broker, every agent's: what the read costs."""


async def read_indexed(
    bootstrap: str,
    partition: int,
    agent_id: str,
    sealer: RecordSealer,
    wanted: dict[str, set[int]],
    ends: dict[str, int],
    *,
    poll_ms: int = 200,
) -> IndexedRead:
    """The agent's records of ``partition`` the index names (``wanted``: per topic, offsets),
    and every record with its key or none after the index's end of each topic (``ends``; from
    the beginning for a topic without one). The caller bounds the time; raises
    :class:`LogUnavailableError` when the broker cannot be read."""
    key = agent_id.encode("utf-8")
    kept: list[tuple[TopicPartition, int, bytes, int]] = []
    read = 0

    def keep_after_end(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        nonlocal read
        read += 1
        if record.value is not None and (record.key is None or record.key == key):
            kept.append((tp, record.offset, record.value, record.timestamp))

    consumer = log_reader(bootstrap, fetch_bytes=INDEXED_FETCH_BYTES)
    try:
        try:
            await consumer.start()
            existing = await consumer.topics()
            for topic, offsets in wanted.items():
                if topic not in existing:
                    continue
                tp = TopicPartition(topic, partition)
                tail = ends.get(topic, -1) + 1
                consumer.assign([tp])
                # A fetch brings back whole record batches, past the span it was asked for:
                # what it brought of later spans is kept once, and a span it covered is not
                # read again (they were kept at both, up to nine times a record).
                wanted_here = {o for o in offsets if o < tail}
                have: set[int] = set()
                for first, last in _merged(sorted(wanted_here)):
                    if first in have and last in have:  # one contiguous fetch held it all
                        continue
                    got = await _read_span(consumer, tp, first, last, poll_ms)
                    read += len(got)
                    for r in got:
                        if r.offset in wanted_here and r.offset not in have:
                            have.add(r.offset)
                            if r.value is not None:
                                kept.append((tp, r.offset, r.value, r.timestamp))
                # What was logged after the index's end, to the log's end (read as every
                # reader of the log does: the end the broker reports may fall short).
                await read_with(
                    consumer,
                    [tp],
                    keep_after_end,
                    starts={tp: tail},
                    timeout=math.inf,
                    poll_ms=poll_ms,
                )
        finally:
            await consumer.stop()
        return await _opened(kept, read, sealer)
    except KafkaError as exc:
        raise LogUnavailableError(f"cannot read the event log at {bootstrap}: {exc}") from exc


async def read_before(
    bootstrap: str,
    partition: int,
    agent_id: str,
    sealer: RecordSealer,
    stops: dict[str, int],
    mine_below: dict[str, int],
    *,
    poll_ms: int = 200,
) -> IndexedRead:
    """The records of ``partition`` of each topic of ``stops`` from its beginning to before
    its stop: those without a key (the markers) and the agent's below ``mine_below`` of their
    topic (none for a topic it does not name). What a history reads of an agent whose index
    was trimmed: the part of the log the index no longer covers. The caller bounds the time;
    raises :class:`LogUnavailableError` when the broker cannot be read."""
    key = agent_id.encode("utf-8")
    kept: list[tuple[TopicPartition, int, bytes, int]] = []
    read = 0
    consumer = log_reader(bootstrap)
    try:
        try:
            await consumer.start()
            existing = await consumer.topics()
            for topic, stop in stops.items():
                if topic not in existing or stop <= 0:
                    continue
                tp = TopicPartition(topic, partition)
                below = mine_below.get(topic, 0)
                consumer.assign([tp])
                consumer.seek(tp, (await log_starts(consumer, [tp]))[tp])
                while await consumer.position(tp) < stop:
                    batch = await consumer.getmany(tp, timeout_ms=poll_ms, max_records=10_000)
                    for r in batch.get(tp, []):
                        if r.offset >= stop:
                            break
                        read += 1
                        if r.value is not None and (
                            r.key is None or (r.key == key and r.offset < below)
                        ):
                            kept.append((tp, r.offset, r.value, r.timestamp))
        finally:
            await consumer.stop()
        return await _opened(kept, read, sealer)
    except KafkaError as exc:
        raise LogUnavailableError(f"cannot read the event log at {bootstrap}: {exc}") from exc


async def _opened(
    kept: Sequence[tuple[TopicPartition, int, bytes, int]], read: int, sealer: RecordSealer
) -> IndexedRead:
    """The records kept (topic partition, offset, sealed value, timestamp), opened."""
    opened = await sealer.open_all([value for _, _, value, _ in kept])
    return IndexedRead(
        [
            AgentRecord(
                SourcePosition(topic=tp.topic, partition=tp.partition, offset=offset), value, ms
            )
            for (tp, offset, _, ms), value in zip(kept, opened, strict=True)
        ],
        read,
    )


def _merged(offsets: Sequence[int]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for offset in offsets:
        if spans and offset - spans[-1][1] <= MERGED_GAP:
            spans[-1] = (spans[-1][0], offset)
        else:
            spans.append((offset, offset))
    return spans


async def _read_span(
    consumer: AIOKafkaConsumer, tp: TopicPartition, first: int, last: int, poll_ms: int
) -> list[ConsumerRecord[Any, Any]]:
    """The records from ``first`` on, at least up to ``last`` (a fetch may return more);
    :class:`IndexBeyondLogError` when the log ends before ``last`` (a fetch that finds nothing
    at or past the end the broker reports: that end may fall short of the last record, never
    of a record a fetch would still bring)."""
    consumer.seek(tp, first)
    got: list[ConsumerRecord[Any, Any]] = []
    empty = 0
    while True:
        batch = await consumer.getmany(tp, timeout_ms=poll_ms, max_records=10_000)
        found = batch.get(tp, [])
        got.extend(found)
        position = await consumer.position(tp)
        if (got and got[-1].offset >= last) or position > last:
            return got
        # Several polls in a row: one may end before a fetch held by the broker answers.
        empty = 0 if found else empty + 1
        if empty >= EMPTY_POLLS_AT_END and position >= (await consumer.end_offsets([tp]))[tp]:
            raise IndexBeyondLogError(
                f"{tp.topic}[{tp.partition}] ends at {position}, before offset {last}"
            )
