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
import json
import logging
import os
import socket
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from projections.cancellation import LOOP_END_WITHIN_S, cancel_and_wait
from projections.interfaces import ProjectionError
from projections.owned_keys import IF_MINE
from schemas.errors import EngramError

__all__ = [
    "HOLDER_KEY",
    "LOCATION_KEY",
    "EdgeHolderLease",
    "EdgeLocationError",
    "edge_dir_for",
    "record_edge_dir",
    "recorded_edge_dir",
]

log = logging.getLogger("engram.edge")

LOCATION_KEY = "{ns}#qdrant-edge:path"
"""The absolute directory of the deployment's Edge shards, set by the process that holds them."""


HOLDER_KEY = "{ns}#qdrant-edge:holder"
"""Which process holds the shards now, and where: a lease its holder renews while it runs."""

HOLDER_TTL_S = 15.0
"""How long a holder that died keeps its lease: a new holder elsewhere waits that long."""


class EdgeLocationError(EngramError, ValueError):
    """This process is configured with another Edge directory than the deployment's."""


class EdgeHolderLease:
    """This process holds the deployment's Edge shards, said in Redis under a lease it renews.

    A second process that would hold them in another directory while the first runs is
    refused: it served an empty episodic memory as ready, and took the recorded location over,
    so that replays built where the running holder never looks. The same directory again is a
    restart (Edge's own lock refuses a second opener while the first lives), and a holder that
    died lets go when its lease ends (:data:`HOLDER_TTL_S`)."""

    def __init__(self, client: aioredis.Redis, key: str, value: str, ttl: float) -> None:
        self._client, self._key, self._value, self._ttl = client, key, value, ttl
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def take(
        cls, redis_url: str, namespace: str, path: Path, *, ttl: float = HOLDER_TTL_S
    ) -> EdgeHolderLease:
        directory = str(await asyncio.to_thread(path.resolve))
        holder = f"{socket.gethostname()}:{os.getpid()}"
        value = json.dumps({"holder": holder, "dir": directory})
        client = aioredis.Redis.from_url(redis_url, socket_timeout=10.0, socket_connect_timeout=5.0)
        lease = cls(client, HOLDER_KEY.format(ns=namespace), value, ttl)
        try:
            await lease._acquire(namespace, directory)
        except BaseException:
            await client.aclose()
            raise
        lease._task = asyncio.create_task(lease._renew(), name="edge-holder-lease")
        return lease

    async def _acquire(self, namespace: str, directory: str) -> None:
        ttl_ms = int(self._ttl * 1000)
        try:
            if await self._client.set(self._key, self._value, nx=True, px=ttl_ms):
                return
            current = await self._client.get(self._key)
            other = _holding(current)
            if other is not None and other.get("dir") != directory:
                raise EdgeLocationError(
                    f"the Qdrant Edge shards of {namespace} are held at {other.get('dir')} by "
                    f"{other.get('holder')}, which runs: Qdrant Edge lives inside one process, "
                    f"and this one would hold shards of its own at {directory}, which no "
                    "other process reads or writes. Give several processes a Qdrant server "
                    "(ENGRAM_QDRANT_URL), run workers with ENGRAM_EPISODIC_WRITER=projector, "
                    f"or stop that process first (one that died lets go within {self._ttl:g} s)"
                )
            # The same directory (a restart before the old lease ran out), or a lease gone.
            await self._client.set(self._key, self._value, px=ttl_ms)
        except (RedisError, OSError) as exc:
            raise ProjectionError(f"taking the Qdrant Edge holder lease failed: {exc}") from exc

    async def _renew(self) -> None:
        ttl_ms = int(self._ttl * 1000)
        warned = False
        while True:
            await asyncio.sleep(self._ttl / 3)
            try:
                held = await self._client.eval(IF_MINE, 1, self._key, self._value, ttl_ms)
                # Run out (Redis was away longer than the lease): taken back if still free.
                held = held or await self._client.set(self._key, self._value, nx=True, px=ttl_ms)
            except (RedisError, OSError) as exc:  # Redis away a moment: the next turn retries
                log.warning("renewing the Qdrant Edge holder lease failed: %s", exc)
                continue
            if not held and not warned:
                log.warning("the Qdrant Edge holder lease is held by another process now")
            warned = not held

    async def release(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task, within=LOOP_END_WITHIN_S)
        try:
            await self._client.eval(IF_MINE, 1, self._key, self._value, 0)
        except (RedisError, OSError) as exc:  # it runs out by itself
            log.warning("releasing the Qdrant Edge holder lease failed: %s", exc)
        finally:
            await self._client.aclose()


def _holding(raw: bytes | str | None) -> dict[str, str] | None:
    if raw is None:
        return None
    try:
        found = json.loads(raw)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


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
