"""Where each partition of the log ends, asked of the broker: the query service's answer to
"is this position in the log at all?" (:mod:`projections.retrieval.log_end`).

The broker's end offset is exact on Kafka, but Tansu answers it with the last batch's base
offset + 1 (:func:`streams.eventlog.derived_log.at_end`), so a record published in a batch of
several could look past the end. The last batch of each non-empty partition is therefore read
as well, and the end is where reading it stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from aiokafka import TopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from streams.eventlog.kafka_clients import log_end_reader

FETCH_MS = 50


class BrokerLogEnds:
    """A :data:`projections.retrieval.log_end.LogEnds` over one long-lived consumer.

    Partitions are numbered below ``partitions``, the count every topic of a deployment is
    created with (:func:`streams.eventlog.topic_admin.ensure_topics`); a partition at or past
    it does not exist. The caller bounds the time a lookup may take.
    """

    def __init__(self, bootstrap: str, partitions: int) -> None:
        self._consumer = log_end_reader(bootstrap)
        self._partitions = partitions
        self._lock = asyncio.Lock()

    async def start(self) -> BrokerLogEnds:
        try:
            await self._consumer.start()
        except BaseException:  # stopped, or its finaliser warns of it at exit
            await self._consumer.stop()
            raise
        # One turn of the loop lets the consumer's coordinator task begin: stopped before it
        # ever ran (a lookup that asked the broker nothing), aiokafka's stop raises
        # CancelledError (aiokafka issue 647).
        await asyncio.sleep(0)
        return self

    async def stop(self) -> None:
        await self._consumer.stop()

    async def __call__(self, partitions: Collection[tuple[str, int]]) -> dict[tuple[str, int], int]:
        tps = sorted(
            {TopicPartition(topic, p) for topic, p in partitions if 0 <= p < self._partitions}
        )
        if not tps:
            return {}
        async with self._lock:  # one consumer: one assignment at a time
            reported: dict[TopicPartition, int] = await self._consumer.end_offsets(tps)
            ends = await self._read_last_batches(reported)
        return {(tp.topic, tp.partition): ends[tp] for tp in tps}

    async def _read_last_batches(
        self, reported: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """``reported``, each non-empty partition's end moved to where reading from its
        reported end - 1 stops: past that record's whole batch, and whatever followed it."""
        ends = dict(reported)
        pending = {tp for tp, end in reported.items() if end > 0}
        if not pending:
            return ends
        consumer = self._consumer
        consumer.assign(sorted(pending))
        try:
            for tp in pending:
                consumer.seek(tp, reported[tp] - 1)
            while pending:
                try:
                    await consumer.getmany(*pending, timeout_ms=FETCH_MS)
                except OffsetOutOfRangeError:
                    break  # deleted by retention: nothing there to under-report
                for tp in list(pending):
                    reached = await consumer.position(tp)
                    if reached >= reported[tp]:
                        ends[tp] = reached
                        pending.discard(tp)
        finally:
            consumer.unsubscribe()
        return ends
