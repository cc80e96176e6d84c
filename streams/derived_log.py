"""Reading the derived topics back: the processors' state on takeover, and the projections'
catch-up on what was logged but not yet applied.

The two derived topics are read one after the other and put back in causal order
(:func:`processors.state_fold.causal_order`), so folding and re-applying see them as they were
emitted; the retrievals on ``memory.access`` are folded in after them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from processors.state_fold import FoldedState, causal_order
from schemas.codec import DecodeError, decode_derived_event, decode_retrieval
from schemas.memory_events import DerivedEvent, SourcePosition
from schemas.topics import Topics

log = logging.getLogger("engram.derived_log")


Decoded = TypeVar("Decoded")


def log_reader(bootstrap: str) -> AIOKafkaConsumer:
    """A group-less consumer for reading partitions from the start, in large fetches."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 << 20,
        fetch_max_bytes=64 << 20,
        # The read ends with an empty poll, and Tansu holds a fetch for about the whole wait.
        fetch_max_wait_ms=50,
    )


def at_end(position: int, reported_end: int, got_records: bool) -> bool:
    """Whether a partition has been read to the end it had when reading started.

    The reported end is a lower bound only: Tansu answers ListOffsets with the last *batch's*
    base offset + 1, so reaching it may leave the rest of that batch unread. Past it, either a
    poll came back empty (nothing more was written) or a poll read beyond it, which reads whole
    batches: the end as of the start is then behind us. Waiting for an empty poll alone would
    never end on a topic written all the time (``memory.access`` under query load); what is
    written after the start is consumed live, not by this read.
    """
    return position >= reported_end and (not got_records or position > reported_end)


async def read_to_end(
    bootstrap: str,
    tps: Sequence[TopicPartition],
    on_record: Callable[[TopicPartition, ConsumerRecord[Any, Any]], None],
    *,
    starts: Mapping[TopicPartition, int] | None = None,
    timeout: float = 120.0,
) -> dict[TopicPartition, int]:
    """Hand every record of ``tps`` to ``on_record``, in log order per partition, from
    ``starts`` (default: the beginning) to the end each had when reading started (see
    :func:`at_end`); returns the position reached in each. One loop for every reader of the
    log (takeover, history, replay, reprocess), so the Tansu end rule lives in one place."""
    reached: dict[TopicPartition, int] = {}
    if not tps:
        return reached
    consumer = log_reader(bootstrap)
    await consumer.start()
    try:
        consumer.assign(list(tps))
        for tp in tps:
            if starts is not None and tp in starts:
                consumer.seek(tp, starts[tp])
            else:
                await consumer.seek_to_beginning(tp)
        ends = await consumer.end_offsets(list(tps))
        # An end of 0 is exact (an empty partition); only a non-empty end may under-report.
        remaining = {tp for tp in tps if ends[tp] > 0}
        reached = {tp: await consumer.position(tp) for tp in tps}
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                names = ", ".join(sorted({tp.topic for tp in remaining}))
                raise TimeoutError(f"reading {names} back took longer than {timeout:.0f}s")
            batch = await consumer.getmany(*remaining, timeout_ms=300, max_records=50_000)
            for tp, records in batch.items():
                for record in records:
                    on_record(tp, record)
            for tp in list(remaining):
                reached[tp] = await consumer.position(tp)
                if at_end(reached[tp], ends[tp], bool(batch.get(tp))):
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return reached


async def read_records(
    bootstrap: str,
    topic_names: Iterable[str],
    partitions: Iterable[int],
    decode: Callable[[bytes], Decoded],
    *,
    timeout: float = 120.0,
) -> list[tuple[SourcePosition, Decoded]]:
    """Every decodable record of the given partitions with its position, topic by topic, in
    log order per partition. An undecodable record is logged and skipped: these topics are
    written by Engram itself, so one is a bug to report, not a reason to stop a takeover."""
    out: list[tuple[SourcePosition, Decoded]] = []
    parts = sorted(set(partitions))

    def keep(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        decoded = decode_logged(tp, record, decode)
        if decoded is not None:
            position = SourcePosition(topic=tp.topic, partition=tp.partition, offset=record.offset)
            out.append((position, decoded))

    for topic in topic_names:
        await read_to_end(
            bootstrap, [TopicPartition(topic, p) for p in parts], keep, timeout=timeout
        )
    return out


def decode_logged(
    tp: TopicPartition, record: ConsumerRecord[Any, Any], decode: Callable[[bytes], Decoded]
) -> Decoded | None:
    """The decoded record, or None (logged) for a tombstone or a record that does not decode."""
    if record.value is None:
        return None
    try:
        return decode(record.value)
    except DecodeError as exc:
        log.error("unreadable record %s[%d]@%d: %s", tp.topic, tp.partition, record.offset, exc)
        return None


async def read_partitions(
    bootstrap: str, topic_names: Iterable[str], partitions: Iterable[int], *, timeout: float = 120.0
) -> list[DerivedEvent]:
    """Every derived event of the given partitions, topic by topic, in log order."""
    records = await read_records(
        bootstrap, topic_names, partitions, decode_derived_event, timeout=timeout
    )
    return [event for _, event in records]


async def recover_state(
    bootstrap: str, topics: Topics, partitions: Iterable[int]
) -> tuple[FoldedState, list[DerivedEvent]]:
    """The folded processor state of these partitions, and the derived events it came from.

    Retrievals are folded after the derived events: they only count uses of summaries that
    exist, and their counts are order-free (see :func:`processors.lifecycle.on_retrieval`).
    """
    parts = sorted(set(partitions))
    events = causal_order(await read_partitions(bootstrap, (topics.items, topics.lifecycle), parts))
    folded = FoldedState(schedule_topic=topics.schedule).apply_all(events)
    for position, retrieval in await read_records(
        bootstrap, (topics.access,), parts, decode_retrieval
    ):
        folded.apply_retrieval(retrieval, position)
    return folded, events
