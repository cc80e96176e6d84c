"""Answered retrievals recorded on ``memory.access``: the audit of what each agent was shown,
and what the worker folds into the summaries' use (MUS pruning, seed 001)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.errors import KafkaError

from schemas.codec import encode_event
from schemas.errors import BackendUnavailableError
from schemas.memory_events import MemoryRetrieved
from streams.eventlog.kafka_clients import record_producer
from streams.eventlog.publisher import KEY_REFRESH_S
from streams.privacy.keyring import KeyringError
from streams.privacy.sealing import RecordSealer

log = logging.getLogger("engram.runtime")


class RetrievalRecorder:
    """Puts each answered retrieval on ``memory.access``, keyed by agent id.

    A retrieval only waits for its record to be enqueued: delivery is the producer's job, and
    a delivery that fails is logged and counted, never raised into the retrieval that made it.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        linger: float = 0.0,
        sealer: RecordSealer | None = None,
    ) -> None:
        self.topic = topic
        self.sealer = sealer or RecordSealer(None)
        """A query names what the agent asked: sealed with its key like its events."""
        self.delivered = 0
        self.failed = 0
        self._producer = record_producer(bootstrap, linger=linger)

    async def start(self) -> RetrievalRecorder:
        try:
            await self._producer.start()
            # The topic's metadata now, so the first retrieval does not wait for it.
            await self._producer.partitions_for(self.topic)
        except KafkaError as exc:
            await self._producer.stop()
            message = f"cannot record retrievals on {self.topic}: {exc}"
            raise BackendUnavailableError(message) from exc
        return self

    async def __call__(self, event: MemoryRetrieved) -> None:
        try:
            await self.sealer.refresh_every(KEY_REFRESH_S)
            await self.sealer.prepare_seal((event.agent_id,))
        except KeyringError as exc:
            self.failed += 1
            log.warning("a retrieval record was not sealed, so not recorded: %s", exc)
            return
        value = self.sealer.seal(event.agent_id, encode_event(event))
        delivery = await self._producer.send(self.topic, value, key=event.agent_id.encode("utf-8"))
        delivery.add_done_callback(self._delivered)

    def _delivered(self, delivery: asyncio.Future[Any]) -> None:
        if delivery.cancelled() or delivery.exception() is not None:
            self.failed += 1
            reason = "cancelled" if delivery.cancelled() else delivery.exception()
            log.warning("a retrieval record was not delivered to %s: %s", self.topic, reason)
        else:
            self.delivered += 1

    async def stop(self) -> None:
        """Delivers what is still in flight, then closes the producer."""
        await self._producer.stop()
