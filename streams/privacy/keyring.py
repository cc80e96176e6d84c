"""Where each agent's sealing key lives (:mod:`schemas.sealed`), and the record of keys deleted.

Keys are not a projection: nothing rebuilds them from the log, which is the point. So the
keyring lives apart from every projection version (``{ns}#keyring:*`` in Redis, which replays
and ``engram versions drop`` never touch; or a directory) and must be durable: a Redis keyring
needs persistence (AOF) and its own backups. Losing the keyring is forgetting every agent.

Each agent has one current key (made the first time its content is sealed). Forgetting an
agent deletes the keys named and writes a tombstone per deleted key, so a reader can tell a
*forgotten* record (skip it) from one whose key is missing for another reason (a misconfigured
keyring: dead-letter it, the record stays on its topic). The tombstones name agent and key ids
only. A counter (``generation``) moves on every forgetting, so caches know when to look again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from schemas.errors import BackendUnavailableError
from schemas.sealed import AgentKey, new_agent_key

Lookup = AgentKey | Literal["forgotten"] | None
"""A key, ``"forgotten"`` (deleted by ``engram forget-agent``), or None (never known here)."""


class KeyringError(BackendUnavailableError):
    """The keyring cannot be reached or read; the message says where and why."""


class Keyring(Protocol):
    async def current(self, agent_ids: Iterable[str]) -> dict[str, AgentKey]:
        """Each agent's current key, made (once, whoever asks first) if it has none."""

    async def lookup(self, wanted: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Lookup]:
        """The key of each ``(agent_id, key_id)``."""

    async def key_ids(self, agent_id: str) -> list[str]:
        """The agent's live key ids (none if it never had content sealed, or was forgotten)."""

    async def forget(self, agent_id: str, key_ids: Iterable[str]) -> list[str]:
        """Delete those keys of the agent, leave tombstones, move the generation; returns the
        key ids deleted now (none when they were gone already: forgetting is idempotent)."""

    async def generation(self) -> int: ...

    async def close(self) -> None: ...


def _encode(key: AgentKey) -> str:
    return f"{key.key_id}:{key.secret.hex()}"


def _decode(agent_id: str, value: str | bytes) -> AgentKey:
    text = value.decode() if isinstance(value, bytes) else value
    key_id, _, secret = text.partition(":")
    return AgentKey(agent_id, key_id, bytes.fromhex(secret))


