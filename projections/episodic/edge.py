"""Episodic memory on Qdrant Edge: the Qdrant engine in-process, the embedded default.

A store is a directory holding the shard and, beside it, the applied positions::

    <path>/shard/                    the Edge shard (segments, WAL, edge_config.json)
    <path>/applied_positions.json    highest source offset applied per topic and partition

The positions live outside the shard directory so that nothing Edge manages (snapshots,
``update_from_snapshot``) ever has to know about a file it did not write.

Checkpoint order:

1. one delete of every point of the agents the batch forgets (:class:`AgentForgotten`), one
   upsert of the batch's surviving memories (recorded, promoted, summarised) and one delete of
   its forgettings;
2. ``flush()``, so the shard is durable;
3. the positions written to a temporary file, fsynced, renamed over the old file.

A crash between two steps leaves the positions at or behind the data, never ahead of it, so a
restart replays a little and the idempotent upserts and deletes absorb the replay.

Why flush at all although Edge has a write-ahead log: the WAL survives a killed process
(checked: a point upserted without a flush is back after ``os._exit``), but an update returns in
~0.3 ms, far quicker than a disk sync, so the WAL is not synced per update and after a power loss
the positions file could outlive the data it vouches for.

When steps 2 and 3 run is ``sync_every``. At 0 every :meth:`EdgeEpisodicMemory.apply` takes all
three, so "``apply`` returned" means "durable". Above 0 (the worker's default, a second:
``ENGRAM_EDGE_SYNC_SECONDS``) an apply takes step 1 and steps 2-3 follow for every apply since,
at most ``sync_every`` seconds later (group commit), or at once for a batch that erases an
agent, before an optimization, on :meth:`~EdgeEpisodicMemory.sync` and on close: a flush took
~24 ms after a 200-point batch here (the disk, with the GIL held), a fifth of the latency at a
steady 1,000 events/s. Reads and :meth:`applied_offset` see what was applied; only the positions
on disk lag, as a crash leaves them anyway. Who commits Kafka offsets on an apply's word calls
:meth:`sync` first (the episodic projector); a worker re-applies after a crash from the store's
own positions, and syncs before it writes a snapshot (a takeover refuses a snapshot that a
projection is behind, :mod:`streams.eventlog.snapshot_log`).

A batch is written on the event loop's thread. Edge keeps the GIL for the whole of a call, the
flush's wait on the disk included (a Python thread beside 250-point upserts and flushes ran at
25% of its own pace, against 49% beside Python code and 98% beside a sleep), so a worker thread
bought the loop only the Python between Edge's calls, and cost the write its handoffs of the
GIL: at a steady 1,000 events/s a batch's Edge apply took 54-55 ms at the median in a thread
against 23-25 inline, and the publish-to-queryable p50 287-305 ms against 216-232. The
positions file's fsync, which lets go of the GIL, and the timer's syncs still run in a thread.

Every point carries, beside its embedding (the unnamed dense vector), the ``lexical`` sparse
vector of its content (:mod:`processors.lexical`), which the shard scores with the IDF modifier;
a search given a :class:`~processors.lexical.SparseQuery` is hybrid
(:mod:`projections.episodic.hybrid`). A shard created before hybrid search has no sparse vector
and cannot be given one in place (Edge refuses to load it with a config naming a vector its
segments lack): it keeps working dense-only, with a warning to rebuild it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import qdrant_edge as qe

from processors.lexical import SparseQuery
from projections.episodic.candidates import CandidateSignals, Scope
from projections.episodic.changes import (
    EpisodicChanges,
    advance_positions,
    checked_vector,
    episodic_changes,
)
from projections.episodic.decoded_memories import DecodedMemories, Kept, point_key
from projections.episodic.edge_candidates import candidate_request, with_payloads
from projections.episodic.edge_filters import (
    ACTIVE,
    agent_filter,
    agents_filter,
    forgetting_updates,
    selection_filter,
)
from projections.episodic.edge_open import ShardLock, edge_errors, let_go, open_shard
from projections.episodic.edge_points import edge_points
from projections.episodic.edge_positions import Positions, read_positions, write_positions
from projections.episodic.edge_segments import (
    DECODED_MEMORIES,
    OPTIMIZE_EVERY,
    VECTOR_DATATYPE,
    VECTOR_DATATYPES,
    OptimizeCadence,
)
from projections.episodic.hybrid import (
    LEXICAL_VECTOR,
    Selection,
    ambiguous_cut,
    checked_levels,
    dense_of,
    fetch_depth,
    fuse,
    missing_similarities,
    selection,
    similarities,
    warn_dense_only,
)
from projections.episodic.point_memories import clipped, stored_memory
from projections.interfaces import ProjectionError
from projections.memory import StoredMemory, with_similarity
from projections.retrieval.filters import MemoryFilter
from schemas.memory_events import (
    DerivedEvent,
)

__all__ = [
    "EdgeEpisodicMemory",
    "EpisodicChanges",
    "advance_positions",
    "checked_levels",
    "checked_vector",
    "episodic_changes",
]

logger = logging.getLogger(__name__)

SHARD_DIR = "shard"
POSITIONS_FILE = "applied_positions.json"


class EdgeEpisodicMemory:
    """One Edge shard of episodic memories, one point per memory (point id = memory id)."""

    def __init__(
        self,
        shard: qe.EdgeShard,
        path: Path,
        dim: int,
        positions: Positions,
        *,
        lexical: bool = True,
        archive: bool = True,
        optimize_every: int = OPTIMIZE_EVERY,
        decoded_memories: int = DECODED_MEMORIES,
        vectors: str,
        sync_every: float = 0.0,
        lock: ShardLock | None = None,
    ) -> None:
        self._lock = lock
        self._unclosed: weakref.finalize[..., EdgeEpisodicMemory] | None = None
        self._sync_every = sync_every
        self._unsynced = False
        self._sync_task: asyncio.Task[None] | None = None
        self._sync_sleeping = False
        self._archive = archive
        self._vectors = vectors
        self._cadence = OptimizeCadence(optimize_every)
        self._shard = shard
        self._path = path
        self._dim = dim
        self._positions = positions
        self._lexical = lexical
        self._warned = False
        self._write_lock = asyncio.Lock()
        self._closed = False
        self._decoded = DecodedMemories(decoded_memories)

    @classmethod
    def open(
        cls,
        path: Path,
        dim: int,
        *,
        archive: bool = True,
        optimize_every: int = OPTIMIZE_EVERY,
        decoded_memories: int = DECODED_MEMORIES,
        vectors: str = VECTOR_DATATYPE,
        sync_every: float = 0.0,
    ) -> EdgeEpisodicMemory:
        """Create the store at ``path``, or load it; a dimension other than the stored one fails.

        A new shard gets the ``lexical`` sparse vector and stores its dense vectors as
        ``vectors`` (:data:`~projections.episodic.edge_segments.VECTOR_DATATYPE`); an existing
        one is loaded with its own sparse vectors (the config names none, so Edge keeps what
        the shard has) and its own datatype, whatever ``vectors`` says (a rebuild into a new
        shard adopts it). Both get the segment layout of
        :mod:`projections.episodic.edge_segments`, which an existing shard's next optimization
        adopts. ``sync_every`` is how many seconds the durable checkpoint may lag what was
        applied (0: none, every apply is durable when it returns; see the module docstring).
        """
        if vectors not in VECTOR_DATATYPES:
            known = ", ".join(VECTOR_DATATYPES)
            raise ValueError(f"vectors must be one of {known}, got {vectors!r}")
        if sync_every < 0:
            raise ValueError(f"sync_every must be 0 or more seconds, got {sync_every}")
        shard_path = path / SHARD_DIR
        lock = ShardLock.take(path)  # before Edge reads a byte: edge_open's docstring says why
        try:
            shard, lexical, vectors = open_shard(shard_path, dim, vectors)
        except BaseException:
            lock.release()
            raise
        try:
            positions = read_positions(path / POSITIONS_FILE)
            store = cls(
                shard,
                path,
                dim,
                positions,
                lexical=lexical,
                archive=archive,
                optimize_every=optimize_every,
                decoded_memories=decoded_memories,
                vectors=vectors,
                sync_every=sync_every,
                lock=lock,
            )
        except BaseException:
            with contextlib.suppress(Exception):
                shard.close()
            lock.release()  # only once Edge let go: edge_open's docstring says why
            raise
        store._unclosed = weakref.finalize(store, let_go, shard, lock)  # edge_open says why
        if not lexical:
            store._warn_dense_only()
        return store

    @property
    def path(self) -> Path:
        return self._path

    @property
    def vectors(self) -> str:
        """How the shard stores its dense vectors: ``float16`` or ``float32``."""
        return self._vectors

    @property
    def lexical(self) -> bool:
        """Whether the store holds sparse vectors (False: built before hybrid search)."""
        return self._lexical

    def _warn_dense_only(self) -> None:
        if not self._warned:
            self._warned = True
            warn_dense_only(str(self._path))

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        changes = episodic_changes(events, self._dim, archive=self._archive)
        async with self._write_lock:
            self._check_open()
            positions = advance_positions(self._positions, changes.positions)
            if not changes.touches_data and positions is None:
                return
            # An erasure is made durable at once: forgetting an agent must not wait on a timer.
            now = self._sync_every == 0 or bool(changes.erased)
            synced = self._write(changes, positions, now)
            if positions is not None:
                self._positions = positions
            self._after_write(synced)

    async def advance(self, positions: Mapping[tuple[str, int], int]) -> None:
        """Step 3 alone: no data goes with it, so nothing needs flushing first, unless earlier
        applies wait for their sync (then the positions wait with them)."""
        async with self._write_lock:
            self._check_open()
            moved = advance_positions(self._positions, dict(positions))
            if moved is None:
                return
            now = self._sync_every == 0 and not self._unsynced
            if now:
                await asyncio.to_thread(write_positions, self._path / POSITIONS_FILE, moved)
            self._positions = moved
            self._after_write(now)

    async def sync(self) -> None:
        """Make every apply and advance so far durable: the flush, then the positions (steps 2
        and 3); nothing to do when they are already."""
        async with self._write_lock:
            if self._unsynced and not self._closed:
                await asyncio.to_thread(self._sync_now)
                self._unsynced = False

    def _after_write(self, synced: bool) -> None:
        """Note what waits for a sync, and have one run within ``sync_every`` seconds even if
        nothing else is applied meanwhile."""
        if synced:
            return
        self._unsynced = True
        task = self._sync_task
        if task is None or task.done():
            # A task past its sleep waits for the write lock this write holds, so it syncs
            # this write too.
            self._sync_task = asyncio.get_running_loop().create_task(self._sync_later())

    async def _sync_later(self) -> None:
        self._sync_sleeping = True
        try:
            await asyncio.sleep(self._sync_every)  # close() cancels it here, and only here
        finally:
            self._sync_sleeping = False
        try:
            await self.sync()
        except ProjectionError as exc:
            # The positions stay behind the data, which is safe: the next sync, or the replay
            # of a restart, makes up for it.
            logger.warning("could not sync the episodic shard", extra={"error": str(exc)})

    def _sync_now(self) -> None:
        with edge_errors(f"flushing {self._path}"):
            self._shard.flush()
        write_positions(self._path / POSITIONS_FILE, self._positions)

    def _write(self, changes: EpisodicChanges, positions: Positions | None, sync: bool) -> bool:
        """Step 1 of the checkpoint order in the module docstring, and steps 2-3 when ``sync``
        or an optimization is due (else :meth:`sync` takes them later, for this write and those
        after it); whether it took them."""
        with edge_errors(f"applying a batch to {self._path}"):
            if changes.erased:
                self._shard.update(
                    qe.UpdateOperation.delete_points_by_filter(agents_filter(changes.erased))
                )
            points = edge_points(changes, self._lexical)
            if points:
                self._shard.update(qe.UpdateOperation.upsert_points(points))
            for forgetting in forgetting_updates(changes.retired, changes.deletes, changes.bounds):
                self._shard.update(forgetting)
        if changes.erased:
            self._decoded.forget_all()
        elif changes.touches_data:
            touched = (changes.upserts, changes.archived, changes.retired, changes.deletes)
            self._decoded.forget(point_id for ids in touched for point_id in ids)
        written = len(points) + len(changes.retired) + len(changes.deletes)
        optimize = bool(written) and self._cadence.wrote(written)
        synced = sync or optimize  # an optimization starts from durable data
        if synced:
            with edge_errors(f"flushing {self._path}"):
                if changes.touches_data or self._unsynced:
                    self._shard.flush()
            if positions is not None or self._unsynced:
                write_positions(self._path / POSITIONS_FILE, positions or self._positions)
            self._unsynced = False
        if optimize:
            self._optimize_segments()
        return synced

    def _optimize_segments(self) -> bool:
        """After the positions: an optimization cut short by a crash loses no data (Edge swaps a
        segment in once it is whole), and what the batch wrote is durable before it starts."""
        started = time.perf_counter()
        with edge_errors(f"optimizing {self._path}"):
            changed = bool(self._shard.optimize())
            info = self._shard.info()
        self._cadence.optimized()
        logger.info(
            "optimized the episodic shard",
            extra={
                "path": str(self._path),
                "changed": changed,
                "seconds": round(time.perf_counter() - started, 3),
                "segments": info.segments_count,
                "points": info.points_count,
            },
        )
        return changed

    def _filter(self, chosen: Selection) -> qe.Filter:
        return selection_filter(chosen, tags_field="tags_lc" if self._lexical else "tags")

    async def memories(
        self,
        agent_id: str,
        limit: int = 1000,
        levels: Sequence[int] | None = None,
        *,
        filter: MemoryFilter | None = None,
    ) -> list[StoredMemory]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        chosen = selection(agent_id, levels, filter)
        self._check_open()
        if chosen is None:
            return []
        request = qe.ScrollRequest(
            limit=limit,
            filter=self._filter(chosen),
            with_payload=True,
            with_vector=False,
            order_by=qe.OrderBy("seq", qe.Direction.Desc),
        )
        with edge_errors(f"listing the memories of {agent_id!r}"):
            records, _ = self._shard.scroll(request)
        return [stored_memory(record.payload) for record in records]

    async def candidates(
        self,
        agent_id: str,
        signals: CandidateSignals,
        levels: Sequence[int] | None = None,
        *,
        filter: MemoryFilter | None = None,
        scope: Scope = "active",
    ) -> list[StoredMemory]:
        chosen = selection(agent_id, levels, filter, scope)
        self._check_open()
        if chosen is None:
            return []
        if signals.vector is not None:
            checked_vector(signals.vector, self._dim, "the query vector")
        request = candidate_request(
            signals,
            self._filter(chosen),
            agent_filter(agent_id, scope),
            tags_field="tags_lc" if self._lexical else "tags",
            lexical=self._lexical,
        )
        generation = self._decoded.generation
        payloads = not self._decoded.holds_any_of(agent_id)
        if payloads:
            request = with_payloads(request)
        with edge_errors(f"reading the candidates of {agent_id!r}"):
            points = self._shard.query(request)
            keys = [point_key(point.id) for point in points]
            kept: dict[int, Kept] = {}
            if payloads:
                fresh = {key: stored_memory(p.payload) for key, p in zip(keys, points, strict=True)}
            else:
                kept = self._decoded.known(keys)
                missing = [p.id for key, p in zip(keys, points, strict=True) if key not in kept]
                fresh = self._payloads_of(missing)
            self._decoded.remember(generation, fresh)
        scored = signals.nearest
        read = []
        for key, point in zip(keys, points, strict=True):
            similarity = clipped(point.score) if scored else None
            if key in kept:
                memory: StoredMemory | None = self._decoded.memory(kept[key], similarity)
            else:
                # None: a point deleted between the query and the read of its payload.
                memory = fresh.get(key)
                if memory is not None and similarity is not None:
                    memory = with_similarity(memory, similarity)
            if memory is not None and signals.wanted(memory.seq):
                read.append(memory)
        return read

    def _payloads_of(self, ids: list[qe.PointId]) -> dict[int, StoredMemory]:
        """The memories of ``ids`` read from the shard, decoded, by :func:`point_key`: the
        candidates not decoded before (:mod:`projections.episodic.decoded_memories`)."""
        if not ids:
            return {}
        records = self._shard.retrieve(ids, with_payload=["memory"], with_vector=False)
        return {point_key(record.id): stored_memory(record.payload) for record in records}

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
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        query = checked_vector(vector, self._dim, "the query vector")
        chosen = selection(agent_id, levels, filter)
        self._check_open()
        if chosen is None:
            return []
        if lexical is not None and not self._lexical:
            self._warn_dense_only()
        with edge_errors(f"searching the memories of {agent_id!r}"):
            if lexical is not None and self._lexical:
                return self._hybrid_search(chosen, query, lexical, limit)
            request = qe.QueryRequest(
                limit=limit,
                query=qe.Query.Nearest(query.tolist()),
                filter=self._filter(chosen),
                with_payload=True,
                with_vector=False,
            )
            points = self._shard.query(request)
        return [stored_memory(point.payload, point.score) for point in points]

    def _hybrid_search(
        self, chosen: Selection, query: np.ndarray, lexical: SparseQuery, limit: int
    ) -> list[StoredMemory]:
        """Both sub-queries in one batch, ids and scores only, deepened while a tie straddles
        the cut; then the fused best ``limit`` read back with their payloads and embeddings (see
        :mod:`projections.episodic.hybrid`). An empty side (a query vector of zeros, a query
        text of stopwords only) is not asked, and the other ranks alone."""
        flt = self._filter(chosen)
        sparse = qe.Query.Nearest(
            qe.SparseVector(list(lexical.indices), list(lexical.values)), using=LEXICAL_VECTOR
        )
        idf_corpus = qe.SearchParams(idf=qe.IdfParams(corpus=agent_filter(chosen.agent_id)))
        nearest = qe.Query.Nearest(query.tolist()) if np.any(query) else None
        if nearest is None and not lexical:
            return []
        depth = fetch_depth(limit)
        while True:
            requests = []
            if lexical:
                requests.append(
                    qe.QueryRequest(
                        limit=depth, query=sparse, filter=flt, params=idf_corpus, with_payload=False
                    )
                )
            if nearest is not None:
                requests.append(
                    qe.QueryRequest(limit=depth, query=nearest, filter=flt, with_payload=False)
                )
            found = iter(self._shard.query_batch(qe.QueryBatchRequest(requests)))
            lexical_hits = [(str(p.id), float(p.score)) for p in next(found)] if lexical else []
            dense_hits = [(str(p.id), float(p.score)) for p in next(found)] if nearest else []
            if not ambiguous_cut(lexical_hits, limit, depth) and not ambiguous_cut(
                dense_hits, limit, depth
            ):
                break
            depth *= 4
        hits = fuse(dense_hits, lexical_hits, limit)
        if not hits:
            return []
        dense_scores = dict(dense_hits)
        vectors = missing_similarities(query, hits, dense_scores)
        records = self._shard.retrieve(
            [hit.memory_id for hit in hits],
            with_payload=True,
            with_vector=[""] if vectors else False,
        )
        by_id = {str(record.id): record for record in records}
        # A hit without its record was deleted meanwhile, by an apply in between.
        kept = [hit for hit in hits if hit.memory_id in by_id]
        stored = {
            hit.memory_id: dense_of(by_id[hit.memory_id].vector)
            for hit in kept
            if vectors and hit.memory_id not in dense_scores
        }
        scores = similarities(query, [hit.memory_id for hit in kept], dense_scores, stored)
        return [
            stored_memory(by_id[hit.memory_id].payload, similarity, hit.lexical)
            for hit, similarity in zip(kept, scores, strict=True)
        ]

    async def count(self, agent_id: str | None = None) -> int:
        request = qe.CountRequest(
            exact=True, filter=ACTIVE if agent_id is None else agent_filter(agent_id)
        )
        self._check_open()
        with edge_errors("counting memories"):
            return int(self._shard.count(request))

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        self._check_open()
        return self._positions.get((topic, partition))

    async def ping(self) -> None:
        self._check_open()
        with edge_errors(f"reading the shard info of {self._path}"):
            self._shard.info()

    async def optimize(self) -> bool:
        """Optimize the segments now rather than when the cadence of
        :mod:`projections.episodic.edge_segments` next falls due; whether anything changed."""
        async with self._write_lock:
            self._check_open()
            return await asyncio.to_thread(self._optimize_segments)

    async def close(self) -> None:
        """Durable first: what waits for a sync is flushed and its positions written."""
        if self._sync_task is not None and self._sync_sleeping:
            self._sync_task.cancel()
        async with self._write_lock:
            if self._closed:
                return
            self._closed = True
            try:
                with edge_errors(f"closing {self._path}"):
                    try:
                        self._shard.flush()
                        if self._unsynced:
                            write_positions(self._path / POSITIONS_FILE, self._positions)
                            self._unsynced = False
                    finally:
                        self._shard.close()
            finally:  # after Edge let go, whatever failed: edge_open's docstring says why
                if self._unclosed is not None:
                    self._unclosed.detach()  # closed here: nothing is left for the collector
                if self._lock is not None:
                    self._lock.release()

    def _check_open(self) -> None:
        if self._closed:
            raise ProjectionError(f"Qdrant Edge: the store at {self._path} is closed")
