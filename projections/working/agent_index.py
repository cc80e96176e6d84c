"""Where each agent's records lie in the log, kept beside the projections so that one agent's
history is read from its own records rather than from its whole partition.

Per agent, a sorted set ``{ns}:idx:a:{agent}`` holds one member per batch and topic partition
that took any of its records: ``"memory.items:3:1200-1205,1210"`` (topic, partition, the exact
offsets as runs), scored by where the batch's marker landed (the batches' order, whatever the
topic). Only batches whose markers are logged are written, so every indexed record counts
(:mod:`processors.batch_markers`); a reader takes the records after
``{ns}:idx#end:{topic}:{partition}`` (what was logged since the last indexed batch) from the
log itself, markers and all.

The index is bounded per agent: past ``cap`` members (``ENGRAM_AGENT_INDEX_CAP``) the write
that adds a batch also drops the agent's oldest members, in the same script call, and records
in the hash ``{ns}:idx#from:{agent}`` per topic partition the offset from which the index still
holds every indexed record of the agent (a "covers from" watermark; ``#`` is no character of
an agent id, so the key is no other agent's; the ends and the "whole" flags below are named so
too: an agent may be called ``whole:0``, and the agents' sets have a prefix of their own, so no
key of the layout before them, ``{ns}:idx:whole:{p}`` among them, is ever an agent's). A
history needs the whole of it (its counts cover everything), so a reader that finds a
watermark on the agent's partition reads the log before the watermarks (and the markers up to
the oldest batch kept), and the rest by the index.

The index is derived data. It is trusted for a partition number only while
``{ns}:idx#whole:{partition}`` is set: a worker sets it when it opens an empty log's partition
and clears it when a takeover finds a batch logged but never applied (a crash may then have cut
between its marker and its index entry). Without it, or with nothing indexed for the agent (a
log older than the index, a lost Redis), readers scan the whole partition. Forgetting an agent
drops its old life from the index before the batch of the erasure is indexed, so the index
keeps the erasure, and what a new life adds after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from processors.batch import RawRecord
from projections.interfaces import ProjectionError
from schemas.memory_events import DerivedEvent

__all__ = [
    "DEFAULT_CAP",
    "AgentIndex",
    "BatchEntries",
    "IndexedRecords",
    "batch_entries",
    "format_member",
    "parse_member",
    "runs_of",
]

Span = tuple[int, int]
"""First and last offset, inclusive."""


def runs_of(offsets: Iterable[int]) -> list[Span]:
    """Sorted, distinct offsets as runs of consecutive ones."""
    runs: list[Span] = []
    for offset in sorted(set(offsets)):
        if runs and runs[-1][1] + 1 == offset:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def format_member(topic: str, partition: int, offsets: Iterable[int]) -> str:
    """One index member: where one batch put an agent's records in one topic partition."""
    runs = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs_of(offsets))
    if not runs:
        raise ValueError("a member names at least one offset")
    return f"{topic}:{partition}:{runs}"


def parse_member(member: str) -> tuple[str, int, list[Span]]:
    """The topic, partition and offset runs of a member of :func:`format_member`; raises
    ``ValueError`` for anything else."""
    topic, partition, runs = member.rsplit(":", 2)
    spans: list[Span] = []
    for run in runs.split(","):
        first, _, last = run.partition("-")
        spans.append((int(first), int(last or first)))
    return topic, int(partition), spans


Places = dict[tuple[str, int], list[int]]
"""Per (topic, partition), offsets."""


@dataclass(frozen=True)
class BatchEntries:
    """What one logged batch adds to the index."""

    records: dict[str, Places]
    """Per agent, where the batch's records of it lie."""
    ends: dict[tuple[str, int], int]
    """Per (topic, partition), the highest offset the batch covers."""
    markers: dict[int, int] = field(default_factory=dict)
    """Per partition number, where the batch's marker landed on ``memory.lifecycle``: the
    score of its members, one clock for all of an agent's topics (an agent is on one partition
    number), so the cap drops an agent's oldest batches whatever their topics."""


