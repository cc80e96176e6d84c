"""Where each partition's records written at or after a time begin (``engram replay --since``).

Kafka answers ListOffsets by timestamp (aiokafka's ``offsets_for_times``) from its time index:
the first offset whose record was written at or after the time, with that record's timestamp,
or no offset when nothing was written since. Tansu, the dev stack's broker, answers every such
question with the partition's first offset and a timestamp of -1, whatever the time: a replay
``--since`` read the whole log, and said it would. So an answer is taken as it stands only
when its timestamp is at or after the time asked, as Kafka's always is; otherwise the
partition is read on from the offset given until its first record written at or after the
time (or its end). On Kafka that read never happens; on Tansu it reads the partition, whose log
lives in memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from streams.eventlog.derived_log import read_with

__all__ = ["offsets_since"]


async def offsets_since(
    consumer: AIOKafkaConsumer,
    tps: Sequence[TopicPartition],
    since_ms: int,
    ends: Mapping[TopicPartition, int],
    *,
    timeout: float = 600.0,
) -> dict[TopicPartition, int]:
    """The offset of the first record of each of ``tps`` written at or after ``since_ms``
    (milliseconds since the epoch; record timestamps), or its end (``ends``) when there is
    none. ``consumer`` is started; a partition read on is left assigned to it. Raises
    :class:`TimeoutError` when that read takes longer than ``timeout`` seconds (a dev
    broker's log in memory reads at some 300,000 records a second)."""
    found = await consumer.offsets_for_times({tp: since_ms for tp in tps})
    starts: dict[TopicPartition, int] = {}
    unsure: dict[TopicPartition, int] = {}
    for tp in tps:
        hit = found.get(tp)
        if hit is None:
            starts[tp] = ends[tp]
        elif hit.timestamp >= since_ms:
            starts[tp] = hit.offset
        else:
            unsure[tp] = hit.offset
    if unsure:
        starts |= await _first_written_since(consumer, unsure, since_ms, timeout)
    return starts


async def _first_written_since(
    consumer: AIOKafkaConsumer,
    from_offsets: dict[TopicPartition, int],
    since_ms: int,
    timeout: float,
) -> dict[TopicPartition, int]:
    first: dict[TopicPartition, int] = {}

    def note(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        if tp not in first and record.timestamp >= since_ms:
            first[tp] = record.offset

    reached = await read_with(
        consumer,
        list(from_offsets),
        note,
        starts=from_offsets,
        timeout=timeout,
        done=first.__contains__,
    )
    return {tp: first.get(tp, reached[tp]) for tp in from_offsets}
