"""Settings for an Engram node that shares the session's servers but nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from streams.cli.main import app as cli
from streams.privacy.keyring import RedisKeyring
from streams.privacy.sealing import RecordSealer
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


def cli_env(
    settings: EngramSettings, kafka_bootstrap: str, redis_url: str, **extra: str
) -> dict[str, str]:
    """The ``ENGRAM_*`` variables that point the command line at the same topics and stores
    as a node of ``settings``; ``extra`` adds or overrides (``ENGRAM_EMBEDDER="hashing-64"``)."""
    return {
        "ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ENGRAM_REDIS_URL": redis_url,
        "ENGRAM_TOPIC_PREFIX": settings.topic_prefix,
        "ENGRAM_REDIS_NAMESPACE": settings.redis_namespace,
        "ENGRAM_QDRANT_PATH": str(settings.edge_path()),
        "ENGRAM_PARTITIONS": str(settings.partitions),
        **extra,
    }


async def invoke(args: list[str], env: dict[str, str]) -> Result:
    """``engram ARGS`` in a thread (the command runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, cli, args, env=env)
