"""Rebuilding projections from the derived log: the promise that Redis and Qdrant hold nothing
the log cannot give back.

Reads ``memory.items`` and ``memory.lifecycle`` from the beginning, puts them back in emission
order (:func:`processors.state_fold.causal_order`) and applies them in large batches. Every
store's ``apply`` is idempotent, so rebuilding into stores that already hold part of the log is
safe too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

from processors.state_fold import causal_order
from projections.interfaces import EpisodicMemoryStore, WorkingMemoryStore
from schemas.topics import Topics
from streams.derived_log import read_partitions

Progress = Callable[[int, int], None]
"""Called with (events applied, events in total) after each batch."""


async def rebuild_projections(
    bootstrap: str,
    topics: Topics,
    partitions: Iterable[int],
    stores: Sequence[WorkingMemoryStore | EpisodicMemoryStore],
    *,
    batch_size: int = 5000,
    progress: Progress | None = None,
) -> int:
    """Apply the whole derived log of ``partitions`` to ``stores``; returns the events applied."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    events = causal_order(
        await read_partitions(bootstrap, (topics.items, topics.lifecycle), partitions)
    )
    for start in range(0, len(events), batch_size):
        chunk = events[start : start + batch_size]
        await asyncio.gather(*(store.apply(chunk) for store in stores))
        if progress is not None:
            progress(start + len(chunk), len(events))
    return len(events)
