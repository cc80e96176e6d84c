"""Reading the derived topics back: the processors' state on takeover, and the projections'
catch-up on what was logged but not yet applied.

The two derived topics are read one after the other and put back in causal order
(:func:`processors.state_fold.causal_order`), so folding and re-applying see them as they were
emitted; the retrievals on ``memory.access`` are folded in after them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition

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
    consumer = log_reader(bootstrap)
    await consumer.start()
    try:
        for topic in topic_names:
            tps = [TopicPartition(topic, p) for p in parts]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            # An end of 0 is exact (an empty partition); only a non-empty end may under-report.
            remaining = {tp for tp in tps if ends[tp] > 0}
            deadline = time.monotonic() + timeout
            while remaining:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {topic} back took longer than {timeout:.0f}s")
                batch = await consumer.getmany(*remaining, timeout_ms=300, max_records=50_000)
                for tp, records in batch.items():
                    for record in records:
                        if record.value is None:
                            continue
                        try:
                            decoded = decode(record.value)
                        except DecodeError as exc:
                            log.error(
                                "unreadable record %s[%d]@%d: %s",
                                tp.topic,
                                tp.partition,
                                record.offset,
                                exc,
                            )
                            continue
                        position = SourcePosition(
                            topic=tp.topic, partition=tp.partition, offset=record.offset
                        )
                        out.append((position, decoded))
                for tp in list(remaining):
                    if at_end(await consumer.position(tp), ends[tp], bool(batch.get(tp))):
                        remaining.discard(tp)
    finally:
        await consumer.stop()
    return out


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