class RedisKeyring:
    """``{ns}#keyring:keys`` (agent -> key), ``…:forgotten`` (``agent/key`` -> when),
    ``…:generation``. Every call is one round trip (a pipeline or a script)."""

    _FORGET = """
local deleted = {}
local current = redis.call('HGET', KEYS[1], ARGV[1])
for i = 3, #ARGV do
  if current and string.sub(current, 1, string.len(ARGV[i]) + 1) == ARGV[i] .. ':' then
    redis.call('HDEL', KEYS[1], ARGV[1])
    current = nil
    table.insert(deleted, ARGV[i])
  end
  redis.call('HSET', KEYS[2], ARGV[1] .. '/' .. ARGV[i], ARGV[2])
end
redis.call('INCR', KEYS[3])
return deleted
"""

    def __init__(self, client: aioredis.Redis, namespace: str = "engram") -> None:
        self._client = client
        base = f"{namespace}#keyring"
        self._keys, self._forgotten = f"{base}:keys", f"{base}:forgotten"
        self._generation = f"{base}:generation"
        self._forget_script = client.register_script(self._FORGET)

    @classmethod
    def from_url(cls, url: str, namespace: str = "engram") -> RedisKeyring:
        client = aioredis.Redis.from_url(
            url, decode_responses=True, socket_timeout=10.0, socket_connect_timeout=5.0
        )
        return cls(client, namespace)

    async def current(self, agent_ids: Iterable[str]) -> dict[str, AgentKey]:
        agents = sorted(set(agent_ids))
        if not agents:
            return {}
        async with self._errors("reading agent keys"):
            found = await self._client.hmget(self._keys, agents)
            missing = [a for a, v in zip(agents, found, strict=True) if v is None]
            if missing:
                pipe = self._client.pipeline(transaction=False)
                for agent in missing:
                    pipe.hsetnx(self._keys, agent, _encode(new_agent_key(agent)))
                await pipe.execute()
                # Another process may have won the race for some: read what was kept.
                found = await self._client.hmget(self._keys, agents)
        return {a: _decode(a, v) for a, v in zip(agents, found, strict=True) if v is not None}

    async def lookup(self, wanted: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Lookup]:
        pairs = sorted(set(wanted))
        if not pairs:
            return {}
        async with self._errors("looking up agent keys"):
            pipe = self._client.pipeline(transaction=False)
            pipe.hmget(self._keys, [a for a, _ in pairs])
            pipe.hmget(self._forgotten, [f"{a}/{k}" for a, k in pairs])
            current, forgotten = await pipe.execute()
        out: dict[tuple[str, str], Lookup] = {}
        for (agent, key_id), value, gone in zip(pairs, current, forgotten, strict=True):
            key = _decode(agent, value) if value is not None else None
            if key is not None and key.key_id == key_id:
                out[(agent, key_id)] = key
            else:
                out[(agent, key_id)] = "forgotten" if gone is not None else None
        return out

    async def key_ids(self, agent_id: str) -> list[str]:
        async with self._errors("reading agent keys"):
            value = await self._client.hget(self._keys, agent_id)
        return [] if value is None else [_decode(agent_id, value).key_id]

    async def forget(self, agent_id: str, key_ids: Iterable[str]) -> list[str]:
        ids = sorted(set(key_ids))
        async with self._errors("forgetting agent keys"):
            deleted = await self._forget_script(
                keys=[self._keys, self._forgotten, self._generation],
                args=[agent_id, datetime.now(UTC).isoformat(), *ids],
            )
        return [d.decode() if isinstance(d, bytes) else str(d) for d in deleted]

    async def generation(self) -> int:
        async with self._errors("reading the keyring generation"):
            return int(await self._client.get(self._generation) or 0)

    async def close(self) -> None:
        await self._client.aclose()

    @contextlib.asynccontextmanager
    async def _errors(self, doing: str) -> AsyncIterator[None]:
        try:
            yield
        except (RedisError, OSError) as exc:
            raise KeyringError(f"{doing} in the Redis keyring failed: {exc}") from exc


