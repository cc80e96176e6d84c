"""The agent index on a real Redis: capped per agent in the write that indexes a batch, with a
watermark saying from where it still covers the agent."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from projections.working.agent_index import AgentIndex, BatchEntries

pytestmark = pytest.mark.integration

ITEMS, LIFECYCLE = "p.memory.items", "p.memory.lifecycle"
TOPICS = (ITEMS, LIFECYCLE, "p.memory.access")
CAP = 5


def batch(n: int, agents: dict[str, int]) -> BatchEntries:
    """Batch ``n``: each agent one recording at ``10 n + i`` on items, and on lifecycle the
    batch's marker (and, on even batches, a forgetting of the first agent)."""
    records = {
        agent: {(ITEMS, partition): [10 * n + i]}
        for i, (agent, partition) in enumerate(agents.items())
    }
    first = next(iter(agents))
    if n % 2 == 0:
        records[first][(LIFECYCLE, agents[first])] = [2 * n]
    ends = {(ITEMS, p): 10 * n + len(agents) for p in set(agents.values())}
    ends |= {(LIFECYCLE, p): 2 * n + 1 for p in set(agents.values())}
    return BatchEntries(records, ends)


@pytest.fixture
async def index(redis_server_url: str) -> AsyncIterator[AgentIndex]:
    index = AgentIndex.from_url(redis_server_url, f"cap{uuid.uuid4().hex[:8]}", cap=CAP)
    try:
        yield index
    finally:
        await index.close()


async def members(redis_server_url: str, key: str) -> list[tuple[bytes, float]]:
    client = aioredis.Redis.from_url(redis_server_url)
    try:
        got: list[tuple[bytes, float]] = await client.zrange(key, 0, -1, withscores=True)
        return got
    finally:
        await client.aclose()


async def test_the_cap_holds_and_the_watermark_says_what_was_dropped(
    index: AgentIndex, redis_server_url: str
) -> None:
    ns = index.namespace
    await index.set_whole([0, 1], True)
    # One call for several batches, then one per batch, as a replay and the workers write.
    await index.add_batches([batch(n, {"BIG": 0, "OTHER": 1}) for n in range(3)])
    for n in range(3, 12):
        await index.add_batch(batch(n, {"BIG": 0}))
    await index.add_batch(batch(12, {"SMALL": 0}))

    big = await members(redis_server_url, f"{ns}:idx:a:BIG")
    assert len(big) == CAP
    # The lowest-scored members went; what is left is what the watermark says it covers.
    looked = await index.lookup("BIG", 0, TOPICS)
    assert looked is not None
    assert looked.trimmed
    kept_items = sorted(looked.offsets[ITEMS])
    kept_lifecycle = sorted(looked.offsets[LIFECYCLE])
    assert set(looked.covers_from) <= {ITEMS, LIFECYCLE}
    for topic, kept in ((ITEMS, kept_items), (LIFECYCLE, kept_lifecycle)):
        if topic in looked.covers_from:
            assert all(offset >= looked.covers_from[topic] for offset in kept)
    # Of every place indexed, those dropped all lie below the watermark of their topic.
    every = {(ITEMS, 10 * n) for n in range(12)} | {(LIFECYCLE, 2 * n) for n in range(0, 12, 2)}
    kept = {(ITEMS, o) for o in kept_items} | {(LIFECYCLE, o) for o in kept_lifecycle}
    dropped = every - kept
    assert dropped, "the cap dropped nothing"
    for topic, offset in dropped:
        assert offset < looked.covers_from[topic]
    assert looked.ends == {ITEMS: 121, LIFECYCLE: 25}

    # Agents under the cap are not trimmed.
    other = await index.lookup("OTHER", 1, TOPICS)
    assert other is not None
    assert not other.trimmed
    assert other.offsets[ITEMS] == {1, 11, 21}
    small = await index.lookup("SMALL", 0, TOPICS)
    assert small is not None
    assert not small.trimmed
    assert small.offsets[ITEMS] == {120}

    # Forgetting deletes the watermark with the members.
    await index.forget("BIG")
    assert await index.lookup("BIG", 0, TOPICS) is None
    client = aioredis.Redis.from_url(redis_server_url)
    try:
        assert not await client.exists(f"{ns}:idx#from:BIG")
    finally:
        await client.aclose()


async def test_an_end_never_moves_back(index: AgentIndex) -> None:
    await index.set_whole([0], True)
    await index.add_batch(batch(5, {"A": 0}))
    await index.add_batch(batch(1, {"A": 0}))
    looked = await index.lookup("A", 0, TOPICS)
    assert looked is not None
    assert looked.ends == {ITEMS: 51, LIFECYCLE: 11}


async def test_agents_named_like_the_index_own_keys_are_indexed(
    index: AgentIndex, redis_server_url: str
) -> None:
    """An agent id may hold colons: an agent called ``whole:0`` or ``end:<topic>:0`` must not
    meet the partition's own keys (before, the script failed with WRONGTYPE on every retry,
    and the worker stalled)."""
    # The flag of the layout before this one, left in Redis by an earlier release.
    client = aioredis.Redis.from_url(redis_server_url)
    try:
        await client.set(f"{index.namespace}:idx:whole:0", 1)
    finally:
        await client.aclose()
    await index.set_whole([0], True)
    odd = ("whole:0", f"end:{ITEMS}:0", f"end:{LIFECYCLE}:0")
    await index.add_batch(batch(2, dict.fromkeys(("A", *odd), 0)))
    await index.set_whole([0], True)
    for agent in ("A", *odd):
        looked = await index.lookup(agent, 0, TOPICS)
        assert looked is not None, agent
        assert looked.ends == {ITEMS: 24, LIFECYCLE: 5}


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AgentIndex(aioredis.Redis(), "x", cap=0)
