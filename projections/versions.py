"""Projection versions: which Redis keyspace and Qdrant collection the running processes use.

A rebuild never writes into the projections being served. It builds a new *version* (Redis
namespace ``{base}.{name}``, Qdrant collection ``{collection}_{name}``, so an Edge shard
directory of that name), and one ``SET`` of the pointer ``{base}#projection:active`` then
switches every process to it: both stores are named by the version, so no reader can see the
working memory of one version with the episodic memory of another.

Processes that write projections (workers, the episodic projector) and processes that read
them (query services) register here with a heartbeat, saying which version they use. The
heartbeats let a switch wait for writers to pause and let a drop wait until nobody uses the old
version any more.

This module owns the whole switch protocol, so it can be read in one place:

* the *pointer* (:meth:`ProjectionVersions.active`, :meth:`ProjectionVersions.activate`);
* the *write lock* (:class:`WriteLock`): one per process, held by every write batch (a
  worker's batch, the episodic projector's fetch), so a pause never falls inside a batch;
* the *fence*: a switch (:func:`fenced`, run by :mod:`streams.rebuild.replay`) raises it with a
  TTL and waits until every writer says it paused for it; a writer that sees it
  (:func:`obey_fence`, run by :mod:`streams.rebuild.projection_switch`) takes its write lock,
  which waits for the batch in flight, heartbeats that it paused, and lets the next batch
  through only once the fence is lowered and it has followed the pointer. A fence that is
  never lowered (the switch died) expires with its TTL, and a writer gives up a pause after
  ``max_pause`` anyway: a dead switch must not stop the writers for good.

Without a pointer the active version is the unversioned layout (namespace ``{base}``,
collection ``{collection}``), so a store built before versions existed keeps working.

A version built by ``engram reprocess`` has a *derived log* of its own (:class:`DerivedLog`):
the topics its derived events go to, the consumer group whose commits say how far the raw
topics are derived into them, and the configuration that derived them. Workers serving that
version must write there, under that group, with that configuration
(:mod:`streams.rebuild.projection_switch`). Other versions follow the live derived log.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from projections.cancellation import LOOP_END_WITHIN_S, cancel_and_wait
from projections.interfaces import EpisodicMemoryStore, ProjectionError, WorkingMemoryStore
from projections.owned_keys import IF_MINE
from schemas.errors import EngramError

__all__ = [
    "DerivedLog",
    "Member",
    "OpenStores",
    "ProjectionStores",
    "ProjectionVersion",
    "ProjectionVersions",
    "Role",
    "SwitchError",
    "VersionInfo",
    "VersionState",
    "WriteLock",
    "building",
    "fenced",
    "obey_fence",
    "wait_until_unused",
]

log = logging.getLogger("engram.projection_versions")

_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
"""Valid in a Redis namespace, a Qdrant collection name and a directory name alike."""

VersionState = Literal["building", "ready", "active", "retired"]
Role = Literal["worker", "projector", "service", "replay", "reprocess"]
_NOT_WRITERS: frozenset[str] = frozenset({"service", "replay", "reprocess"})
"""Roles a switch does not wait for: a query service only reads, and a replay or reprocess
writes the version it builds, never the active one."""


@dataclass(frozen=True)
class ProjectionVersion:
    """Where one version of the projections lives. ``name`` None is the unversioned layout."""

    name: str | None
    redis_namespace: str
    qdrant_collection: str

    @property
    def label(self) -> str:
        return self.name or "(unversioned)"


ProjectionStores = tuple[WorkingMemoryStore, EpisodicMemoryStore | None]
"""The stores of one projection version as a process opens them: its working memory, and its
episodic memory unless the process needs none there (a worker whose episodic memory a
projector writes, an inactive version whose episodic store was never made)."""

OpenStores = Callable[[ProjectionVersion], Awaitable[ProjectionStores]]
"""Opens the stores of a projection version (the caller closes them)."""


@dataclass(frozen=True)
class DerivedLog:
    """The derived log a reprocessed version continues, and what may continue it."""

    topic_prefix: str
    """Prefix of its derived topics: ``{topic_prefix}memory.items`` and so on."""
    group: str
    """The consumer group (Faust app id) of the workers that continue it."""
    config_version: str
    """The configuration version every event of the log carries."""
    embedder: str
    """The embedder's id (part of ``config_version``): what a query must be embedded with."""

    def to_json(self) -> dict[str, str]:
        return {
            "topic_prefix": self.topic_prefix,
            "group": self.group,
            "config_version": self.config_version,
            "embedder": self.embedder,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DerivedLog:
        return cls(
            topic_prefix=str(data["topic_prefix"]),
            group=str(data["group"]),
            config_version=str(data["config_version"]),
            embedder=str(data["embedder"]),
        )


@dataclass(frozen=True)
class VersionInfo:
    version: ProjectionVersion
    state: VersionState
    created_at: float
    note: str
    active: bool
    derived_log: DerivedLog | None = None
    """None: the version applies the live derived log."""


@dataclass(frozen=True)
class Member:
    """A running process as its last heartbeat described it."""

    member_id: str
    role: Role
    version: str | None
    paused_for: str | None
    holding: tuple[str | None, ...] = ()
    """Older versions whose stores it has not closed yet (requests still running on them)."""

    def uses(self, name: str | None) -> bool:
        return self.version == name or name in self.holding


class ProjectionVersions:
    """The registry of versions, the active pointer, the fence and the members, in Redis.

    Owns ``client`` (closed by :meth:`close`). Every call raises :class:`ProjectionError` when
    Redis cannot be reached, like the stores do.
    """

    def __init__(self, client: aioredis.Redis, base_namespace: str, base_collection: str) -> None:
        self._client = client
        self._base = base_namespace
        self._collection = base_collection
        self._key = f"{base_namespace}#projection"

    @classmethod
    def from_url(cls, url: str, base_namespace: str, base_collection: str) -> ProjectionVersions:
        client = aioredis.Redis.from_url(url, socket_timeout=10.0, socket_connect_timeout=5.0)
        return cls(client, base_namespace, base_collection)

    def version(self, name: str | None) -> ProjectionVersion:
        """The layout of version ``name``; raises ValueError for a name no store accepts."""
        if name is None:
            return ProjectionVersion(None, self._base, self._collection)
        if not _NAME.fullmatch(name):
            raise ValueError(f"a version name is 1-40 lowercase letters, digits and '-': {name!r}")
        return ProjectionVersion(name, f"{self._base}.{name}", f"{self._collection}_{name}")

    async def active(self) -> ProjectionVersion:
        name = await self._call(self._client.get(f"{self._key}:active"))
        return self.version(None if name is None else name.decode())

    async def mark_embedded(self, data_dir: str) -> None:
        """This registry is an embedded stack's (``engram up`` in ``data_dir``), whose Redis
        starts empty at every run: no version outlives the run."""
        await self._call(self._client.set(f"{self._key}:embedded", data_dir))

    async def embedded(self) -> str | None:
        """The data directory of the embedded stack whose registry this is, if it is one."""
        found = await self._call(self._client.get(f"{self._key}:embedded"))
        return None if found is None else bytes(found).decode()

    async def create(self, name: str | None = None, *, note: str = "") -> ProjectionVersion:
        """Register a new version in state ``building``; without a name, the next ``vN``.

        Refuses a name that exists: building into a version that is served would mix two
        histories in one store.
        """
        if name is None:
            number = await self._call(self._client.incr(f"{self._key}:next"))
            name = f"v{number}"
        version = self.version(name)
        meta = orjson.dumps({"state": "building", "created_at": time.time(), "note": note})
        created = await self._call(self._client.hsetnx(f"{self._key}:versions", name, meta))
        if not created:
            raise ValueError(f"projection version {name!r} exists already")
        return version

    async def derived_log(self, name: str | None) -> DerivedLog | None:
        """The derived log of its own that version ``name`` continues; None for the live one
        (the unversioned layout, a replayed version, a name not registered)."""
        if name is None:
            return None
        raw = await self._call(self._client.hget(f"{self._key}:versions", name))
        if raw is None:
            return None
        data = orjson.loads(raw).get("derived_log")
        return None if data is None else DerivedLog.from_json(data)

    async def live_embedder(self, claim: str | None = None) -> str | None:
        """The embedder the live derived log is embedded with, as the first process to derive
        it recorded (``claim``: this process derives it with that embedder, recorded if none
        is). A reprocessed version's log records its own (:class:`DerivedLog`); the live one
        had none, so workers restarted with another embedder of the same dimension wrote a
        second vector space into the same stores without a word."""
        key = f"{self._key}:live-embedder"
        if claim is not None:
            await self._call(self._client.set(key, claim, nx=True))
        value = await self._call(self._client.get(key))
        return None if value is None else value.decode()

    async def set_state(self, name: str, state: VersionState) -> None:
        await self._update(name, {"state": state})

    async def set_derived_log(self, name: str, derived_log: DerivedLog) -> None:
        """Record the derived log of its own that version ``name`` continues."""
        await self._update(name, {"derived_log": derived_log.to_json()})

    async def _update(self, name: str, fields: dict[str, Any]) -> None:
        raw = await self._call(self._client.hget(f"{self._key}:versions", name))
        if raw is None:
            raise ValueError(f"no projection version {name!r}")
        meta = orjson.loads(raw) | fields
        await self._call(self._client.hset(f"{self._key}:versions", name, orjson.dumps(meta)))

    async def versions(self) -> list[VersionInfo]:
        """Every registered version, oldest first, and the unversioned layout if it is active."""
        raw = await self._call(self._client.hgetall(f"{self._key}:versions"))
        active = (await self.active()).name
        infos = []
        for name, value in raw.items():
            meta = orjson.loads(value)
            infos.append(
                VersionInfo(
                    version=self.version(name.decode()),
                    state=meta.get("state", "ready"),
                    created_at=float(meta.get("created_at", 0.0)),
                    note=str(meta.get("note", "")),
                    active=name.decode() == active,
                    derived_log=(
                        DerivedLog.from_json(meta["derived_log"]) if "derived_log" in meta else None
                    ),
                )
            )
        infos.sort(key=lambda i: i.created_at)
        if active is None:
            infos.insert(0, VersionInfo(self.version(None), "active", 0.0, "", True))
        return infos

    async def activate(self, name: str | None) -> ProjectionVersion | None:
        """Point every process at ``name``; returns the version that was active before.

        One ``SET``: the switch is atomic for every reader of the pointer.
        """
        previous = await self.active()
        if name is not None:
            await self.set_state(name, "active")
            await self._call(self._client.set(f"{self._key}:active", name))
        else:
            await self._call(self._client.delete(f"{self._key}:active"))
        if previous.name is not None and previous.name != name:
            await self.set_state(previous.name, "retired")
        return None if previous.name == name else previous

    async def forget(self, name: str) -> None:
        """Remove a version from the registry (its data is dropped by the caller)."""
        if (await self.active()).name == name:
            raise ValueError(f"projection version {name!r} is active; switch away from it first")
        await self._call(self._client.hdel(f"{self._key}:versions", name))

    # The fence: writers pause while a switch reads the last of the log.

    async def raise_fence(self, target: str, ttl: float) -> None:
        """Ask every writer to pause; the TTL bounds the pause if the switch dies meanwhile.
        One fence at a time: a second switch overwrote the first one's fence, the writers
        paused for the first went on writing into the version it was leaving, and the first
        one's end deleted the second's fence, which then waited out its timeout."""
        key = f"{self._key}:fence"
        if not await self._call(self._client.set(key, target, px=int(ttl * 1000), nx=True)):
            holder = await self.fence()
            raise SwitchError(
                f"another switch, to version {holder or '(unversioned)'}, is under way (its "
                "writers are paused)"
            )

    async def extend_fence(self, target: str, ttl: float) -> bool:
        """Give this switch's fence ``ttl`` more from now; False if it is no longer there."""
        return bool(await self._call(self._fence_script(target, int(ttl * 1000))))

    async def lower_fence(self, target: str) -> None:
        """Lower this switch's fence, never another's."""
        await self._call(self._fence_script(target, 0))

    def _fence_script(self, target: str, ttl_ms: int) -> Awaitable[Any]:
        # Lowered (a TTL of 0) or extended only if it is still the one this switch raised.
        return self._client.eval(IF_MINE, 1, f"{self._key}:fence", target, ttl_ms)

    async def fence(self) -> str | None:
        value = await self._call(self._client.get(f"{self._key}:fence"))
        return None if value is None else value.decode()

    # Members: who runs, in which role, on which version, paused or not.

    async def heartbeat(
        self,
        member_id: str,
        role: Role,
        version: ProjectionVersion,
        *,
        paused_for: str | None = None,
        holding: Sequence[str] = (),
        ttl: float = 10.0,
    ) -> None:
        """``holding`` names older versions still open ("" the unversioned one)."""
        key = f"{self._key}:member:{member_id}"
        value = orjson.dumps(
            {
                "role": role,
                "version": version.name,
                "paused_for": paused_for,
                "holding": list(holding),
            }
        )
        await self._call(self._client.set(key, value, px=int(ttl * 1000)))

    async def leave(self, member_id: str) -> None:
        await self._call(self._client.delete(f"{self._key}:member:{member_id}"))

    async def members(self) -> list[Member]:
        prefix = f"{self._key}:member:"
        try:
            keys = [key async for key in self._client.scan_iter(match=f"{prefix}*", count=500)]
        except RedisError as exc:
            raise ProjectionError(f"redis (projection versions): {exc}") from exc
        if not keys:
            return []
        values = await self._call(self._client.mget(keys))
        out = []
        for key, value in zip(keys, values, strict=True):
            if value is None:  # expired between SCAN and MGET
                continue
            meta = orjson.loads(value)
            out.append(
                Member(
                    member_id=key.decode()[len(prefix) :],
                    role=meta["role"],
                    version=meta.get("version"),
                    paused_for=meta.get("paused_for"),
                    holding=tuple(h or None for h in meta.get("holding", ())),
                )
            )
        return out

    async def close(self) -> None:
        await self._client.aclose()

    @staticmethod
    async def _call(awaitable: Awaitable[Any]) -> Any:
        try:
            return await awaitable
        except RedisError as exc:
            raise ProjectionError(f"redis (projection versions): {exc}") from exc


class SwitchError(EngramError, RuntimeError):
    """The new version was built but could not be switched to; the message says why."""


class WriteLock:
    """The lock of one process's projection writes. Every write batch holds it from start to
    end (:meth:`batch`); a fence pauses the process's writers by taking it (:meth:`paused`),
    which waits for the batch in flight and lets no other start. One per process, shared by
    all its writers, so one fence pauses them all."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    def batch(self) -> asyncio.Lock:
        """Hold for one write batch: ``async with lock.batch(): ...``."""
        return self._lock

    def paused(self) -> asyncio.Lock:
        """Hold while the writers are paused: ``async with lock.paused(): ...``."""
        return self._lock


@asynccontextmanager
async def fenced(
    versions: ProjectionVersions, target: ProjectionVersion, timeout: float
) -> AsyncIterator[None]:
    """Raise the fence for ``target`` and wait until every writer paused for it, then hold it
    while the body runs (the last of the log is applied and the pointer moved); lowered
    whatever happens. ``timeout`` bounds the wait for writers, and is the fence's TTL: a
    switch that dies meanwhile pauses nobody for longer."""
    name = target.name or ""
    try:
        await versions.raise_fence(name, timeout)
    except SwitchError as exc:
        raise SwitchError(
            f"{exc}; version {target.label} is built and can be caught up and switched to "
            f"then (`engram replay --into {target.label}`)"
        ) from None
    try:
        await _wait_for_writers(versions, target, timeout)
        # The wait used part of the fence's life: what the body does needs all of it.
        if not await versions.extend_fence(name, timeout):
            raise SwitchError(
                f"the fence expired while the writers paused; version {target.label} is built "
                f"and can be caught up and switched to later (`engram replay --into "
                f"{target.label}`)"
            )
        yield
    finally:
        await versions.lower_fence(name)


async def _wait_for_writers(
    versions: ProjectionVersions, target: ProjectionVersion, timeout: float
) -> None:
    """Until every writer says it paused for this fence; a writer that is not there stops
    mattering when its heartbeat expires."""
    deadline = time.monotonic() + timeout
    while True:
        members = await versions.members()
        waiting = [
            m for m in members if m.role not in _NOT_WRITERS and m.paused_for != (target.name or "")
        ]
        if not waiting:
            return
        if time.monotonic() > deadline:
            names = ", ".join(f"{m.role} {m.member_id}" for m in waiting)
            raise SwitchError(
                f"these writers did not pause within {timeout:.0f}s: {names}; "
                f"version {target.label} is built and can be caught up and switched to later "
                f"(`engram replay --into {target.label}`)"
            )
        await asyncio.sleep(0.1)


async def obey_fence(
    versions: ProjectionVersions,
    fence: str,
    lock: WriteLock,
    *,
    max_pause: float,
    heartbeat: Callable[[str], Awaitable[None]],
    resume: Callable[[], Awaitable[None]],
) -> None:
    """A writer's side of a fence raised for version ``fence``: take the write lock (the batch
    in flight finishes first), say by ``heartbeat(fence)`` that it paused until the fence is
    lowered, expires, or ``max_pause`` passed, then ``resume`` (follow the pointer) before the
    lock is let go, so the next batch writes to the new version."""
    async with lock.paused():
        log.info("paused writing for the switch to projection version %s", fence or "-")
        started = time.monotonic()
        try:
            while await versions.fence() == fence:
                if time.monotonic() - started > max_pause:
                    log.warning("a fence held for %.0fs; writing again", max_pause)
                    break
                await heartbeat(fence)
                await asyncio.sleep(0.05)
        finally:
            await resume()


@asynccontextmanager
async def building(
    versions: ProjectionVersions,
    role: Role,
    version: ProjectionVersion,
    member_id: str,
    *,
    every: float = 3.0,
    ttl: float = 10.0,
) -> AsyncIterator[None]:
    """Be a member that uses ``version`` while the body builds it, so that ``engram versions
    drop`` waits for the build (:func:`wait_until_unused`) instead of deleting its stores under
    it. A builder that dies stops mattering when its last heartbeat expires (``ttl``)."""
    await versions.heartbeat(member_id, role, version, ttl=ttl)

    async def beat() -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await versions.heartbeat(member_id, role, version, ttl=ttl)
            except ProjectionError as exc:  # Redis away for a moment: the next beat retries
                log.warning("heartbeat of %s %s failed: %s", role, member_id, exc)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        await cancel_and_wait(task, within=LOOP_END_WITHIN_S)
        try:
            await versions.leave(member_id)
        except ProjectionError as exc:  # the heartbeat expires by itself
            log.warning("%s %s could not leave: %s", role, member_id, exc)


async def wait_until_unused(
    versions: ProjectionVersions, version: ProjectionVersion, timeout: float
) -> None:
    """Until no running process uses ``version`` (so its stores can be dropped)."""
    deadline = time.monotonic() + timeout
    while True:
        users = [m for m in await versions.members() if m.uses(version.name)]
        if not users:
            return
        if time.monotonic() > deadline:
            names = ", ".join(f"{m.role} {m.member_id}" for m in users)
            raise SwitchError(f"version {version.label} is still in use by {names}")
        await asyncio.sleep(0.2)
