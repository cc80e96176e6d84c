"""Working memory in Redis: the FIFO read model of each agent's last few ``working`` memories.

Layout under ``{namespace}``:

* ``{ns}:wm:ids:{agent_id}``: ZSET of memory ids scored by ``seq``, so newest-first is one
  ``ZREVRANGE`` and FIFO order never depends on arrival order;
* ``{ns}:wm:mem:{agent_id}``: HASH of memory id -> orjson of :meth:`StoredMemory.payload`. One
  hash per agent (rather than one string per memory) lets a Lua script name every key it touches
  in ``KEYS`` and read an agent's memories with one ``HMGET``;
* ``{ns}:wm:facts:{agent_id}``: HASH of the facts the agent learned, superseded ones included
  (:mod:`projections.learned.redis_fields`);
* ``{ns}:applied:{topic}:{partition}``: the highest source offset applied for that partition.

The memories hash also holds fields that are never memory ids (reads follow the ZSET):
``#evicted``, ``#arousal``, the agent's latest surprise reading, which a recording of either
destination carries (see ``_APPLY``), and the rest of what the agent learned (``#l:`` and
``#v:``: procedures, plans, feedback on memories).

The three per-agent keys are everything the namespace holds about an agent, so an
:class:`AgentForgotten` deletes them (in the same script as the other events, with its
position): the agent's working memory is gone, and a later event of the agent starts a new one.
What stays is one field, ``#erased_below``, where the next life's ``seq`` begins (no content; an
agent that recorded nothing leaves nothing), which keeps a recording of the ended life applied
again from coming back (see ``_APPLY``).

Every event is one ``EVALSHA`` that writes the data and advances the applied offset together
(streams/README.md, invariant 3), so a crash between the two cannot happen. A batch is one pipeline
without ``MULTI``: atomicity per event is enough because every event is idempotent on its own.

Redelivery: an event whose source offset is *below* the applied offset is skipped (an
erasure *at* it too, and a recording of the life an erasure ended: see ``_APPLY``), and a
recording whose seq a capacity eviction has passed (``#evicted``, see ``_APPLY``) is skipped
too, so replaying an old prefix cannot resurrect a memory evicted later, whichever source topic
the eviction came from. An event *at* the applied offset is
applied again, because one source event yields several derived events (the memory and the ones
it pushed out) that share its position: after a crash between them, only re-applying that offset
completes it. Those writes are idempotent (ZADD/HSET of the same values, ZREM/HDEL, DEL), and
nothing from that partition was applied after them, so doing them again changes nothing.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any, Self, assert_never

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError

from projections.interfaces import ProjectionError, SourceOffsets, latest_positions
from projections.learned.redis_fields import (
    FACT_PREFIX,
    LEARN_SCRIPT,
    LEARN_SHA,
    VALUE_PREFIX,
    learn_args,
    learned_writes,
)
from projections.memory import StoredMemory, memory_json
from schemas.learned_events import LearnedChange, LearnedEvent
from schemas.memory_events import (
    AgentForgotten,
    ConsolidationCompleted,
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryPut,
    MemoryRecorded,
    MemorySummarised,
    SurpriseReading,
)

__all__ = ["RedisWorkingMemory"]

_APPLY = b"""
local position = KEYS[4]
if position then
  local applied = redis.call('GET', position)
  if applied and (tonumber(applied) > tonumber(ARGV[2])
      or (ARGV[1] == 'a' and tonumber(applied) == tonumber(ARGV[2]))) then
    return 0
  end
end
if ARGV[1] == 'r' or ARGV[1] == 's' then
  local below = redis.call('HGET', KEYS[2], '#erased_below')
  if below and tonumber(ARGV[4]) < tonumber(below) then
    return 0
  end
  if ARGV[1] == 'r' then
    local evicted = redis.call('HGET', KEYS[2], '#evicted')
    if not evicted or tonumber(ARGV[4]) > tonumber(evicted) then
      redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])
      redis.call('HSET', KEYS[2], ARGV[3], ARGV[5])
    end
  end
  if ARGV[6] then
    local at = redis.call('HGET', KEYS[2], '#arousal_seq')
    if not at or tonumber(ARGV[4]) >= tonumber(at) then
      redis.call('HSET', KEYS[2], '#arousal', ARGV[6], '#arousal_seq', ARGV[4])
    end
  end
