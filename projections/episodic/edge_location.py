"""Where a deployment's Qdrant Edge shards are, recorded in its Redis.

Edge runs inside one process, and that process (``engram up``, or the one cluster role that
serves or writes episodic memory) holds every projection version's shard under one directory.
Other processes of the deployment (``engram replay``, ``reprocess``, ``versions drop``,
``forget``) build, erase and drop versions' shards in that directory while it runs, and a
version built anywhere else is served empty: the holder opens the directory it knows. The
holder decides where the shards are (``engram up`` under its own stack directory, a cluster
role at ``ENGRAM_QDRANT_PATH``), so it records the directory in the deployment's Redis, as the
dev stack does its keyring's location, and a process pointed at that Redis takes it from there.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from projections.interfaces import ProjectionError
from schemas.errors import EngramError

__all__ = [
    "LOCATION_KEY",
    "EdgeLocationError",
    "edge_dir_for",
    "record_edge_dir",
    "recorded_edge_dir",
]

log = logging.getLogger("engram.edge")

LOCATION_KEY = "{ns}#qdrant-edge:path"
"""The absolute directory of the deployment's Edge shards, set by the process that holds them."""


class EdgeLocationError(EngramError, ValueError):
    """This process is configured with another Edge directory than the deployment's."""


async def record_edge_dir(redis_url: str, namespace: str, path: Path) -> None:
    """Say where the shards are; called by the process that holds them, each time it starts."""
    directory = await asyncio.to_thread(path.resolve)
    client = aioredis.Redis.from_url(redis_url, socket_timeout=10.0, socket_connect_timeout=5.0)
    try:
        raw = await client.getset(LOCATION_KEY.format(ns=namespace), str(directory))
        before = raw.decode() if isinstance(raw, bytes) else raw
        if before is not None and before != str(directory):
            # One process of a deployment holds its Edge shards: another directory here is a
            # move, or a second holder (whose versions the first would serve empty).
            log.warning(
                "the Qdrant Edge directory recorded for %s moves from %s to %s: versions "
                "built in the old one are not served from the new",
                namespace,
                before,
                directory,
            )
    except (RedisError, OSError) as exc:
        message = f"recording the Qdrant Edge directory in Redis failed: {exc}"
        raise ProjectionError(message) from exc
    finally:
        await client.aclose()


async def recorded_edge_dir(redis_url: str, namespace: str) -> Path | None:
    """The directory the holder of the shards recorded; None if no holder ever ran."""
    client = aioredis.Redis.from_url(redis_url, socket_timeout=10.0, socket_connect_timeout=5.0)
    try:
        recorded = await client.get(LOCATION_KEY.format(ns=namespace))
    except (RedisError, OSError) as exc:
        message = f"reading the Qdrant Edge directory from Redis failed: {exc}"
        raise ProjectionError(message) from exc
    finally:
        await client.aclose()
    if recorded is None:
        return None
    return Path(recorded.decode() if isinstance(recorded, bytes) else recorded)


def edge_dir_for(configured: Path | None, recorded: Path | None, default: Path) -> Path:
    """The Edge directory of a process that does not hold the shards: the recorded one, else
    the configured one (``ENGRAM_QDRANT_PATH``), else the default under the data directory.

    A configured directory that is not the recorded one fails rather than wins: versions built
    or dropped there would never be the ones the running processes serve.
    """
    if recorded is None:
        return configured or default
    if configured is not None and configured.resolve() != recorded:
        raise EdgeLocationError(
            f"ENGRAM_QDRANT_PATH is {configured}, but this deployment's Qdrant Edge shards are "
            f"at {recorded} (recorded in its Redis by the process that holds them): unset "
            "ENGRAM_QDRANT_PATH, or set it to that directory"
        )
    return recorded
