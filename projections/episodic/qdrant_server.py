"""Episodic memory on a Qdrant server, through ``qdrant_client.AsyncQdrantClient``.

The same code runs on the client's local mode (``":memory:"`` or a directory), which is how the
contract tests run it where no server exists. Local mode ignores payload indexes and loops over
every payload in Python (measured on the dev machines: ~210 ms per filtered search at 20k
points), so it is a test
double, never a deployment.

Applied positions live in a companion collection, ``<collection>_applied``: one vector-less
point per topic and partition, its id derived from both. A companion collection rather than a
special point among the memories, so that counts, searches and scrolls of memories never have
to step around it. Checkpoint order per apply: delete every point of the agents the batch
forgets whole (before the rest, as :class:`~projections.episodic.edge.EpisodicChanges` says),
upsert the batch's surviving memories, delete its forgettings, then advance the positions, each
request with ``wait=True``. The server cannot write two collections atomically; this order
leaves the positions at or behind the data after a crash, and the idempotent upserts and
deletes absorb the replay.

As on Qdrant Edge, every point carries the ``lexical`` sparse vector (IDF modifier) beside its
embedding, and a search given a :class:`~processors.lexical.SparseQuery` is hybrid
(:mod:`projections.episodic.hybrid`): the two sub-queries go in one ``query_batch_points`` call,
the fused best are read back with one ``retrieve``. The lexical sub-query asks for the IDF over
the agent's points (``IdfCorpusParams``): the collection-wide default counts, on a server, the
deleted points still in its sparse index, while a corpus filter counts live points on a server,
on Edge and in local mode alike (checked by the contract tests on Edge and local mode; a server
older than the ``idf`` search parameter does not have it). A collection created before hybrid
search keeps working dense-only, with a warning to rebuild it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from qdrant_client import AsyncQdrantClient, models

from processors.lexical import SparseQuery, document_vector
from projections.episodic.candidates import CandidateSignals, Scope
from projections.episodic.edge import advance_positions, checked_vector, episodic_changes
from projections.episodic.edge_positions import Positions
from projections.episodic.hybrid import (
    LEXICAL_VECTOR,
    Selection,
    ambiguous_cut,
    dense_of,
    fetch_depth,
    fuse,
    missing_similarities,
    selection,
    similarities,
    warn_dense_only,
)
from projections.episodic.point_memories import candidate_memories, stored_memory
from projections.episodic.qdrant_candidates import candidate_query
from projections.episodic.qdrant_filters import (
    ACTIVE,
    agent_filter,
    forgotten_filter,
    selection_filter,
)
from projections.interfaces import ProjectionError
from projections.memory import StoredMemory, point_payload
from projections.retrieval.filters import MemoryFilter
from schemas.memory_events import DerivedEvent, MemoryWritten

__all__ = ["DEFAULT_COLLECTION", "QdrantServerEpisodicMemory"]

DEFAULT_COLLECTION = "engram_episodic"
POSITIONS_SUFFIX = "_applied"
POSITIONS_NAMESPACE = uuid.UUID("6a1f1f4e-3d5c-4b0e-8f0a-93c2d4b7e512")
UPSERT_CHUNK = 256
"""Points per upsert request: 256 memories of up to 16k characters stay well below the
server's default 32 MB request limit."""


def _position_id(topic: str, partition: int) -> str:
    return str(uuid.uuid5(POSITIONS_NAMESPACE, f"{topic}/{partition}"))


def _point(
    memory: MemoryWritten, vector: np.ndarray, lexical: bool, *, active: bool = True
) -> models.PointStruct:
    dense = vector.tolist()
    payload = point_payload(memory, active=active, lexical=lexical)
    if not lexical:
        return models.PointStruct(id=memory.memory_id, vector=dense, payload=payload)
    sparse = document_vector(memory.content)
    vectors: dict[str, models.Vector] = {
        "": dense,
        LEXICAL_VECTOR: models.SparseVector(
            indices=list(sparse.indices), values=list(sparse.values)
        ),
    }
    return models.PointStruct(id=memory.memory_id, vector=vectors, payload=payload)


def _client_for(
    location: str | Path, api_key: str | None, request_timeout: int
) -> tuple[AsyncQdrantClient, bool]:
    """The client for a location, and whether it talks to a real server."""
    if isinstance(location, Path):
        return AsyncQdrantClient(path=str(location)), False
    if location == ":memory:":
        return AsyncQdrantClient(location=location), False
    if location.startswith(("http://", "https://")):
        return AsyncQdrantClient(url=location, api_key=api_key, timeout=request_timeout), True
    raise ValueError(
        f"Qdrant location {location!r} is neither an http(s) URL, ':memory:' nor a Path"
    )


