"""Memories already decoded from an embedded shard's points, kept by point id.

Why: a retrieval reads a few hundred candidates, and turning each point back into a memory
cost more than finding it. In a shard of 100 agents x 1,000 memories, a relevance read's
candidates query took ~0.9 ms for ids and scores alone and ~1.7 ms with the payloads; decoding
those payloads into models took ~3.5 us a point more. An agent asked again (the next turn of a
conversation) is mostly asked about memories it was asked about before, so the store queries
ids and scores, and reads and decodes only the points it has not decoded yet.

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
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from projections.memory import StoredMemory

__all__ = ["DECODED_MEMORIES", "DecodedMemories"]

DECODED_MEMORIES = 50_000
"""How many decoded memories a store keeps, least recently read dropped first: the candidate
sets of some 200 agents of 1,000 memories. Measured with tracemalloc, a memory of ten words
and two tags takes ~1.1 KB, so ~55 MB at this bound."""


class DecodedMemories:
    """A bounded map from point id to decoded memory (no search scores), safe to share between
    the event loop, which reads, and the thread that writes the shard."""

    def __init__(self, capacity: int = DECODED_MEMORIES) -> None:
        if capacity < 0:
            raise ValueError(f"capacity cannot be negative, got {capacity}")
        self._capacity = capacity
        self._memories: OrderedDict[str, StoredMemory] = OrderedDict()
        self._generation = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._memories)

    @property
    def generation(self) -> int:
        """Bumped by every :meth:`forget`: read it before querying the shard, give it back to
        :meth:`remember`."""
        return self._generation

    def known(self, ids: Iterable[str]) -> dict[str, StoredMemory]:
        """The decoded memories of ``ids`` that are kept, now most recently read."""
        found: dict[str, StoredMemory] = {}
        with self._lock:
            memories = self._memories
            for point_id in ids:
                memory = memories.get(point_id)
                if memory is not None:
                    memories.move_to_end(point_id)
                    found[point_id] = memory
        return found

    def remember(self, generation: int, memories: Mapping[str, StoredMemory]) -> None:
        """Keep ``memories`` (decoded without scores), unless a write forgot anything since
        ``generation`` was read."""
        with self._lock:
            if generation != self._generation or not self._capacity:
                return
            kept = self._memories
            for point_id, memory in memories.items():
                kept[point_id] = memory
                kept.move_to_end(point_id)
            while len(kept) > self._capacity:
                kept.popitem(last=False)

    def forget(self, ids: Iterable[str]) -> None:
        """Drop the memories of ``ids``: the points a write touched."""
        with self._lock:
            self._generation += 1
            for point_id in ids:
                self._memories.pop(point_id, None)

    def forget_all(self) -> None:
        """Drop everything: a write that removed points it cannot name (an agent's erasure)."""
        with self._lock:
            self._generation += 1
            self._memories.clear()
