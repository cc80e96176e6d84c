"""What every projection backend offers. One contract test suite runs against each backend.

``apply`` takes derived events in log order and must be idempotent: applying a batch twice,
or a suffix of the log again after a crash, leaves the same state as applying it once.
Each store only acts on events whose ``destination`` is its own: every ``MemoryWritten``
(recorded, promoted, summarised) is an upsert, a ``MemoryForgotten`` a delete. Other events
(``ConsolidationCompleted``, the other store's) change no data, but their source positions still
count as applied, so a read-your-writes wait sees the store move past them.

Records that derive nothing at all (dead letters, most ticks and retrievals, redeliveries of
records already derived) leave no event to apply, so the worker moves the marks past them with
``advance`` once the batch holding them is applied and logged: an applied offset then says how
far the *log* was applied, which is what a read-your-writes wait asks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from processors.lexical import SparseQuery
from projections.episodic.candidates import CandidateSignals, Scope
from projections.memory import StoredMemory
from projections.retrieval.filters import MemoryFilter
from schemas.errors import BackendUnavailableError
from schemas.memory_events import DerivedEvent, SourcePosition, SurpriseReading


class ProjectionError(BackendUnavailableError):
    """A projection backend failed (unreachable, refused); the message says which and why."""


SourceOffsets = Mapping[tuple[str, int], int]
"""The highest source offset per (topic, partition)."""


class WorkingMemoryStore(Protocol):
    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        """Put ``working`` memories and drop forgotten ones, with the applied position."""

    async def advance(self, positions: SourceOffsets) -> None:
        """Raise each partition's applied offset to at least the given one, never lower it.

        Atomic per partition and idempotent. The caller vouches that every derived event of
        those records and the ones before them is applied: a later event below the mark is
        skipped as a replay.
        """

    async def memories(self, agent_id: str) -> list[StoredMemory]:
        """The agent's working memories, newest (highest seq) first."""

    async def arousal(self, agent_id: str) -> SurpriseReading | None:
        """The agent's latest surprise reading (arousal, System 1/2), from the recording with
        the highest seq that carried one, of either destination; None before any."""

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        """The highest source offset applied for that partition, if any."""

    async def learned_fields(self, agent_id: str, match: bytes = b"#l:*") -> dict[bytes, bytes]:
        """What the agent learned, as the fields :mod:`projections.learned.redis_fields`
        writes (procedures, plans, facts, feedback on memories): those ``match``, a Redis
        glob, names."""

    async def ping(self) -> None:
        """Raise :class:`ProjectionError` unless the backend answers."""

    async def close(self) -> None: ...


class EpisodicMemoryStore(Protocol):
    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        """Upsert ``episodic`` memories by their deterministic ids and delete forgotten ones."""

    async def advance(self, positions: SourceOffsets) -> None:
        """As :meth:`WorkingMemoryStore.advance`."""

    async def sync(self) -> None:
        """Make every apply and advance so far durable, for a caller about to commit offsets on
        their word: a store may let its durable checkpoint lag (Qdrant Edge's group commit)."""

    async def memories(
        self,
        agent_id: str,
        limit: int = 1000,
        levels: Sequence[int] | None = None,
        *,
        filter: MemoryFilter | None = None,
    ) -> list[StoredMemory]:
        """The agent's episodic memories, newest (highest seq) first.

        ``levels`` keeps only memories of those levels (0 events, 1 and 2 summaries), and
        ``filter`` only those it admits, both filtered in the store so a limit counts only what
        was asked for; None means every level, no filter. Kinds an episodic store cannot hold
        (working, fact, procedure) match nothing.
        """

    async def candidates(
        self,
        agent_id: str,
        signals: CandidateSignals,
        levels: Sequence[int] | None = None,
        *,
        filter: MemoryFilter | None = None,
        scope: Scope = "active",
    ) -> list[StoredMemory]:
        """The agent's memories a ranking by ``signals`` needs to see, in ``scope`` (the active
        set, the archive of what capacity and forgetting took away, or all), ``levels`` and
        ``filter`` as in :meth:`memories`: the union of each signal's best ``signals.limit``
        (:mod:`projections.episodic.candidates`), read in one query. With a query vector that
        is not all zeros every candidate carries its ``similarity`` and they come most similar
        first; else newest first. A pool of at most ``signals.limit`` memories comes back whole.
        """

    async def search(
        self,
        agent_id: str,
        vector: np.ndarray,
        limit: int,
        levels: Sequence[int] | None = None,
        *,
        lexical: SparseQuery | None = None,
        filter: MemoryFilter | None = None,
    ) -> list[StoredMemory]:
        """The agent's memories most relevant to a query, ``levels`` and ``filter`` as in
        :meth:`memories`.

        Without ``lexical``: nearest to ``vector`` (cosine), ``similarity`` filled in. With it
        (``processors.lexical.query_vector`` of the query text): hybrid, the dense and the
        lexical ranking fused by Reciprocal Rank Fusion, every result carrying ``similarity``
        and ``lexical`` (None when the lexical ranking did not find it); with both sides empty
        (a query vector of zeros, a query text of stopwords) nothing is relevant and the answer
        is empty. A store built before hybrid search answers dense-only and logs a warning to
        rebuild it.
        """

    async def count(self, agent_id: str | None = None) -> int: ...

    async def applied_offset(self, topic: str, partition: int) -> int | None: ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


def latest_positions(events: Sequence[DerivedEvent]) -> dict[tuple[str, int], int]:
    """The highest source offset per (topic, partition) in a batch: what a flush checkpoints."""
    positions: dict[tuple[str, int], int] = {}
    for event in events:
        position: SourcePosition | None = event.source_position
        if position is None:
            continue
        key = (position.topic, position.partition)
        if positions.get(key, -1) < position.offset:
            positions[key] = position.offset
    return positions