@contextmanager
def _client_errors(where: str, doing: str) -> Iterator[None]:
    """Translate client failures at the boundary. The client raises ``ApiException`` subclasses,
    httpx transport errors, and ``ValueError``/``RuntimeError`` in local mode: no common base
    narrower than ``Exception`` covers them."""
    try:
        yield
    except ProjectionError:
        raise
    except Exception as exc:
        raise ProjectionError(f"Qdrant at {where}: {doing} failed: {exc}") from exc


class QdrantServerEpisodicMemory:
    """One collection of episodic memories, one point per memory (point id = memory id)."""

    def __init__(
        self,
        client: AsyncQdrantClient,
        *,
        collection: str,
        dim: int,
        where: str,
        archive: bool = True,
    ) -> None:
        self._archive = archive
        self._client = client
        self._collection = collection
        self._positions_collection = collection + POSITIONS_SUFFIX
        self._dim = dim
        self._where = where
        self._lexical = True
        self._warned = False
        self._write_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(
        cls,
        location: str | Path,
        *,
        dim: int,
        collection: str = DEFAULT_COLLECTION,
        api_key: str | None = None,
        request_timeout: int = 10,
        archive: bool = True,
    ) -> QdrantServerEpisodicMemory:
        """Connect and create the collections if missing.

        ``location`` is a server URL (``http://qdrant:6333``), ``":memory:"``, or a directory
        (a ``Path``) for the client's on-disk local mode.
        """
        client, remote = _client_for(location, api_key, request_timeout)
        store = cls(client, collection=collection, dim=dim, where=str(location), archive=archive)
        try:
            # Local mode only warns that payload indexes have no effect, and the warning is
            # attributed to this module (stacklevel=5), so asking for them there is only noise.
            await store._ensure_collections(indexes=remote)
        except BaseException:
            await client.close()
            raise
        if not store._lexical:
            store._warn_dense_only()
        return store

    @property
    def lexical(self) -> bool:
        """Whether the collection holds sparse vectors (False: built before hybrid search)."""
        return self._lexical

    def _warn_dense_only(self) -> None:
        if not self._warned:
            self._warned = True
            warn_dense_only(f"{self._collection} at {self._where}")

    async def _ensure_collections(self, *, indexes: bool) -> None:
        vectors = models.VectorParams(size=self._dim, distance=models.Distance.COSINE)
        sparse = {LEXICAL_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)}
        self._lexical = await self._ensure_collection(self._collection, vectors, sparse)
        await self._ensure_collection(self._positions_collection, {})
        if not indexes:
            return
        wanted: dict[str, models.PayloadSchemaParams] = {
            "agent_id": models.KeywordIndexParams(
                type=models.KeywordIndexType.KEYWORD, is_tenant=True
            ),
            "seq": models.IntegerIndexParams(
                type=models.IntegerIndexType.INTEGER, lookup=False, range=True
            ),
            "level": models.IntegerIndexParams(
                type=models.IntegerIndexType.INTEGER, lookup=True, range=False
            ),
            "tags_lc": models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD),
            "importance": models.FloatIndexParams(type=models.FloatIndexType.FLOAT),
            "year": models.IntegerIndexParams(
                type=models.IntegerIndexType.INTEGER, lookup=False, range=True
            ),
            "step": models.IntegerIndexParams(
                type=models.IntegerIndexType.INTEGER, lookup=False, range=True
            ),
            "occurred_ts": models.FloatIndexParams(type=models.FloatIndexType.FLOAT),
            "archived": models.IntegerIndexParams(
                type=models.IntegerIndexType.INTEGER, lookup=True, range=False
            ),
        }
        with _client_errors(self._where, f"creating the payload indexes of {self._collection}"):
            for field_name, schema in wanted.items():
                await self._client.create_payload_index(
                    self._collection, field_name, field_schema=schema, wait=True
                )

    async def _ensure_collection(
        self,
        name: str,
        vectors: models.VectorParams | dict[str, models.VectorParams],
        sparse: dict[str, models.SparseVectorParams] | None = None,
    ) -> bool:
        """Create the collection if missing, else check its dense vectors; whether it has the
        ``sparse`` vectors asked for (a collection from before hybrid search has none)."""
        with _client_errors(self._where, f"creating collection {name}"):
            if not await self._client.collection_exists(name):
                try:
                    await self._client.create_collection(
                        name, vectors_config=vectors, sparse_vectors_config=sparse
                    )
                    return sparse is not None
                except Exception:
                    # Another worker may have created it between the check and the create.
                    if not await self._client.collection_exists(name):
                        raise
        if not isinstance(vectors, models.VectorParams):
            return False
        with _client_errors(self._where, f"reading collection {name}"):
            info = await self._client.get_collection(name)
        stored = info.config.params.vectors
        if not isinstance(stored, models.VectorParams) or (
            stored.size,
            stored.distance,
        ) != (vectors.size, vectors.distance):
            raise ProjectionError(
                f"Qdrant at {self._where}: collection {name} holds {stored}, but this store "
                f"needs {vectors.size}-d {vectors.distance.value} vectors (was the embedder "
                "changed without rebuilding the projection?)"
            )
        if sparse is None:
            return False
        stored_sparse = info.config.params.sparse_vectors or {}
        return all(
            name in stored_sparse and stored_sparse[name].modifier == params.modifier
            for name, params in sparse.items()
        )

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        changes = episodic_changes(events, self._dim, archive=self._archive)
        async with self._write_lock:
            self._check_open()
            if changes.erased:
                agents = models.FieldCondition(
                    key="agent_id", match=models.MatchAny(any=sorted(changes.erased))
                )
                with _client_errors(self._where, f"erasing {len(changes.erased)} agents"):
                    await self._client.delete(
                        self._collection,
                        points_selector=models.FilterSelector(filter=models.Filter(must=[agents])),
                        wait=True,
                    )
            lexical, vectors = self._lexical, changes.vectors
            points = [_point(m, vectors[k], lexical) for k, m in changes.upserts.items()]
            points += [
                _point(m, vectors[k], lexical, active=False) for k, m in changes.archived.items()
            ]
            if points:
                with _client_errors(self._where, f"upserting {len(points)} memories"):
                    for start in range(0, len(points), UPSERT_CHUNK):
                        await self._client.upsert(
                            self._collection, points=points[start : start + UPSERT_CHUNK], wait=True
                        )
            if changes.retired:
                gone = forgotten_filter(changes.retired, changes.bounds)
                with _client_errors(self._where, f"archiving {len(changes.retired)} memories"):
                    await self._client.set_payload(
                        self._collection, payload={"archived": 1}, points=gone, wait=True
                    )
            if changes.deletes:
                gone = forgotten_filter(changes.deletes, changes.bounds)
                with _client_errors(self._where, f"deleting {len(changes.deletes)} memories"):
                    await self._client.delete(
                        self._collection,
                        points_selector=models.FilterSelector(filter=gone),
                        wait=True,
                    )
            if changes.positions:
                await self._advance_positions(changes.positions)

    async def advance(self, positions: Mapping[tuple[str, int], int]) -> None:
        if not positions:
            return
        async with self._write_lock:
            self._check_open()
            await self._advance_positions(dict(positions))

    async def sync(self) -> None:
        """Nothing to do: every write waits for the server (``wait=True``)."""

    async def _advance_positions(self, batch: Positions) -> None:
        """Read the stored positions of the batch's partitions before writing, rather than
        trusting a cache: after a rebalance another worker may have moved them forward."""
        with _client_errors(self._where, "advancing the applied positions"):
            records = await self._client.retrieve(
                self._positions_collection,
                ids=[_position_id(topic, partition) for topic, partition in batch],
                with_payload=True,
            )
            current = {
                (str(r.payload["topic"]), int(r.payload["partition"])): int(r.payload["offset"])
                for r in records
                if r.payload is not None
            }
            merged = advance_positions(current, batch)
            if merged is None:
                return
            moved = [
                models.PointStruct(
                    id=_position_id(topic, partition),
                    vector={},
                    payload={"topic": topic, "partition": partition, "offset": offset},
                )
                for (topic, partition), offset in merged.items()
                if current.get((topic, partition)) != offset
            ]
            if moved:
                await self._client.upsert(self._positions_collection, points=moved, wait=True)

    def _filter(self, chosen: Selection) -> models.Filter:
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
        with _client_errors(self._where, f"listing the memories of {agent_id!r}"):
            records, _ = await self._client.scroll(
                self._collection,
                scroll_filter=self._filter(chosen),
                limit=limit,
                order_by=models.OrderBy(key="seq", direction=models.Direction.DESC),
                with_payload=True,
                with_vectors=False,
            )
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
        asked = candidate_query(
            signals,
            self._filter(chosen),
            agent_filter(agent_id, scope),
            tags_field="tags_lc" if self._lexical else "tags",
            lexical=self._lexical,
        )
        with _client_errors(self._where, f"reading the candidates of {agent_id!r}"):
            response = await self._client.query_points(
                self._collection,
                prefetch=asked.prefetch,
                query=asked.query,
                limit=asked.limit,
                with_payload=["memory"],
                with_vectors=False,
            )
        return candidate_memories(response.points, signals)

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
        with _client_errors(self._where, f"searching the memories of {agent_id!r}"):
            if lexical is not None and self._lexical:
                return await self._hybrid_search(chosen, query, lexical, limit)
            response = await self._client.query_points(
                self._collection,
                query=query.tolist(),
                query_filter=self._filter(chosen),
                limit=limit,
                with_payload=True,
                with_vectors=False,
            )
        return [stored_memory(point.payload, point.score) for point in response.points]

    async def _hybrid_search(
        self, chosen: Selection, query: np.ndarray, lexical: SparseQuery, limit: int
    ) -> list[StoredMemory]:
        """As :meth:`EdgeEpisodicMemory._hybrid_search
        <projections.episodic.edge.EdgeEpisodicMemory._hybrid_search>`: batches of ids and
        scores (deepened while a tie straddles the cut), the fusion, one ``retrieve`` of the
        fused best."""
        flt = self._filter(chosen)
        sparse = models.SparseVector(indices=list(lexical.indices), values=list(lexical.values))
        idf_corpus = models.IdfCorpusParams(corpus=agent_filter(chosen.agent_id))
        nearest = query.tolist() if np.any(query) else None
        if nearest is None and not lexical:
            return []
        depth = fetch_depth(limit)
        while True:
            requests = []
            if lexical:
                requests.append(
                    models.QueryRequest(
                        query=sparse,
                        using=LEXICAL_VECTOR,
                        filter=flt,
                        limit=depth,
                        params=models.SearchParams(idf=idf_corpus),
                        with_payload=False,
                        with_vector=False,
                    )
                )
            if nearest is not None:
                requests.append(
                    models.QueryRequest(
                        query=nearest,
                        filter=flt,
                        limit=depth,
                        with_payload=False,
                        with_vector=False,
                    )
                )
            batch = await self._client.query_batch_points(self._collection, requests=requests)
            found = iter(batch)
            lexical_hits = (
                [(str(p.id), float(p.score)) for p in next(found).points] if lexical else []
            )
            dense_hits = (
                [(str(p.id), float(p.score)) for p in next(found).points] if nearest else []
            )
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
        records = await self._client.retrieve(
            self._collection,
            ids=[hit.memory_id for hit in hits],
            with_payload=True,
            with_vectors=[""] if vectors else False,
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
        self._check_open()
        with _client_errors(self._where, "counting memories"):
            result = await self._client.count(
                self._collection,
                count_filter=ACTIVE if agent_id is None else agent_filter(agent_id),
                exact=True,
            )
        return result.count

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        self._check_open()
        with _client_errors(self._where, "reading an applied position"):
            records = await self._client.retrieve(
                self._positions_collection, ids=[_position_id(topic, partition)], with_payload=True
            )
        if not records or records[0].payload is None:
            return None
        return int(records[0].payload["offset"])

    async def ping(self) -> None:
        self._check_open()
        with _client_errors(self._where, "checking the collection"):
            exists = await self._client.collection_exists(self._collection)
        if not exists:
            raise ProjectionError(f"Qdrant at {self._where}: collection {self._collection} is gone")

    async def close(self) -> None:
        async with self._write_lock:
            if self._closed:
                return
            self._closed = True
            with _client_errors(self._where, "closing the client"):
                await self._client.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ProjectionError(f"Qdrant at {self._where}: the store is closed")


async def stored_dim(
    location: str | Path, collection: str, *, api_key: str | None = None
) -> int | None:
    """The size of the dense vectors of ``collection``; None if it does not exist. A version
    made by a reprocess may hold another embedder's."""
    client, _ = _client_for(location, api_key, 10)
    try:
        with _client_errors(str(location), f"reading collection {collection}"):
            if not await client.collection_exists(collection):
                return None
            info = await client.get_collection(collection)
    finally:
        await client.close()
    vectors = info.config.params.vectors
    if not isinstance(vectors, models.VectorParams):
        raise ProjectionError(
            f"Qdrant at {location}: collection {collection} holds {vectors}, not one dense vector"
        )
    return vectors.size


async def drop_collection(
    location: str | Path, collection: str, *, api_key: str | None = None
) -> None:
    """Delete a collection and its applied positions (a retired projection version), whatever
    its vector size: a version made by a reprocess may have another embedder's."""
    client, _ = _client_for(location, api_key, 10)
    try:
        with _client_errors(str(location), f"deleting collection {collection}"):
            for name in (collection, collection + POSITIONS_SUFFIX):
                if await client.collection_exists(name):
                    await client.delete_collection(name)
    finally:
        await client.close()
