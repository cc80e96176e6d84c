"""Reading the derived topics back: the processors' state on takeover, and the projections'
catch-up on what was logged but not yet applied.

The two derived topics are read one after the other and put back in causal order
(:func:`processors.emission_order.causal_order`), so folding and re-applying see them as they were
emitted; the retrievals on ``memory.access`` are folded in after them. Which derived events
count (those of wholly logged batches) is decided by :mod:`processors.batch_markers`; this module
is the one that reads the log for every reader of it (takeover, history, replay, reprocess,
which also reads the live markers to cut the raw log into the live batches).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from processors.batch_markers import marked_events
from processors.state_fold import FoldedState
from schemas.codec import DecodeError, decode_derived_record, decode_retrieval
from schemas.memory_events import DerivedEvent, DerivedRecord, DerivedUpTo, SourcePosition
from schemas.topics import Topics
from streams.eventlog.kafka_clients import log_reader
from streams.eventlog.log_starts import log_starts
from streams.privacy.sealing import FORGOTTEN, RecordSealer

log = logging.getLogger("engram.derived_log")


Decoded = TypeVar("Decoded")
OnRecord = Callable[[TopicPartition, ConsumerRecord[Any, Any]], None]


def at_end(position: int, reported_end: int, highwater: int | None) -> bool:
    """Whether a partition has been read to the end it had when reading started.

    Two ends bound it from below. The end the broker reported before reading (ListOffsets) is a
    lower bound only: Tansu answers it with the last *batch's* base offset + 1. The first
    highwater a fetch response reported after reading started (``highwater``, None before one
    came) is exact, and counts at most the few records written since. A read ends at both,
    and never before a fetch response: a poll that returns no records for a partition says
    nothing while that partition's fetch is in flight, so a read of several partitions that
    ended on one could stop short. Written after the start is consumed live, not by this read,
    so a topic written all the time (``memory.access`` under query load) still ends: at the
    first highwater, not at the latest.
    """
    return highwater is not None and position >= max(reported_end, highwater)


SETTLE_POLL_MS = 20
"""A read whose partitions all reached their reported end polls this briefly: what is left to
learn is whether the last batch goes on, which the next fetch response answers (its
highwater), ~50 ms after the last one (the reader's fetch wait)."""


async def read_to_end(
    bootstrap: str,
    tps: Sequence[TopicPartition],
    on_record: OnRecord,
    *,
    starts: Mapping[TopicPartition, int] | None = None,
    timeout: float = 120.0,
) -> dict[TopicPartition, int]:
    """Hand every record of ``tps`` to ``on_record``, in log order per partition, from
    ``starts`` (default: the beginning) to the end each had when reading started (see
    :func:`at_end`); returns the position reached in each. One loop for every reader of the
    log (takeover, history, replay, reprocess), so the Tansu end rule lives in one place."""
    if not tps:
        return {}
    consumer = log_reader(bootstrap)
    try:
        await consumer.start()
        return await read_with(consumer, tps, on_record, starts=starts, timeout=timeout)
    finally:
        await consumer.stop()


async def read_with(
    consumer: AIOKafkaConsumer,
    tps: Sequence[TopicPartition],
    on_record: OnRecord,
    *,
    starts: Mapping[TopicPartition, int] | None = None,
    timeout: float = 120.0,
    poll_ms: int = 300,
    done: Callable[[TopicPartition], bool] | None = None,
) -> dict[TopicPartition, int]:
    """:func:`read_to_end` with a consumer the caller started (and stops); ``done`` ends the
    read of a partition before its end (asked after each fetch that returned some of it)."""
    given = dict(starts or {})
    # Not seek_to_beginning: Tansu may report a start past the first batch (log_starts).
    given |= await log_starts(consumer, [tp for tp in tps if tp not in given])
    consumer.assign(list(tps))
    for tp in tps:
        consumer.seek(tp, given[tp])
    ends = await consumer.end_offsets(list(tps))
    # An end of 0 is exact (an empty partition); only a non-empty end may under-report.
    remaining = {tp for tp in tps if ends[tp] > 0}
    reached = {tp: await consumer.position(tp) for tp in tps}
    first_highwater: dict[TopicPartition, int] = {}
    deadline = time.monotonic() + timeout
    while remaining:
        if time.monotonic() > deadline:
            names = ", ".join(sorted({tp.topic for tp in remaining}))
            raise TimeoutError(f"reading {names} back took longer than {timeout:.0f}s")
        settling = all(reached[tp] >= ends[tp] for tp in remaining)
        batch = await consumer.getmany(
            *remaining, timeout_ms=SETTLE_POLL_MS if settling else poll_ms, max_records=50_000
        )
        for tp, records in batch.items():
            for record in records:
                on_record(tp, record)
            if done is not None and done(tp):
                remaining.discard(tp)
        for tp in list(remaining):
            reached[tp] = await consumer.position(tp)
            if (highwater := consumer.highwater(tp)) is not None:
                first_highwater.setdefault(tp, highwater)
            if at_end(reached[tp], ends[tp], first_highwater.get(tp)):
                remaining.discard(tp)
    return reached


async def read_records(
    bootstrap: str,
    topic_names: Iterable[str],
    partitions: Iterable[int],
    decode: Callable[[bytes], Decoded],
    *,
    timeout: float = 120.0,
    sealer: RecordSealer | None = None,
    starts: Mapping[TopicPartition, int] | None = None,
) -> list[tuple[SourcePosition, Decoded]]:
    """Every decodable record of the given partitions with its position, topic by topic, in
    log order per partition (from ``starts`` where given, else the beginning). An undecodable
    record is logged and skipped: these topics are written by Engram itself, so one is a bug
    to report, not a reason to stop a takeover. Sealed records are opened with ``sealer``; a
    forgotten agent's are skipped."""
    raw: list[tuple[SourcePosition, bytes | None]] = []
    parts = sorted(set(partitions))

    def keep(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        position = SourcePosition(topic=tp.topic, partition=tp.partition, offset=record.offset)
        raw.append((position, record.value))

    for topic in topic_names:
        await read_to_end(
            bootstrap,
            [TopicPartition(topic, p) for p in parts],
            keep,
            starts=starts,
            timeout=timeout,
        )
    opened = await (sealer or RecordSealer(None)).open_all([value for _, value in raw])
    out: list[tuple[SourcePosition, Decoded]] = []
    for (position, _), value in zip(raw, opened, strict=True):
        decoded = decode_opened(position, value, decode)
        if decoded is not None:
            out.append((position, decoded))
    return out


def decode_opened(
    position: SourcePosition,
    value: bytes | DecodeError | None,
    decode: Callable[[bytes], Decoded],
) -> Decoded | None:
    """A record opened by :meth:`RecordSealer.open_all`, decoded; None (logged unless it was a
    forgotten agent's) for a tombstone or a record that does not open or decode."""
    if value is None:
        return None
    try:
        if isinstance(value, DecodeError):
            raise value
        return decode(value)
    except DecodeError as exc:
        if exc.kind != FORGOTTEN:
            where = f"{position.topic}[{position.partition}]@{position.offset}"
            log.error("unreadable record %s: %s", where, exc)
        return None


async def read_partitions(
    bootstrap: str,
    topic_names: Iterable[str],
    partitions: Iterable[int],
    *,
    timeout: float = 120.0,
    sealer: RecordSealer | None = None,
) -> list[DerivedEvent]:
    """Every derived event of the given partitions, topic by topic, in log order: in a
    partition number with markers (read with ``memory.lifecycle``), those of wholly logged
    batches (see :func:`processors.batch_markers.marked_events`); elsewhere all."""
    records = await read_records(
        bootstrap, topic_names, partitions, decode_derived_record, timeout=timeout, sealer=sealer
    )
    return marked_events(records)


async def read_derived_log(
    bootstrap: str,
    topic_names: Iterable[str],
    partitions: Iterable[int],
    *,
    timeout: float = 120.0,
    sealer: RecordSealer | None = None,
) -> list[DerivedRecord]:
    """Every record of the given partitions, markers included, topic by topic, in log order."""
    records = await read_records(
        bootstrap, topic_names, partitions, decode_derived_record, timeout=timeout, sealer=sealer
    )
    return [record for _, record in records]


MARKER_TYPE = b'"memory.logged"'
"""What a marker's bytes hold (its ``event_type``): the records without it are passed over
undecoded. Markers are never sealed."""


async def read_markers(
    bootstrap: str, lifecycle: str, partitions: Iterable[int], *, timeout: float = 120.0
) -> dict[int, list[DerivedUpTo]]:
    """The batch markers of these partitions of ``lifecycle`` (a ``memory.lifecycle`` topic),
    each partition's in log order: where a reprocess cuts the raw log into the live batches."""
    parts = sorted(set(partitions))
    markers: dict[int, list[DerivedUpTo]] = {p: [] for p in parts}

    def keep(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        value = record.value
        if value is None or MARKER_TYPE not in value:
            return
        try:
            decoded = decode_derived_record(value)
        except DecodeError:
            return  # a sealed event whose bytes happen to hold the type
        if isinstance(decoded, DerivedUpTo):
            markers[tp.partition].append(decoded)

    await read_to_end(
        bootstrap, [TopicPartition(lifecycle, p) for p in parts], keep, timeout=timeout
    )
    return markers


async def recover_state(
    bootstrap: str, topics: Topics, partitions: Iterable[int], sealer: RecordSealer | None = None
) -> tuple[FoldedState, list[DerivedEvent]]:
    """The folded processor state of these partitions, and the derived events it came from
    (of wholly logged batches only: see :func:`processors.batch_markers.logged_batches`).

    Retrievals are folded after the derived events: they only count uses of summaries that
    exist, and their counts are order-free (see :func:`processors.lifecycle.on_retrieval`).
    Where markers rule, only those the markers name: the rest are derived in the batches that
    follow (:meth:`processors.state_fold.FoldedState.apply_retrieval`).
    """
    parts = sorted(set(partitions))
    logged = await read_records(
        bootstrap, (topics.items, topics.lifecycle), parts, decode_derived_record, sealer=sealer
    )
    folded, events = FoldedState.from_log(logged, topics.schedule)
    for position, retrieval in await read_records(
        bootstrap, (topics.access,), parts, decode_retrieval, sealer=sealer
    ):
        folded.apply_retrieval(retrieval, position)
    return folded, events
