"""Reading the derived topics back: the processors' state on takeover, and the projections'
catch-up on what was logged but not yet applied.

The two topics are read one after the other and put back in causal order (each forgetting right
after the recording that caused it), so folding and re-applying see them as they were emitted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from processors.state_fold import FoldedState, causal_order
from schemas.codec import DecodeError, decode_derived_event
from schemas.memory_events import DerivedEvent
from schemas.topics import Topics

log = logging.getLogger("engram.derived_log")


async def read_partitions(
    bootstrap: str, topic_names: Iterable[str], partitions: Iterable[int], *, timeout: float = 120.0
) -> list[DerivedEvent]:
    """Every derived event of the given partitions, topic by topic, in log order."""
    events: list[DerivedEvent] = []
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 << 20,
        fetch_max_bytes=64 << 20,
    )
    await consumer.start()
    try:
        for topic in topic_names:
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            remaining = set(tps)
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
                            events.append(decode_derived_event(record.value))
                        except DecodeError as exc:
                            log.error(
                                "unreadable derived event %s[%d]@%d: %s",
                                tp.topic,
                                tp.partition,
                                record.offset,
                                exc,
                            )
                # The reported end is a lower bound only: Tansu answers ListOffsets with the
                # last *batch's* base offset + 1. Past it, an empty poll means the end.
                for tp in list(remaining):
                    if not batch.get(tp) and await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
    finally:
        await consumer.stop()
    return events


async def recover_state(
    bootstrap: str, topics: Topics, partitions: Iterable[int]
) -> tuple[FoldedState, list[DerivedEvent]]:
    """The folded processor state of these partitions, and the derived events it came from."""
    parts = sorted(set(partitions))
    events = causal_order(await read_partitions(bootstrap, (topics.items, topics.lifecycle), parts))
    return FoldedState().apply_all(events), events
