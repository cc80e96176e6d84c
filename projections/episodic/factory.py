"""Choosing the episodic backend from configuration: a URL means a Qdrant server (the cluster),
a path means Qdrant Edge in-process (the embedded default).

The server adapter is imported only when a URL is given: qdrant-client takes ~0.5 s to import
(its HTTP models), a third of what a worker or ``engram up`` spent importing before it started
on the embedded stack, which never uses it."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from projections.episodic.edge import SHARD_DIR, EdgeEpisodicMemory
from projections.episodic.edge_config import stored_size
from projections.episodic.edge_segments import DECODED_MEMORIES, OPTIMIZE_EVERY, VECTOR_DATATYPE
from projections.interfaces import EpisodicMemoryStore

__all__ = ["drop_episodic_store", "open_episodic_store", "stored_episodic_dim"]


async def open_episodic_store(
    *,
    qdrant_url: str | None,
    qdrant_path: Path | None,
    collection: str,
    dim: int,
    api_key: str | None = None,
    archive: bool = True,
    optimize_every: int = OPTIMIZE_EVERY,
    decoded_memories: int = DECODED_MEMORIES,
    edge_vectors: str = VECTOR_DATATYPE,
    sync_every: float = 0.0,
) -> EpisodicMemoryStore:
    """Open the episodic store; it must be closed by the caller. ``archive`` False forgets
    what capacity and forgetting take (:mod:`projections.episodic.changes`).

    With a path, the Edge store lives in ``qdrant_path / collection``, so several collections
    (episodic, later semantic) can share one configured directory as they share one server.
    ``optimize_every`` is the Edge store's cadence of optimization
    (:mod:`projections.episodic.edge_segments`), ``decoded_memories`` how many memories it
    keeps decoded (:mod:`projections.episodic.decoded_memories`), ``edge_vectors`` how a new
    shard stores its dense vectors, ``sync_every`` how long its durable checkpoint may lag
    (:mod:`projections.episodic.edge`); a server optimizes and syncs on its own.
    Async although Edge opens synchronously: the server adapter has to talk to the network,
    and loading a large shard takes long enough to belong in a thread.
    """
    if qdrant_url:
        from projections.episodic.qdrant_server import QdrantServerEpisodicMemory

        return await QdrantServerEpisodicMemory.open(
            qdrant_url, dim=dim, collection=collection, api_key=api_key, archive=archive
        )
    if qdrant_path is not None:
        return await asyncio.to_thread(
            EdgeEpisodicMemory.open,
            qdrant_path / collection,
            dim,
            archive=archive,
            optimize_every=optimize_every,
            decoded_memories=decoded_memories,
            vectors=edge_vectors,
            sync_every=sync_every,
        )
    raise ValueError(
        "no episodic store configured: give a Qdrant server URL (cluster) or a directory for "
        "the embedded Qdrant Edge store"
    )


async def stored_episodic_dim(
    *,
    qdrant_url: str | None,
    qdrant_path: Path | None,
    collection: str,
    api_key: str | None = None,
) -> int | None:
    """The vector size the episodic store ``collection`` holds; None if it was never made.

    A projection version built by a reprocess holds its own embedder's vectors, whatever the
    embedder configured now: what opens it without embedding anything opens it with this size.
    """
    if qdrant_url:
        from projections.episodic.qdrant_server import stored_dim

        return await stored_dim(qdrant_url, collection, api_key=api_key)
    if qdrant_path is not None:
        return await asyncio.to_thread(stored_size, qdrant_path / collection / SHARD_DIR)
    raise ValueError("no episodic store configured")


async def drop_episodic_store(
    *,
    qdrant_url: str | None,
    qdrant_path: Path | None,
    collection: str,
    api_key: str | None = None,
) -> None:
    """Delete a collection and its applied positions (a retired projection version).

    The caller makes sure nobody has it open: an Edge shard deleted under a process that holds
    it would go on being written into files nobody can find.
    """
    if qdrant_url:
        from projections.episodic.qdrant_server import drop_collection

        await drop_collection(qdrant_url, collection, api_key=api_key)
    elif qdrant_path is not None:
        await asyncio.to_thread(shutil.rmtree, qdrant_path / collection, True)
    else:
        raise ValueError("no episodic store configured")
