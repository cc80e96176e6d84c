"""Derived records handed to the producer a partition at a time, as whole record batches.

Sending record by record costs the producer a future, a callback and an accumulator lookup
per record, and the event loop a wake-up for each when the broker answers: on the hot path
that was more than the records' bytes. A record batch is what the broker stores anyway, and
its records land at consecutive offsets from the batch's base offset (the Kafka protocol's
offset delta, not a quirk of one broker), so where each record landed follows from one
answer per batch, which is all the batch markers need (:mod:`processors.batch_markers`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from schemas.errors import EngramError


class RecordTooLargeError(EngramError, ValueError):
    """A derived record that does not fit an empty record batch: the producer's
    ``max_batch_size`` is below the record, which a configuration must fix."""


@dataclass(frozen=True, slots=True)
class Landed:
    """Where one record landed: what the batch markers read of a producer's metadata."""

    topic: str
    partition: int
    offset: int


class BatchSendFn(Protocol):
    def __call__(
        self, topic: str, partition: int, records: Sequence[tuple[bytes | None, bytes]]
    ) -> Awaitable[Awaitable[list[Landed]]]:
        """Queue ``records`` (key, value) for one partition, in order; the awaitable returned
        once they are queued completes with where each landed, once the broker took them."""


def aiokafka_batch_sender(producer_of: Callable[[], Any]) -> BatchSendFn:
    """Batches through an ``AIOKafkaProducer`` (``create_batch``/``send_batch``), closed before
    they are queued so that no other send joins them and their offsets stay ours."""

    async def send(
        topic: str, partition: int, records: Sequence[tuple[bytes | None, bytes]]
    ) -> Awaitable[list[Landed]]:
        producer = producer_of()
        queued: list[tuple[Awaitable[Any], int]] = []
        batch, count = producer.create_batch(), 0
        for key, value in records:
            if batch.append(key=key, value=value, timestamp=None) is None:
                batch.close()
                queued.append((await producer.send_batch(batch, topic, partition=partition), count))
                batch, count = producer.create_batch(), 0
                if batch.append(key=key, value=value, timestamp=None) is None:
                    raise RecordTooLargeError(
                        f"a derived record of {len(value):,} bytes for {topic}[{partition}] does "
                        "not fit an empty record batch; raise the producer's max_batch_size"
                    )
            count += 1
        if count:
            batch.close()
            queued.append((await producer.send_batch(batch, topic, partition=partition), count))
        return _landed(topic, queued)

    return send


async def _landed(topic: str, queued: Sequence[tuple[Awaitable[Any], int]]) -> list[Landed]:
    out: list[Landed] = []
    for delivery, count in queued:
        metadata = await delivery
        base = metadata.offset
        out.extend(Landed(topic, metadata.partition, base + i) for i in range(count))
    return out