elseif ARGV[1] == 'f' then
  local seq = redis.call('ZSCORE', KEYS[1], ARGV[3])
  if seq and ARGV[5] ~= '' and tonumber(seq) > tonumber(ARGV[5]) then
    -- A later memory under the same id (its event id used again): this forgot an earlier one.
  else
    if seq and ARGV[4] == 'fifo' then
      local evicted = redis.call('HGET', KEYS[2], '#evicted')
      if not evicted or tonumber(seq) > tonumber(evicted) then
        redis.call('HSET', KEYS[2], '#evicted', seq)
      end
    end
    redis.call('ZREM', KEYS[1], ARGV[3])
    redis.call('HDEL', KEYS[2], ARGV[3])
  end
else
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  if ARGV[3] and ARGV[3] ~= '' and tonumber(ARGV[3]) > 0 then
    redis.call('HSET', KEYS[2], '#erased_below', ARGV[3])
  end
end
if position then
  redis.call('SET', position, ARGV[2])
end
return 1
"""
"""KEYS: ids zset, memories hash, facts hash (an erasure deletes it with the other two: see
:mod:`projections.learned.redis_fields`), applied-offset key (absent for events without a
position).
ARGV: 'r'ecord, 's'urprise only (an episodic recording), 'f'orget a memory or forget the whole
'a'gent, source offset ('' without a position), then for 'r', 's' and 'f' the memory id, for
'r' and 's' its seq and payload ('' for 's') and, if the recording carries one, its surprise
reading; for 'f' whether it was a capacity ('fifo') eviction and the seq forgotten ('' if the
event does not say; a held memory of a higher seq is a later one, kept); for 'a' the agent's
next seq ('' when the erasure does not say).