class FileKeyring:
    """A directory: ``keys/{agent}`` holds ``key_id:hex``, ``forgotten/{agent}`` one key id per
    line, ``generation`` a number. For the dev stack, whose Redis starts empty on every
    ``engram up`` while the log is restored: the keys must outlive it. Several processes share
    it safely: a key file is made by an atomic link (first one wins), and forgetting holds a
    file lock. Files are private to the user (0600)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _ensure_dirs(self) -> None:
        """Made on the first write only: a process that only reads leaves no directory."""
        for sub in ("keys", "forgotten"):
            (self.path / sub).mkdir(parents=True, exist_ok=True, mode=0o700)

    def _file(self, kind: str, agent_id: str) -> Path:
        # Agent ids are [A-Za-z0-9_.:@-]+ (schemas.envelope.AgentId); "." and ".." are not.
        return self.path / kind / f"a-{agent_id}"

    def _read_key(self, agent_id: str) -> AgentKey | None:
        try:
            return _decode(agent_id, self._file("keys", agent_id).read_text().strip())
        except FileNotFoundError:
            return None

    def _forgotten_ids(self, agent_id: str) -> set[str]:
        try:
            return set(self._file("forgotten", agent_id).read_text().split())
        except FileNotFoundError:
            return set()

    def _make(self, agent_id: str) -> AgentKey:
        self._ensure_dirs()
        key = new_agent_key(agent_id)
        target = self._file("keys", agent_id)
        temp = target.with_name(f".{target.name}.{os.getpid()}.{key.key_id}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(_encode(key))
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temp, target)
        except FileExistsError:
            pass
        finally:
            temp.unlink()
        kept = self._read_key(agent_id)
        if kept is None:
            raise KeyringError(f"the key of {agent_id!r} vanished from {self.path} as it was made")
        return kept

    async def current(self, agent_ids: Iterable[str]) -> dict[str, AgentKey]:
        with self._errors("reading agent keys"):
            return {a: self._read_key(a) or self._make(a) for a in set(agent_ids)}

    async def lookup(self, wanted: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Lookup]:
        out: dict[tuple[str, str], Lookup] = {}
        with self._errors("looking up agent keys"):
            for agent, key_id in set(wanted):
                key = self._read_key(agent)
                if key is not None and key.key_id == key_id:
                    out[(agent, key_id)] = key
                else:
                    out[(agent, key_id)] = (
                        "forgotten" if key_id in self._forgotten_ids(agent) else None
                    )
        return out

    async def key_ids(self, agent_id: str) -> list[str]:
        with self._errors("reading agent keys"):
            key = self._read_key(agent_id)
        return [] if key is None else [key.key_id]

    async def forget(self, agent_id: str, key_ids: Iterable[str]) -> list[str]:
        ids = sorted(set(key_ids))
        deleted: list[str] = []
        with self._errors("forgetting agent keys"):
            self._ensure_dirs()
        with self._errors("forgetting agent keys"), self._locked():
            if ids:
                with self._file("forgotten", agent_id).open("a") as out:
                    out.write("".join(f"{k}\n" for k in ids))
                    out.flush()
                    os.fsync(out.fileno())
            key = self._read_key(agent_id)
            if key is not None and key.key_id in ids:
                self._file("keys", agent_id).unlink()
                deleted.append(key.key_id)
            generation = self.path / "generation"
            count = int(generation.read_text() or 0) if generation.exists() else 0
            generation.write_text(str(count + 1))
        return deleted

    async def generation(self) -> int:
        with self._errors("reading the keyring generation"):
            try:
                return int((self.path / "generation").read_text() or 0)
            except FileNotFoundError:
                return 0

    async def close(self) -> None:
        return None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with (self.path / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except (OSError, ValueError) as exc:
            raise KeyringError(f"{doing} in the keyring at {self.path} failed: {exc}") from exc


def keyring_from_setting(setting: str, *, redis_url: str | None, namespace: str) -> Keyring | None:
    """``ENGRAM_KEYRING``: ``redis`` (the projections' Redis, under ``{ns}#keyring``), a
    ``redis://``/``rediss://`` URL, ``file:PATH``, or ``off`` (nothing sealed: forgetting an
    agent then erases its projections only, and its events stay readable in the log)."""
    if setting == "off":
        return None
    if setting == "redis":
        if redis_url is None:
            raise KeyringError("ENGRAM_KEYRING=redis needs ENGRAM_REDIS_URL")
        return RedisKeyring.from_url(redis_url, namespace)
    if setting.startswith(("redis://", "rediss://", "unix://")):
        return RedisKeyring.from_url(setting, namespace)
    if setting.startswith("file:"):
        return FileKeyring(Path(setting.removeprefix("file:")).expanduser())
    raise KeyringError(
        f"ENGRAM_KEYRING={setting!r}: expected 'redis', a redis:// URL, 'file:PATH' or 'off'"
    )


LOCATION_KEY = "{ns}#keyring:location"
"""Where a deployment's keyring is, recorded in its Redis by the dev stack (whose keyring is a
directory), so a process pointed at that Redis without ``ENGRAM_KEYRING`` finds the same one."""


async def open_keyring(
    setting: str | None, *, redis_url: str | None, namespace: str, default_dir: Path
) -> Keyring | None:
    """The keyring every process of one deployment must share: ``ENGRAM_KEYRING`` if set, else
    the location the deployment's Redis records, else that Redis itself; without a Redis (the
    dev stack's own process), a directory under the data dir."""
    if setting is None and redis_url is not None:
        client = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            recorded = await client.get(LOCATION_KEY.format(ns=namespace))
        except (RedisError, OSError) as exc:
            raise KeyringError(f"reading the keyring location from Redis failed: {exc}") from exc
        finally:
            await client.aclose()
        setting = str(recorded) if recorded else "redis"
    if setting is None:
        setting = f"file:{default_dir}"
    return keyring_from_setting(setting, redis_url=redis_url, namespace=namespace)


async def record_location(redis_url: str, namespace: str, setting: str) -> None:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        await client.set(LOCATION_KEY.format(ns=namespace), setting)
    except (RedisError, OSError) as exc:
        raise KeyringError(f"recording the keyring location in Redis failed: {exc}") from exc
    finally:
        await client.aclose()


__all__ = [
    "FileKeyring",
    "Keyring",
    "KeyringError",
    "Lookup",
    "RedisKeyring",
    "keyring_from_setting",
    "open_keyring",
    "record_location",
]
