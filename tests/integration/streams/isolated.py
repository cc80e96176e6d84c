"""Settings for an Engram node that shares the session's servers but nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from streams.keyring import RedisKeyring
from streams.sealing import RecordSealer
from streams.settings import EngramSettings


def isolated_settings(prefix: str, data_dir: Path, **overrides: Any) -> EngramSettings:
    """Own topics (and so consumer group), Redis namespace and Edge shard; an ephemeral port."""
    values: dict[str, Any] = {
        "topic_prefix": prefix,
        "redis_namespace": prefix.rstrip("."),
        "qdrant_path": data_dir / "edge",
        "data_dir": data_dir,
        "partitions": 2,
        "http_port": 0,
        "batch_within": 0.02,
    }
    return EngramSettings(**(values | overrides))


@asynccontextmanager
async def log_sealer(redis_url: str, namespace: str) -> AsyncIterator[RecordSealer]:
    """Opens what the nodes of these settings sealed: their keyring is the default, the
    session's Redis under the settings' namespace."""
    keyring = RedisKeyring.from_url(redis_url, namespace)
    try:
        yield RecordSealer(keyring)
    finally:
        await keyring.close()
