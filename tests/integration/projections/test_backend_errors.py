"""A backend that cannot be reached comes out of every projection adapter as Engram's
:class:`BackendUnavailableError`, raised from the client library's own exception: callers (the
retrieval engine, the HTTP service, the CLI, the worker's retry loop) catch Engram's names only,
and the library's error stays readable as ``__cause__``.

Real client libraries against a real closed port (or a shard path that cannot be created), no
doubles: what is checked is what the library raises today, translated at the boundary.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from qdrant_client.http.exceptions import ApiException
from redis.exceptions import ConnectionError as RedisConnectionError

from processors.embedding import HashingEmbedder
from projections.episodic.edge import EdgeEpisodicMemory
from projections.episodic.qdrant_server import QdrantServerEpisodicMemory
from projections.interfaces import ProjectionError
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.models import RetrievalRequest
from projections.versions import ProjectionVersions
from projections.working.redis_store import RedisWorkingMemory
from schemas.errors import BackendUnavailableError, EngramError

pytestmark = pytest.mark.integration

DIM = HashingEmbedder().dim


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def cause_chain(error: BaseException) -> list[BaseException]:
    chain = []
    cause = error.__cause__
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__
    return chain


async def test_redis_working_memory_on_a_closed_port() -> None:
    port = closed_port()
    store = RedisWorkingMemory.from_url(f"redis://127.0.0.1:{port}/0", connect_timeout=1.0)
    try:
        with pytest.raises(BackendUnavailableError, match=rf"127\.0\.0\.1:{port}") as raised:
            await store.ping()
    finally:
        await store.close()
    assert isinstance(raised.value, ProjectionError)
    assert isinstance(raised.value, EngramError)
    assert isinstance(raised.value.__cause__, RedisConnectionError)


async def test_the_projection_version_registry_on_a_closed_port() -> None:
    port = closed_port()
    versions = ProjectionVersions.from_url(f"redis://127.0.0.1:{port}/0", "engram", "episodic")
    try:
        with pytest.raises(BackendUnavailableError, match="projection versions") as raised:
            await versions.active()
    finally:
        await versions.close()
    assert isinstance(raised.value.__cause__, RedisConnectionError)


async def test_a_qdrant_server_on_a_closed_port() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(BackendUnavailableError, match=rf"Qdrant at {url}") as raised:
        await QdrantServerEpisodicMemory.open(url, dim=DIM, request_timeout=2)
    assert isinstance(raised.value.__cause__, ApiException)


def test_a_qdrant_edge_shard_that_cannot_be_created(tmp_path: Path) -> None:
    """Edge raises a bare ``Exception``; the adapter names the shard and keeps it as cause."""
    (tmp_path / "shard").write_text("a file where the shard directory should be")
    with pytest.raises(BackendUnavailableError, match="Qdrant Edge: opening the shard") as raised:
        EdgeEpisodicMemory.open(tmp_path, DIM)
    assert raised.value.__cause__ is not None


async def test_the_retrieval_engine_passes_the_mapped_error_on() -> None:
    """What the HTTP service turns into a 503: Engram's error, the redis one under it."""
    port = closed_port()
    working = RedisWorkingMemory.from_url(f"redis://127.0.0.1:{port}/0", connect_timeout=1.0)
    episodic = await QdrantServerEpisodicMemory.open(":memory:", dim=DIM)
    engine = RetrievalEngine(working, episodic, HashingEmbedder())
    try:
        with pytest.raises(BackendUnavailableError, match="working memory") as raised:
            await engine.retrieve("H001", RetrievalRequest())
    finally:
        await working.close()
        await episodic.close()
    assert any(isinstance(c, RedisConnectionError) for c in cause_chain(raised.value))
