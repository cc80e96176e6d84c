"""A batch of derived events folded into what an episodic store writes, and the checks on it.

The archive. A store that keeps one holds every memory an agent has lived, until the agent is
erased: a memory forgotten by capacity or utility leaves the *active* set (what the seed modes
rank by default) but stays searchable as an archived point (``archived`` 1 in its payload),
and every working memory is written there too, since Redis drops it once evicted. A read asks
for a scope (:data:`~projections.episodic.hybrid.Scope`): the active set, the archive, or all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import assert_never

import numpy as np

from projections.episodic.edge_positions import Positions
from projections.interfaces import latest_positions
from schemas.learned_events import LearnedChange
from schemas.memory_events import (
    AgentForgotten,
    ConsolidationCompleted,
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemorySummarised,
    MemoryWritten,
)


@dataclass(frozen=True)
class EpisodicChanges:
    """A batch folded in log order: the last word on each memory wins.

    Folding first lets a store send one upsert and one delete per batch: the two touch disjoint
    ids, so their relative order no longer matters, and a memory recorded then forgotten in the
    same batch is never written at all.

    With the archive (the module docstring) a forgotten memory is not deleted but leaves the
    active set: ``retired`` when an earlier batch wrote it, ``archived`` (written inactive) when
    this one did; every working memory is ``archived`` too. ``upserts``, ``archived`` and
    ``retired`` touch disjoint ids, and ``deletes`` stays empty.

    ``erased`` are the agents the batch forgets whole; a store erases them *before* the upserts
    and deletes. That equals the log order: the fold drops an erased agent's upserts that came
    before its :class:`AgentForgotten`, so what remains of the agent in ``upserts`` came after
    it (a new life) and must survive it. A delete kept from before the erasure deletes a point
    already gone, unless a later upsert of the same id removed it from ``deletes``.
    """

    upserts: dict[str, MemoryWritten]
    deletes: frozenset[str]
    positions: Positions
    erased: frozenset[str] = frozenset()
    archived: dict[str, MemoryWritten] = field(default_factory=dict)
    """Memories written to the archive alone: working memories (their active copy is in
    Redis), and episodic ones the same batch forgot."""
    retired: frozenset[str] = frozenset()
    """Memories the batch forgot that earlier batches wrote: they move to the archive."""
    bounds: dict[str, int] = field(default_factory=dict)
    """For ids in ``deletes`` or ``retired``, the seq their forgetting names: a point of a
    higher seq is a later memory under the same id (its event id used again once this one was
    forgotten), which a forgetting applied again must leave as it is. An id without a bound
    (a forgetting of schema version 1) is deleted or retired whatever it holds."""
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    """The embedding of every memory in ``upserts`` and ``archived``, decoded and checked
    against the store's dimension once, for its point."""

    @property
    def touches_data(self) -> bool:
        return bool(self.upserts or self.deletes or self.erased or self.archived or self.retired)


def episodic_changes(
    events: Sequence[DerivedEvent], dim: int, *, archive: bool = False
) -> EpisodicChanges:
    """Fold a batch, its vectors checked against the store's dimension; positions come from
    every event, since a working-memory event or a consolidation record is applied too (as a
    no-op) and a read-your-writes wait must see the store move past it. Every event type is
    named, so one this fold does not know fails mypy and raises rather than being dropped."""
    upserts: dict[str, MemoryWritten] = {}
    archived: dict[str, MemoryWritten] = {}
    deletes: set[str] = set()
    retired: set[str] = set()
    erased: set[str] = set()
    bounds: dict[str, int | None] = {}
    for event in events:
        match event:
            case MemoryRecorded() | MemoryPromoted() | MemorySummarised():
                key = event.memory_id
                if event.destination == "episodic":
                    upserts[key] = event
                    deletes.discard(key)
                    retired.discard(key)
                    archived.pop(key, None)
                elif archive:
                    archived[key] = event
            case MemoryForgotten():
                key = event.memory_id
                later = upserts.get(key)
                if event.destination != "episodic" or _is_later(later, event):
                    pass
                elif not archive:
                    upserts.pop(key, None)
                    deletes.add(key)
                    _bound(bounds, key, event)
                elif (written := upserts.pop(key, None)) is not None:
                    archived[key] = written
                else:
                    retired.add(key)
                    _bound(bounds, key, event)
            case AgentForgotten():
                agent = event.agent_id
                upserts = {k: m for k, m in upserts.items() if m.agent_id != agent}
                archived = {k: m for k, m in archived.items() if m.agent_id != agent}
                erased.add(agent)
            case ConsolidationCompleted() | LearnedChange():
                pass
            case _:
                assert_never(event)
    vectors = {
        key: checked_vector(memory.vector(), dim, f"the embedding of {key}")
        for key, memory in [*upserts.items(), *archived.items()]
    }
    return EpisodicChanges(
        upserts,
        frozenset(deletes),
        latest_positions(events),
        frozenset(erased),
        archived,
        frozenset(retired),
        {k: b for k, b in bounds.items() if b is not None and (k in deletes or k in retired)},
        vectors,
    )


def _is_later(written: MemoryWritten | None, forgetting: MemoryForgotten) -> bool:
    """Whether the memory this batch wrote under the forgotten id is a later one than the
    forgetting names (the batch holds a forgetting applied again after the id was reused)."""
    return written is not None and forgetting.seq is not None and written.seq > forgetting.seq


def _bound(bounds: dict[str, int | None], key: str, forgetting: MemoryForgotten) -> None:
    """The highest seq forgotten under ``key``; None once one forgetting names none."""
    if key in bounds and bounds[key] is None:
        return
    seq = forgetting.seq
    known = bounds.get(key)
    bounds[key] = None if seq is None else seq if known is None else max(known, seq)


def advance_positions(current: Mapping[tuple[str, int], int], batch: Positions) -> Positions | None:
    """The positions after a batch, or None when nothing moved forward.

    Positions never go back: re-applying an old prefix of the log (a replay, a rebalance)
    must not make a reader believe that later records are no longer applied.
    """
    moved = {key: offset for key, offset in batch.items() if current.get(key, -1) < offset}
    return {**current, **moved} if moved else None


def checked_vector(vector: np.ndarray, dim: int, what: str) -> np.ndarray:
    """A vector of the store's dimension, or a message that names the likely cause."""
    array = np.asarray(vector, dtype=np.float32)
    if array.shape != (dim,):
        raise ValueError(
            f"{what} has shape {array.shape}, but this store holds {dim}-d vectors "
            "(was the embedder changed without rebuilding the projection?)"
        )
    return array
