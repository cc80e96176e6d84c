"""The hot path: one Faust hop from the agent topics to the log of derived events and the
projections.

Per batch (``stream.take_events``): decode and record (pure, ``processors.batch``), hand the
derived events and dead letters to the producer, apply the derived events to both projections,
then store the per-agent states. Faust acks the batch only after this returns and flushes the
producer before it commits offsets, so the order is: projections applied, log written, offsets
committed (DESIGN.md, invariants 3 and 7). A projection that is down pauses the batch and is
retried with backoff; the batch is never acked past it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson
from processors.batch import BatchResult, RawRecord, process_batch
from processors.config import ProcessingConfig
from processors.embedding import Embedder
from processors.recording import AgentMemoryState
from schemas.codec import encode_event
from schemas.memory_events import DerivedEvent, MemoryForgotten
from schemas.topics import Topics

from projections.interfaces import EpisodicMemoryStore, ProjectionError, WorkingMemoryStore

log = logging.getLogger("engram.ingest")


class SendFn(Protocol):
    def __call__(self, topic: str, key: bytes | None, value: bytes) -> Awaitable[Any]: ...


class StateStore(Protocol):
    def get(self, agent_id: str) -> dict[str, Any] | None: ...

    def set(self, agent_id: str, state: dict[str, Any]) -> None: ...


@dataclass
class IngestStats:
    """Counters for health and logs; cheap to update per batch, never per event."""

    batches: int = 0
    events: int = 0
    memories: int = 0
    dead_letters: int = 0
    projection_retries: int = 0
    last_batch_at: float | None = None
    applied: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class IngestPipeline:
    config: ProcessingConfig
    embedder: Embedder
    topics: Topics
    working: WorkingMemoryStore
    episodic: EpisodicMemoryStore
    send: SendFn
    states: StateStore
    should_stop: Callable[[], bool] = lambda: False
    max_backoff: float = 5.0
    stats: IngestStats = field(default_factory=IngestStats)

    def __post_init__(self) -> None:
        self.config_version = self.config.version(self.embedder.id)

    def load_state(self, agent_id: str) -> AgentMemoryState:
        return AgentMemoryState.from_json(self.states.get(agent_id))

    def derive(self, records: Sequence[RawRecord]) -> BatchResult:
        return process_batch(
            records,
            self.load_state,
            config=self.config,
            embedder=self.embedder,
            config_version=self.config_version,
            failed_at=datetime.now(UTC),
        )

    async def handle(self, records: Sequence[RawRecord]) -> BatchResult:
        result = self.derive(records)
        pending = [self._emit(event) for event in result.derived]
        for letter in result.dead_letters:
            log.warning(
                "dead letter",
                extra={"topic": letter.topic, "partition": letter.partition,
                       "offset": letter.offset, "reason": letter.reason},
            )
            key = letter.key_b64.encode() if letter.key_b64 else None
            pending.append(self.send(self.topics.deadletter, key, encode_event(letter)))
        await asyncio.gather(*pending)
        await self.apply(result.derived)
        for agent_id, state in result.states.items():
            self.states.set(agent_id, state.to_json())
        self._count(records, result)
        return result

    def _emit(self, event: DerivedEvent) -> Awaitable[Any]:
        topic = self.topics.lifecycle if isinstance(event, MemoryForgotten) else self.topics.items
        return self.send(topic, event.agent_id.encode("utf-8"), encode_event(event))

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        """Apply to both projections; retry while a backend is down instead of losing the batch."""
        if not events:
            return
        delay = 0.1
        while True:
            try:
                await asyncio.gather(self.working.apply(events), self.episodic.apply(events))
                return
            except ProjectionError as exc:
                if self.should_stop():
                    raise
                self.stats.projection_retries += 1
                log.warning("projection unavailable, retrying in %.1fs: %s", delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)

    def _count(self, records: Sequence[RawRecord], result: BatchResult) -> None:
        stats = self.stats
        stats.batches += 1
        stats.events += len(records)
        stats.memories += sum(1 for e in result.derived if not isinstance(e, MemoryForgotten))
        stats.dead_letters += len(result.dead_letters)
        stats.last_batch_at = time.time()
        for raw in records:
            key = (raw.topic, raw.partition)
            if stats.applied.get(key, -1) < raw.offset:
                stats.applied[key] = raw.offset


def dead_letter_summary(value: bytes) -> dict[str, Any]:
    """Decode a dead-letter record for display (CLI, tests)."""
    data: dict[str, Any] = orjson.loads(value)
    return data