def batch_entries(
    records: Sequence[RawRecord],
    derived: Sequence[DerivedEvent],
    delivered: Sequence[object],
    landed: Sequence[object],
) -> BatchEntries:
    """The index entries of a batch whose markers are logged: its derived events where they
    landed (``delivered[i]`` is the producer's metadata of ``derived[i]``), the retrievals it
    consumed where they are, and as ends the markers' places (``landed``) too."""
    entries: dict[str, Places] = {}
    ends: dict[tuple[str, int], int] = {}
    markers: dict[int, int] = {}

    def note(agent: str | None, topic: str, partition: int, offset: int) -> None:
        if agent is not None:
            entries.setdefault(agent, {}).setdefault((topic, partition), []).append(offset)
        ends[(topic, partition)] = max(ends.get((topic, partition), -1), offset)

    for event, metadata in zip(derived, delivered, strict=False):
        where = _landed(metadata)
        if where is not None:
            note(event.agent_id, *where)
    for metadata in landed:
        where = _landed(metadata)
        if where is not None:
            note(None, *where)
            markers[where[1]] = max(markers.get(where[1], -1), where[2])
    for raw in records:
        if raw.kind == "retrieval":
            agent = raw.key.decode("utf-8", "replace") if raw.key is not None else None
            note(agent, raw.topic, raw.partition, raw.offset)
    return BatchEntries(entries, ends, markers)


def _landed(metadata: object) -> tuple[str, int, int] | None:
    topic = getattr(metadata, "topic", None)
    partition = getattr(metadata, "partition", None)
    offset = getattr(metadata, "offset", None)
    if isinstance(topic, str) and isinstance(partition, int) and isinstance(offset, int):
        return (topic, partition, offset) if offset >= 0 else None
    return None


DEFAULT_CAP = 10_000
"""Members per agent (each one batch's records of it on one topic partition, ~60 bytes)."""

_ADD = """
-- KEYS: per agent its sorted set then its watermark hash, then the ends' keys.
-- ARGV: cap, members, ends; per member: the KEYS slot of its agent's set, member, score;
-- per end: its KEYS slot, offset.
local cap = tonumber(ARGV[1])
local members = tonumber(ARGV[2])
local ends = tonumber(ARGV[3])
local at = 4
local touched, seen = {}, {}
for _ = 1, members do
  local slot = tonumber(ARGV[at])
  redis.call('ZADD', KEYS[slot], ARGV[at + 2], ARGV[at + 1])
  if not seen[slot] then
    seen[slot] = true
    touched[#touched + 1] = slot
  end
  at = at + 3
end
for _, slot in ipairs(touched) do
  local excess = redis.call('ZCARD', KEYS[slot]) - cap
  if excess > 0 then
    local from = {}
    for _, member in ipairs(redis.call('ZRANGE', KEYS[slot], 0, excess - 1)) do
      local place, runs = string.match(member, '^(.*):([^:]*)$')
      local after = tonumber(string.match(runs, '(%d+)$')) + 1
      if (from[place] or -1) < after then from[place] = after end
    end
    for place, after in pairs(from) do
      local held = tonumber(redis.call('HGET', KEYS[slot + 1], place) or '-1')
      if held < after then redis.call('HSET', KEYS[slot + 1], place, after) end
    end
    redis.call('ZREMRANGEBYRANK', KEYS[slot], 0, excess - 1)
  end
end
for _ = 1, ends do
  local key = KEYS[tonumber(ARGV[at])]
  local offset = tonumber(ARGV[at + 1])
  if tonumber(redis.call('GET', key) or '-1') < offset then redis.call('SET', key, offset) end
  at = at + 2
end
return 0
"""
"""One call per write, however many agents and batches: the cost of the hot path is its
round trips (a pipelined command costs the client ~15 us, a script call about as much)."""


@dataclass(frozen=True)
class IndexedRecords:
    """What the index says of one agent on one partition number."""

    offsets: dict[str, set[int]]
    """Per topic, the offsets of the agent's indexed records."""
    ends: dict[str, int]
    """Per topic, the highest offset indexed (any agent's): the log after it is read whole."""
    covers_from: dict[str, int] = field(default_factory=dict)
    """Per topic trimmed by the cap, the offset from which the index holds all the agent's
    indexed records: below it the index no longer says where they are."""
    oldest_batch: int = -1
    """Where the marker of the oldest batch the index still holds of the agent landed on
    ``memory.lifecycle`` (its members' score): the markers of every batch the cap dropped lie
    at or before it."""

    @property
    def trimmed(self) -> bool:
        """Whether the cap dropped some of the agent's places: the index is not all of it."""
        return bool(self.covers_from)


