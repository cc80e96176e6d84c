"""The projection versions of a cluster, as the commands that build, switch, drop and erase
them reach them: the registry in Redis, and the opening and dropping of one version's stores."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streams.cli import deferred
from streams.cli.console import fail
from streams.settings import EngramSettings

if TYPE_CHECKING:
    from projections.interfaces import EpisodicMemoryStore
    from projections.versions import (
        OpenStores,
        ProjectionStores,
        ProjectionVersion,
        ProjectionVersions,
    )
    from projections.working.redis_store import RedisWorkingMemory


@dataclass(frozen=True)
class VersionStores:
    """The broker, Redis, registry of versions, and openers of a version's stores and of its
    dropping."""

    bootstrap: str
    redis_url: str
    versions: ProjectionVersions
    open_stores: OpenStores
    """Open a version's stores to build or serve it: with the configured embedder's vector size
    (another size in an existing episodic store fails)."""
    open_existing: OpenStores
    """Open a version's stores as they are, to change them without embedding (erase an agent):
    its episodic store with the vector size it holds, which a reprocess with another embedder
    made its own, and none if it was never made (an empty Edge shard costs ~143 MB)."""
    drop: Callable[[ProjectionVersion], Awaitable[None]]
    """Delete a version's Redis keys and Qdrant collection, and forget it."""


def version_stores(settings: EngramSettings) -> VersionStores:
    """From configuration; a one-line error if the cluster is not configured."""
    if not settings.kafka_bootstrap or not settings.redis_url:
        fail("set ENGRAM_KAFKA_BOOTSTRAP and ENGRAM_REDIS_URL (engram up prints both)")
    bootstrap, redis_url = settings.kafka_bootstrap, settings.redis_url
    dim = deferred.embedding.embedder_dim(settings.embedder)
    api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    versions = deferred.projection_versions.ProjectionVersions.from_url(
        redis_url, settings.redis_namespace, settings.qdrant_collection
    )

    located: list[Path] = []

    async def edge_dir() -> Path | None:
        """Where the versions' Qdrant Edge shards are (None: on a Qdrant server): where the
        process holding them recorded (:mod:`projections.episodic.edge_location`)."""
        if settings.qdrant_url:
            return None
        if not located:
            location = deferred.edge_location
            recorded = await location.recorded_edge_dir(redis_url, settings.redis_namespace)
            located.append(
                location.edge_dir_for(settings.qdrant_path, recorded, settings.edge_path())
            )
        return located[0]

    def working_of(version: ProjectionVersion) -> RedisWorkingMemory:
        return deferred.redis_store.RedisWorkingMemory.from_url(redis_url, version.redis_namespace)

    async def episodic_of(path: Path | None, collection: str, size: int) -> EpisodicMemoryStore:
        return await deferred.episodic_factory.open_episodic_store(
            qdrant_url=settings.qdrant_url,
            qdrant_path=path,
            collection=collection,
            dim=size,
            api_key=api_key,
            archive=settings.archive,
            optimize_every=settings.edge_optimize_every,
            decoded_memories=settings.edge_decoded_memories,
            edge_vectors=settings.edge_vectors,
            sync_every=settings.edge_sync_seconds,
        )

    async def open_stores(version: ProjectionVersion) -> ProjectionStores:
        working = working_of(version)
        return working, await episodic_of(await edge_dir(), version.qdrant_collection, dim)

    async def open_existing(version: ProjectionVersion) -> ProjectionStores:
        factory = deferred.episodic_factory
        qdrant_path, collection = await edge_dir(), version.qdrant_collection
        stored = await factory.stored_episodic_dim(
            qdrant_url=settings.qdrant_url,
            qdrant_path=qdrant_path,
            collection=collection,
            api_key=api_key,
        )
        if stored is None:
            return working_of(version), None
        return working_of(version), await episodic_of(qdrant_path, collection, stored)

    async def drop(version: ProjectionVersion) -> None:
        working = working_of(version)
        try:
            await working.clear()
        finally:
            await working.close()
        await deferred.episodic_factory.drop_episodic_store(
            qdrant_url=settings.qdrant_url,
            qdrant_path=await edge_dir(),
            collection=version.qdrant_collection,
            api_key=api_key,
        )
        if version.name is not None:
            await versions.forget(version.name)

    return VersionStores(bootstrap, redis_url, versions, open_stores, open_existing, drop)
