"""Where a partition's first record at or after an offset is, asked of the broker: how a
worker tells a hole the log has for good (a transaction's commit marker, records a retention
deleted) from records its consumer has not handed over yet (:mod:`processors.source_order`).

Asked only when a partition's next record is not the one its mark says comes next, which
happens around a rebalance, so each question opens a consumer of its own and closes it: no
connection is held for the rare case.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from streams.eventlog.kafka_clients import log_reader

log = logging.getLogger("engram.first_record")


async def first_record_at(
    bootstrap: str, topic: str, partition: int, offset: int, *, timeout: float = 10.0
) -> int | None:
    """The offset of the first record of ``topic``'s ``partition`` at or after ``offset``
    (an offset before the log's start reads from the start), as a consumer that reads
    uncommitted records, as the worker's does, sees it. None when there is none, or the broker
    did not answer within ``timeout`` seconds."""
    tp = TopicPartition(topic, partition)
    consumer = log_reader(bootstrap, fetch_bytes=64 << 10)
    deadline = time.monotonic() + timeout
    try:
        await asyncio.wait_for(consumer.start(), timeout)
        await asyncio.sleep(0)  # see streams.eventlog.log_ends: aiokafka issue 647
        consumer.assign([tp])
        consumer.seek(tp, offset)
        while (left := deadline - time.monotonic()) > 0:
            batch = await consumer.getmany(tp, timeout_ms=int(min(left, 1.0) * 1000))
            records = batch.get(tp, [])
            if records:
                return int(records[0].offset)
        return None
    except (KafkaError, OSError, TimeoutError) as exc:
        log.warning("could not ask where a record is: %s", exc)
        return None
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