class AgentIndex:
    """The agent index in Redis (``namespace`` as the working memory's), at most ``cap``
    members per agent."""

    def __init__(
        self, client: aioredis.Redis, namespace: str = "engram", *, cap: int = DEFAULT_CAP
    ) -> None:
        if cap < 1:
            raise ValueError("the agent index's cap must be at least 1")
        self._client = client
        self._ns = namespace
        self._cap = cap
        self._add = client.register_script(_ADD)

    @classmethod
    def from_url(
        cls, url: str, namespace: str = "engram", *, cap: int = DEFAULT_CAP, timeout: float = 10.0
    ) -> Self:
        client = aioredis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        return cls(client, namespace, cap=cap)

    @property
    def namespace(self) -> str:
        return self._ns

    def _agent_key(self, agent_id: str) -> str:
        return f"{self._ns}:idx:a:{agent_id}"

    def _from_key(self, agent_id: str) -> str:
        return f"{self._ns}:idx#from:{agent_id}"

    def _end_key(self, topic: str, partition: int) -> str:
        return f"{self._ns}:idx#end:{topic}:{partition}"

    def _whole_key(self, partition: int) -> str:
        return f"{self._ns}:idx#whole:{partition}"

    async def add_batch(self, batch: BatchEntries) -> None:
        """Index one logged batch, in one round trip."""
        await self.add_batches([batch])

    async def add_batches(self, batches: Sequence[BatchEntries]) -> None:
        """Index logged batches (one member per batch, agent and topic partition) and trim
        each agent to the cap, in one script call."""
        keys: list[str] = []
        slots: dict[str, int] = {}
        members: list[str | int] = []
        ends: dict[tuple[str, int], int] = {}
        for batch in batches:
            for agent, places in batch.records.items():
                for (topic, partition), offsets in places.items():
                    kept = sorted(set(offsets))
                    if not kept:
                        continue
                    if agent not in slots:
                        keys += [self._agent_key(agent), self._from_key(agent)]
                        slots[agent] = len(keys) - 1  # Lua counts from 1: the set's slot
                    score = batch.markers.get(partition, kept[0])
                    members += [slots[agent], format_member(topic, partition, kept), score]
            for place, end in batch.ends.items():
                ends[place] = max(ends.get(place, -1), end)
        if not members and not ends:
            return
        end_args: list[str | int] = []
        for (topic, partition), end in ends.items():
            keys.append(self._end_key(topic, partition))
            end_args += [len(keys), end]
        args = [self._cap, len(members) // 3, len(ends), *members, *end_args]
        try:
            await self._add(keys=keys, args=args)
        except (RedisError, TimeoutError) as exc:
            raise ProjectionError(f"Redis: indexing {len(batches)} batches: {exc}") from exc

    async def lookup(
        self, agent_id: str, partition: int, topics: Sequence[str]
    ) -> IndexedRecords | None:
        """The agent's indexed records of ``partition``, or None when the index cannot say
        (not whole there, or nothing indexed for the agent): the caller then scans."""
        pipe = self._client.pipeline(transaction=False)
        pipe.get(self._whole_key(partition))
        pipe.zrange(self._agent_key(agent_id), 0, -1, withscores=True)
        pipe.hgetall(self._from_key(agent_id))
        for topic in topics:
            pipe.get(self._end_key(topic, partition))
        whole, members, trimmed, *ends = await self._run(pipe, f"reading the index of {agent_id!r}")
        if whole is None or not members:
            return None
        covers_from: dict[str, int] = {}
        for place, offset in trimmed.items():
            topic, _, at = place.decode().rpartition(":")
            if int(at) == partition and topic in topics:
                covers_from[topic] = int(offset)
        offsets: dict[str, set[int]] = {t: set() for t in topics}
        for member, _ in members:
            topic, at, spans = parse_member(member.decode())
            if at != partition or topic not in offsets:
                continue
            for first, last in spans:
                offsets[topic].update(range(first, last + 1))
        return IndexedRecords(
            offsets,
            {t: int(e) for t, e in zip(topics, ends, strict=True) if e is not None},
            covers_from,
            int(min(score for _, score in members)),
        )

    async def set_whole(self, partitions: Iterable[int], whole: bool) -> None:
        """Trust the index of these partition numbers, or stop trusting it."""
        keys = [self._whole_key(p) for p in partitions]
        if not keys:
            return
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            if whole:
                pipe.set(key, 1)
            else:
                pipe.delete(key)
        await self._run(pipe, "marking the agent index")

    async def forget(self, agent_id: str) -> None:
        """Delete what the index holds of an agent (forgetting it)."""
        try:
            await self._client.delete(self._agent_key(agent_id), self._from_key(agent_id))
        except RedisError as exc:
            raise ProjectionError(f"Redis: forgetting the index of {agent_id!r}: {exc}") from exc

    async def close(self) -> None:
        await self._client.aclose()

    async def _run(self, pipe: Any, action: str) -> list[Any]:
        try:
            result: list[Any] = await pipe.execute()
        except (RedisError, TimeoutError) as exc:
            raise ProjectionError(f"Redis: {action}: {exc}") from exc
        return result
