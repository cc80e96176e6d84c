"""Where each partition of the log starts: the first offset a read "from the beginning" reads.

The broker's earliest offset (ListOffsets earliest: aiokafka's ``beginning_offsets``, and what
``seek_to_beginning`` seeks to) is exact on Kafka. Tansu sometimes reports the start of the
partition's *second* record batch instead of 0, when concurrent producers wrote the partition's
first batches (about one partition in a hundred with 2-4 producers racing on it, Tansu 0.6),
and keeps reporting it; the first batch is still there, and a fetch from offset 0 returns it.
Its reported end may be as wrong at the same time (even equal to that start), so a partition
reported empty above 0 is checked too.
A reader that sought to the beginning skipped that batch without a word: an export lost it, a
takeover folded state without it.

So every reader that starts at the beginning asks :func:`log_starts` where that is. A
partition reported to start at 0 costs nothing more than before. One reported to start above 0
(on Kafka, one a retention has trimmed) is read once from offset 0: on Kafka that offset is
out of range, and the consumer's reset (``auto_offset_reset="earliest"``) or its error
(``"none"``) says the reported start is the real one, so the answer there is the broker's, as
before; on Tansu the fetch returns the records the broker's answer skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaTimeoutError, OffsetOutOfRangeError

log = logging.getLogger("engram.log_starts")

CHECK_POLL_MS = 100
"""Each poll of the check waits this long for a fetch response."""


async def log_starts(
    consumer: AIOKafkaConsumer, tps: Iterable[TopicPartition], *, timeout: float = 30.0
) -> dict[TopicPartition, int]:
    """The first readable offset of each of ``tps``: the broker's earliest offset, or below it
    where a fetch from 0 finds records the broker's answer skipped (see the module docstring).

    ``consumer`` is started, with any ``auto_offset_reset``. Call it before seeking: where the
    consumer held the partitions checked, they are left at their start; otherwise it is given
    its assignment back, and its partitions lose their positions. Raises
    :class:`KafkaTimeoutError` when the check finds no answer within ``timeout`` seconds.
    """
    wanted = sorted(set(tps))
    if not wanted:
        return {}
    reported: dict[TopicPartition, int] = await consumer.beginning_offsets(wanted)
    starts = dict(reported)
    suspect = [tp for tp in wanted if reported[tp] > 0]
    if not suspect:
        return starts
    before = consumer.assignment()
    held = before.issuperset(suspect)
    if not held:
        consumer.assign(suspect)
    others = consumer.assignment() - set(suspect) - consumer.paused()
    consumer.pause(*others)
    try:
        async with asyncio.timeout(timeout):
            starts.update(await _first_readable(consumer, reported, suspect))
    except TimeoutError:
        raise KafkaTimeoutError(
            f"could not learn where {len(suspect)} partitions start within {timeout:.0f}s"
        ) from None
    finally:
        if held:
            consumer.resume(*others)
        elif before:
            consumer.assign(sorted(before))
        else:
            consumer.unsubscribe()
    if held:
        for tp in suspect:
            consumer.seek(tp, starts[tp])
    return starts


async def _first_readable(
    consumer: AIOKafkaConsumer,
    reported: dict[TopicPartition, int],
    suspect: Collection[TopicPartition],
) -> dict[TopicPartition, int]:
    """Per partition of ``suspect`` (all assigned), the first offset a read from 0 returns, or
    its ``reported`` start where that read resets to it or fails as out of range."""
    found: dict[TopicPartition, int] = {}
    for tp in suspect:
        consumer.seek(tp, 0)
    pending = set(suspect)
    while pending:
        try:
            batch = await consumer.getmany(*pending, timeout_ms=CHECK_POLL_MS)
        except OffsetOutOfRangeError as exc:
            # A consumer that does not reset (auto_offset_reset="none"): 0 is gone, so the
            # broker's start is the real one.
            gone = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
            if not pending & gone.keys():
                raise
            found.update((tp, reported[tp]) for tp in pending & gone.keys())
            batch = {}
        for tp, records in batch.items():
            if tp in pending and records:
                found[tp] = min(reported[tp], records[0].offset)
                if found[tp] < reported[tp]:
                    log.info(
                        "%s[%d]: the broker reports its start at %d, but offset %d reads: "
                        "reading from there",
                        tp.topic,
                        tp.partition,
                        reported[tp],
                        found[tp],
                    )
        for tp in pending - found.keys():
            # Reset to the broker's start (0 was out of range), with nothing fetched yet.
            if await consumer.position(tp) >= reported[tp]:
                found[tp] = reported[tp]
        pending -= found.keys()
    return found
