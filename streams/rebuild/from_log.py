"""Rebuilding projections from the derived log: the promise that Redis and Qdrant hold nothing
the log cannot give back.

The bulk path of :mod:`streams.rebuild.replay` without versions or a switch: for stores nobody else
writes (a benchmark, a test, a repair with the processors stopped). Reads ``memory.items`` and
``memory.lifecycle`` from the beginning, one partition number at a time, puts each back in
emission order (:func:`processors.emission_order.causal_order`) and applies it in large batches.
Every store's ``apply`` is idempotent, so rebuilding into stores that already hold part of the
log is safe too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from projections.interfaces import EpisodicMemoryStore, WorkingMemoryStore
from schemas.topics import Topics
from streams.privacy.sealing import RecordSealer
from streams.rebuild.replay import DerivedLogCursor, replay_pass

Progress = Callable[[int, int], None]
"""Called with (events applied, events expected) after each batch; expected is a lower bound."""


async def rebuild_projections(
    bootstrap: str,
    topics: Topics,
    partitions: Iterable[int],
    stores: Sequence[WorkingMemoryStore | EpisodicMemoryStore],
    *,
    batch_size: int = 5000,
    progress: Progress | None = None,
    sealer: RecordSealer | None = None,
) -> int:
    """Apply the whole derived log of ``partitions`` to ``stores``; returns the events applied."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    cursor = DerivedLogCursor(
        bootstrap, topics, sorted(set(partitions)), sealer=sealer or RecordSealer(None)
    )
    expected = await cursor.start_at(None)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, max(expected, done))

    applied, _ = await replay_pass(cursor, stores, None, batch_size=batch_size, advance=advance)
    return applied
