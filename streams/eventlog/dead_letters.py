"""Reading ``memory.deadletter`` back: the records the processors could not use, and why.

A poison record is kept, with its bytes and the reason, but the reason was only in a worker's
log line and in base64 on the topic. The latest few are what a person publishing by hand needs
(`engram dead-letters`). A batch that a crash cut short is processed again, so one source
record may have several dead letters: one is kept per source position. The whole topic is read
(its size is the number of bad records, not the history) and only the latest ``limit`` are
held.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from schemas.deadletter import DeadLetter
from schemas.errors import BackendUnavailableError
from streams.eventlog.derived_log import read_with
from streams.eventlog.kafka_clients import log_reader


@dataclass
class DeadLetters:
    latest: list[DeadLetter]
    """Newest first."""
    total: int
    """Source records with a dead letter."""
    unreadable: int = 0
    """Records on the topic that are not dead letters of this schema."""


@dataclass
class _Latest:
    limit: int
    heap: list[tuple[float, int, DeadLetter]] = field(default_factory=list)
    seen: set[tuple[str, int, int]] = field(default_factory=set)
    unreadable: int = 0

    def keep(self, tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        try:
            letter = DeadLetter.model_validate_json(record.value or b"")
        except ValidationError:
            self.unreadable += 1
            return
        source = (letter.topic, letter.partition, letter.offset)
        if source in self.seen:
            return
        self.seen.add(source)
        entry = (letter.failed_at.timestamp(), len(self.seen), letter)
        if len(self.heap) < self.limit:
            heapq.heappush(self.heap, entry)
        elif entry[:2] > self.heap[0][:2]:
            heapq.heapreplace(self.heap, entry)


async def latest_dead_letters(
    bootstrap: str, topics: Sequence[str], *, limit: int, timeout: float = 30.0
) -> DeadLetters:
    """The ``limit`` latest dead letters of every partition of the dead-letter ``topics`` (the
    live one, and the one of the derived log a reprocessed version continues)."""
    latest = _Latest(limit)
    consumer = log_reader(bootstrap)  # one consumer: the layout first, then the read
    try:
        await consumer.start()
        # Read the layout before assigning anything: an assigned consumer narrows its
        # metadata to the assigned topics. A topic that does not exist has no letters.
        existing = await consumer.topics()
        tps = [
            TopicPartition(topic, p)
            for topic in topics
            if topic in existing
            for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        if tps:
            await read_with(consumer, tps, latest.keep, timeout=timeout)
    except KafkaError as exc:
        names = ", ".join(topics)
        raise BackendUnavailableError(f"cannot read {names} at {bootstrap}: {exc}") from exc
    finally:
        await consumer.stop()
    ordered = [letter for _, _, letter in sorted(latest.heap, key=lambda e: e[:2], reverse=True)]
    return DeadLetters(ordered, len(latest.seen), latest.unreadable)