``#erased_below`` (set by an erasure that names the agent's next seq) is where the agent's
next life begins: a recording below it is one of the life the erasure ended, applied again
(at its topic's applied offset, which re-applies), and is skipped, as is its reading. An
erasure at its own applied offset is skipped, not applied again: it is the one event of its
source record, and applied again after the next life it erased that life, whose recordings,
below the applied offsets of their own topics, were not applied again.

``#arousal`` in the memories hash is the agent's latest surprise reading and ``#arousal_seq``
the seq of the recording that carried it: a reading replaces it only from a seq at least as
high, so an old recording applied again never takes the arousal back, whatever its topic, and
even when ``#evicted`` skips its memory.

``#evicted`` in the memories hash (never a memory id, and never read as one: reads follow the
ZSET) is the highest seq a capacity eviction removed. Working memory is FIFO by seq
(``processors.recording.record`` evicts the oldest), so every seq up to it has left, and a
recording at or below it is an old one applied again: skipped. The applied offset alone cannot
tell, since the eviction may come from a record of another source topic."""

_APPLY_SHA = hashlib.sha1(_APPLY).hexdigest().encode()

_ADVANCE = b"""
local applied = redis.call('GET', KEYS[1])
if not applied or tonumber(applied) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
"""
"""Advance an applied offset that no working-memory event moved (the batch's episodic events,
its consolidation records, and with :meth:`RedisWorkingMemory.advance` records that derived
nothing): the checkpoint then says how far the *log* was applied, which catch-up and
read-your-writes need, not only how far this store had something to write."""

_ADVANCE_SHA = hashlib.sha1(_ADVANCE).hexdigest().encode()

_READ = b"""
local ids = redis.call('ZREVRANGE', KEYS[1], 0, -1)
local out = {}
for first = 1, #ids, 1000 do
  local chunk = {}
  for i = first, math.min(first + 999, #ids) do
    chunk[#chunk + 1] = ids[i]
  end
  local values = redis.call('HMGET', KEYS[2], unpack(chunk))
  for i = 1, #values do
    out[#out + 1] = values[i]
  end
end
return out
"""
"""Payloads newest first, in one call, so a read never sees the ZSET and HASH out of step.
HMGET goes in chunks because Lua's ``unpack`` fails beyond a few thousand values."""

_NAMESPACE = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")
"""No glob characters: :meth:`RedisWorkingMemory.clear` matches ``{namespace}:*``."""

_MAX_PIPELINE = 10_000
"""Events per round trip: bounds the client's buffers when a caller hands over a huge batch."""

_SEND_SLICE = 256
"""Frames per socket write: small enough that Redis starts on a batch before it is all sent."""

LEARNED_SCAN_COUNT = 10_000
"""Fields an ``HSCAN`` of learned fields visits per call: a hash of up to this many is one
round trip (a small hash, held as a listpack, always is)."""


def _resp(*args: bytes) -> bytes:
    """One command in the Redis protocol: an array of bulk strings."""
    return b"*%d\r\n" % len(args) + b"".join([b"$%d\r\n%s\r\n" % (len(a), a) for a in args])


async def _exchange(connection: AbstractConnection, commands: Sequence[bytes]) -> list[Any]:
    """Write the frames and read one reply each; a reply error is returned in its place.

    Frames go out in slices, so Redis runs the first scripts while the rest are being sent.
    Replies are read without a per-read timeout (``math.inf``): an ``asyncio.timeout`` per reply
    was ~40% of the client's CPU per event, so the caller bounds the whole exchange instead.
    """
    for start in range(0, len(commands), _SEND_SLICE):
        await connection.send_packed_command(
            b"".join(commands[start : start + _SEND_SLICE]), check_health=start == 0
        )
    results: list[Any] = []
    for _ in commands:
        try:
            results.append(await connection.read_response(timeout=math.inf))
        except ResponseError as exc:
            results.append(exc)
    return results


class RedisWorkingMemory:
    """:class:`~projections.interfaces.WorkingMemoryStore` on Redis.

    The store takes the client over: :meth:`close` closes it. ``namespace`` prefixes every key,
    so two projection versions, or two tests, share a server without sharing data.
    """

    def __init__(self, client: aioredis.Redis, namespace: str = "engram") -> None:
        if not _NAMESPACE.fullmatch(namespace):
            raise ValueError(f"namespace must match {_NAMESPACE.pattern}: {namespace!r}")
        self._client = client
        self._ns = namespace
        self._read = client.register_script(_READ)

    @classmethod
    def from_url(
        cls,
        url: str,
        namespace: str = "engram",
        *,
        socket_timeout: float = 10.0,
        connect_timeout: float = 5.0,
    ) -> Self:
        """A store with its own client. Timeouts are finite so an outage surfaces as an error."""
        client = aioredis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
        )
        return cls(client, namespace)

    @property
    def namespace(self) -> str:
        return self._ns

    def _ids_key(self, agent_id: str) -> bytes:
        return f"{self._ns}:wm:ids:{agent_id}".encode()

    def _memories_key(self, agent_id: str) -> bytes:
        return f"{self._ns}:wm:mem:{agent_id}".encode()

    def _facts_key(self, agent_id: str) -> bytes:
        return f"{self._ns}:wm:facts:{agent_id}".encode()

    def _applied_key(self, topic: str, partition: int) -> bytes:
        return f"{self._ns}:applied:{topic}:{partition}".encode()

    def _command(self, event: DerivedEvent) -> bytes | None:
        """The EVALSHA that applies one event, framed; None if working memory ignores the event.

        Framed here rather than by redis-py, whose generic packing costs ~15 µs per command,
        more than everything else the client does per event. Every event type is named: a new
        one fails mypy here (``assert_never``), and raises at run time, rather than passing by.
        """
        match event:
            case MemoryRecorded() | MemoryPromoted() | MemorySummarised():
                return self._put(event)
            case MemoryForgotten():
                if event.destination != "working":
                    return None
                fifo = b"fifo" if event.reason == "capacity" else b""
                seq = b"" if event.seq is None else b"%d" % event.seq
                return self._script(event, b"f", event.memory_id.encode(), fifo, seq)
            case AgentForgotten():
                below = b"" if event.next_seq is None else b"%d" % event.next_seq
                return self._script(event, b"a", below)
            case ConsolidationCompleted():
                return None
            case LearnedChange():
                return self._learned(event)
            case _:
                assert_never(event)

    def _put(self, event: MemoryPut) -> bytes | None:
        """A working memory (``r``), or only the surprise reading an episodic recording carries
        (``s``); None for an episodic memory without one."""
        surprise = event.surprise if isinstance(event, MemoryRecorded) else None
        if event.destination == "working":
            op, payload = b"r", memory_json(event)
        elif surprise is not None:
            op, payload = b"s", b""
        else:
            return None
        argv: tuple[bytes, ...] = (event.memory_id.encode(), b"%d" % event.seq, payload)
        if surprise is not None:
            argv = (*argv, surprise.model_dump_json().encode())
        return self._script(event, op, *argv)

    def _learned(self, event: LearnedEvent) -> bytes:
        """Procedures, plans and ratings: fields of the agent's memories hash; facts: of its
        facts hash (:mod:`projections.learned.redis_fields`); with the applied offset."""
        keys = [self._memories_key(event.agent_id), self._facts_key(event.agent_id)]
        position = event.source_position
        offset = b""
        if position is not None:
            keys.append(self._applied_key(position.topic, position.partition))
            offset = b"%d" % position.offset
        args = learn_args(offset, learned_writes(event))
        return _resp(b"EVALSHA", LEARN_SHA, b"%d" % len(keys), *keys, *args)

    async def learned_fields(self, agent_id: str, match: bytes = b"#l:*") -> dict[bytes, bytes]:
        """The agent's learned fields ``match`` names (``#l:...``, a Redis glob), for
        :mod:`projections.learned.reads`. Facts come from their own hash, read only when the
        glob can name a fact; the rest are scanned from the memories hash with the glob in
        Redis, so only they travel. A fact a store written before facts had a hash of their
        own keeps in the memories hash is read too, the facts hash winning where both hold a
        field (it holds the later writes): such a store answers correctly, at the old cost of
        scanning every fact, until ``engram replay`` rebuilds it."""
        if not match.startswith(VALUE_PREFIX):
            raise ValueError(f"{match!r} names no learned field")
        fields: dict[bytes, bytes] = {}
        try:
            async for field, value in self._client.hscan_iter(
                self._memories_key(agent_id), match=match, count=LEARNED_SCAN_COUNT
            ):
                fields[field] = value
            glob = match.decode()
            if fnmatch.fnmatchcase(FACT_PREFIX.decode(), glob):
                facts: dict[bytes, bytes] = await self._client.hgetall(  # type: ignore[assignment]
                    self._facts_key(agent_id)
                )
                fields.update(
                    (k, v)
                    for k, v in facts.items()
                    if k.startswith(VALUE_PREFIX) and fnmatch.fnmatchcase(k.decode(), glob)
                )
        except RedisError as exc:
            raise self._error(f"reading what {agent_id!r} learned", exc) from exc
        return fields

    def _script(self, event: DerivedEvent, op: bytes, *argv: bytes) -> bytes:
        """``_APPLY`` on the agent's keys and, if the event has a position, its applied offset."""
        agent = event.agent_id
        position = event.source_position
        keys = [self._ids_key(agent), self._memories_key(agent), self._facts_key(agent)]
        if position is None:
            offset = b""
        else:
            keys.append(self._applied_key(position.topic, position.partition))
            offset = b"%d" % position.offset
        return _resp(b"EVALSHA", _APPLY_SHA, b"%d" % len(keys), *keys, op, offset, *argv)

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        """Apply ``events`` in order, in one pipelined round trip (per 10,000 events)."""
        commands = [c for c in map(self._command, events) if c is not None]
        commands.extend(self._advance_commands(latest_positions(events)))
        await self._execute(commands, f"applying {len(events)} events")

    async def advance(self, positions: SourceOffsets) -> None:
        """One ``_ADVANCE`` per partition (compare and set in the script), one round trip."""
        if positions:
            await self._execute(
                self._advance_commands(positions), f"advancing {len(positions)} applied offsets"
            )

    def _advance_commands(self, positions: SourceOffsets) -> list[bytes]:
        return [
            _resp(b"EVALSHA", _ADVANCE_SHA, b"1", self._applied_key(topic, partition), b"%d" % off)
            for (topic, partition), off in positions.items()
        ]

    async def _execute(self, commands: Sequence[bytes], action: str) -> None:
        for start in range(0, len(commands), _MAX_PIPELINE):
            chunk = commands[start : start + _MAX_PIPELINE]
            try:
                results = await self._pipeline(chunk)
                if any(isinstance(r, NoScriptError) for r in results):
                    # The server lost its script cache (restart, SCRIPT FLUSH). Running the
                    # chunk again is safe: what did run is skipped or re-done idempotently.
                    await self._client.script_load(_APPLY)
                    await self._client.script_load(_ADVANCE)
                    await self._client.script_load(LEARN_SCRIPT)
                    results = await self._pipeline(chunk)
            except (RedisError, TimeoutError) as exc:
                raise self._error(action, exc) from exc
            for result in results:
                if isinstance(result, Exception):
                    raise self._error(action, result) from result

    async def _pipeline(self, commands: Sequence[bytes]) -> list[Any]:
        """Send framed commands on one pooled connection and read every reply.

        A connection error retries once on a fresh connection (a pooled one may predate a
        server restart); re-running is safe for the same reason as above.
        """
        pool = self._client.connection_pool
        for attempt in (1, 2):
            # redis-py leaves the pool's get_connection unannotated.
            connection = await pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                async with asyncio.timeout(connection.socket_timeout):
                    return await _exchange(connection, commands)
            except RedisConnectionError:
                await connection.disconnect(nowait=True)
                if attempt == 2:
                    raise
            except BaseException:
                # Replies may still be in flight: this connection must never be reused.
                await connection.disconnect(nowait=True)
                raise
            finally:
                await pool.release(connection)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def memories(self, agent_id: str) -> list[StoredMemory]:
        try:
            payloads = await self._read(
                keys=[self._ids_key(agent_id), self._memories_key(agent_id)]
            )
        except RedisError as exc:
            raise self._error(f"reading the memories of {agent_id!r}", exc) from exc
        return [StoredMemory.model_validate_json(p) for p in payloads if p is not None]

    async def arousal(self, agent_id: str) -> SurpriseReading | None:
        """The agent's latest surprise reading (``#arousal``), None before its first one."""
        try:
            value = await self._client.hget(self._memories_key(agent_id), "#arousal")
        except RedisError as exc:
            raise self._error(f"reading the arousal of {agent_id!r}", exc) from exc
        return None if value is None else SurpriseReading.model_validate_json(value)

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        try:
            value = await self._client.get(self._applied_key(topic, partition))
        except RedisError as exc:
            raise self._error(f"reading the applied offset of {topic}[{partition}]", exc) from exc
        return None if value is None else int(value)

    async def clear(self) -> None:
        """Delete every key of this namespace: a rebuild from the log starts from nothing."""
        try:
            batch: list[Any] = []
            async for key in self._client.scan_iter(match=f"{self._ns}:*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    await self._client.unlink(*batch)
                    batch.clear()
            if batch:
                await self._client.unlink(*batch)
        except RedisError as exc:
            raise self._error(f"clearing namespace {self._ns!r}", exc) from exc

    async def ping(self) -> None:
        try:
            await self._client.ping()
        except RedisError as exc:
            raise self._error("ping", exc) from exc

    async def close(self) -> None:
        await self._client.aclose()

    def _error(self, action: str, exc: BaseException) -> ProjectionError:
        return ProjectionError(
            f"working memory (Redis at {self._address()}, namespace {self._ns!r}): "
            f"{action} failed: {type(exc).__name__}: {exc}"
        )

    def _address(self) -> str:
        kwargs = self._client.connection_pool.connection_kwargs
        if "path" in kwargs:
            return f"unix:{kwargs['path']}"
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"

    def __repr__(self) -> str:
        return f"RedisWorkingMemory({self._address()}, namespace={self._ns!r})"
