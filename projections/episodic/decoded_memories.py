"""Memories already decoded from an embedded shard's points, kept by point id.

Why: a retrieval reads a few hundred candidates, and turning each point back into a memory
cost more than finding it. In a shard of 100 agents x 1,000 memories, a relevance read's
candidates query took ~0.9 ms for ids and scores alone and ~1.7 ms with the payloads; decoding
those payloads into models took ~3.5 us a point more. So the store queries ids and scores, and
reads and decodes only the points it has not decoded yet. The bet is that an agent asked again
(the next turn of a conversation) meets many of the memories it met before; an agent none of
whose memories are kept gets its payloads with the query, in one call, as before.

Correctness rests on two rules, both kept by :class:`DecodedMemories`:

* a write forgets every point it touched *before* the write returns (an erasure forgets all),
  so a read that starts after a write finished never sees the memory as it was before;
* a read keeps what it decoded only if no write forgot anything since the read began
  (:attr:`DecodedMemories.generation`): a payload read while a write ran in its thread may
  already be stale, and is used for that one read, as any read racing a write may be.

Only the embedded store holds one: its shard is written by this process alone. A Qdrant server
is written by other processes too, whose writes this one would never hear of.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from projections.episodic.edge_segments import DECODED_MEMORIES
from projections.memory import STORED_FIELDS, StoredMemory, field_values, memory_of_values

__all__ = ["DECODED_MEMORIES", "DecodedMemories", "Kept", "point_key"]

Kept = tuple[tuple[Any, ...], int]
"""A kept memory: its field values (:func:`~projections.memory.field_values`) and the number
of its set of given fields. Plain tuples of plain values, so Python's cycle collector stops
tracking them, and half the memory of a model (~0.8 KB against ~1.8)."""

_AGENT = STORED_FIELDS.index("agent_id")


def point_key(point_id: UUID | int | str) -> int:
    """A point id as kept memories are found by: its UUID's 128-bit integer. Edge hands a
    query's ids over as ``uuid.UUID``, whose integer costs 0.06 us a point where its string
    form cost 0.6 (timeit, 190 points). Raises ``ValueError`` for an id that is no UUID (the
    store's point ids are memory ids, which all are)."""
    if isinstance(point_id, UUID):
        return point_id.int
    return UUID(str(point_id)).int


def _written_key(point_id: str) -> int | None:
    """The key of an id a write names; None for one that is no UUID, which no point has."""
    try:
        return point_key(point_id)
    except ValueError:
        return None


class DecodedMemories:
    """A bounded map from point id to decoded memory (no search scores), safe to share between
    the event loop, which reads, and the thread that writes the shard."""

    def __init__(self, capacity: int = DECODED_MEMORIES) -> None:
        if capacity < 0:
            raise ValueError(f"capacity cannot be negative, got {capacity}")
        self._capacity = capacity
        self._memories: OrderedDict[int, Kept] = OrderedDict()
        self._per_agent: Counter[str] = Counter()
        self._field_sets: list[frozenset[str]] = []
        self._generation = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._memories)

    @property
    def generation(self) -> int:
        """Bumped by every :meth:`forget`: read it before querying the shard, give it back to
        :meth:`remember`."""
        return self._generation

    def holds_any_of(self, agent_id: str) -> bool:
        """Whether any memory of the agent is kept. When none is, a read asks the shard for the
        payloads with the candidates at once: reading ids first and then every payload by id
        costs two calls where one would do (an agent's first read after the store opened)."""
        return self._per_agent[agent_id] > 0

    def known(self, keys: Iterable[int]) -> dict[int, Kept]:
        """The kept memories of ``keys`` (:func:`point_key`), now most recently read;
        :meth:`memory` turns one back into a memory."""
        found: dict[int, Kept] = {}
        with self._lock:
            memories = self._memories
            for key in keys:
                kept = memories.get(key)
                if kept is not None:
                    memories.move_to_end(key)
                    found[key] = kept
        return found

    def memory(self, kept: Kept, similarity: float | None = None) -> StoredMemory:
        """The memory of ``kept``, with a search's cosine when given."""
        values, fields = kept
        return memory_of_values(values, self._field_sets[fields], similarity)

    def remember(self, generation: int, memories: Mapping[int, StoredMemory]) -> None:
        """Keep ``memories`` (decoded without scores, by :func:`point_key`), unless a write
        forgot anything since ``generation`` was read."""
        with self._lock:
            if generation != self._generation or not self._capacity:
                return
            kept = self._memories
            for key, memory in memories.items():
                self._dropped(kept.pop(key, None))
                kept[key] = (field_values(memory), self._field_set(memory.model_fields_set))
                self._per_agent[memory.agent_id] += 1
            while len(kept) > self._capacity:
                self._dropped(kept.popitem(last=False)[1])

    def forget(self, ids: Iterable[str]) -> None:
        """Drop the memories of ``ids``: the points a write touched."""
        keys = [key for key in map(_written_key, ids) if key is not None]
        with self._lock:
            self._generation += 1
            for key in keys:
                self._dropped(self._memories.pop(key, None))

    def forget_all(self) -> None:
        """Drop everything: a write that removed points it cannot name (an agent's erasure)."""
        with self._lock:
            self._generation += 1
            self._memories.clear()
            self._per_agent.clear()

    def _field_set(self, fields: set[str]) -> int:
        """The number of a set of given fields (memories share a handful; the lock held)."""
        frozen = frozenset(fields)
        try:
            return self._field_sets.index(frozen)
        except ValueError:
            self._field_sets.append(frozen)
            return len(self._field_sets) - 1

    def _dropped(self, kept: Kept | None) -> None:
        """Count ``kept`` out of its agent's kept memories (the lock held)."""
        if kept is None:
            return
        agent_id = kept[0][_AGENT]
        left = self._per_agent[agent_id] - 1
        if left:
            self._per_agent[agent_id] = left
        else:
            del self._per_agent[agent_id]
