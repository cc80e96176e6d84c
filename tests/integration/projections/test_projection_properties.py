"""The projections' promises on real Redis and Qdrant, for derived logs of any shape.

Applying a derived event twice equals applying it once, and rebuilding from the log equals what the
worker applied live (streams/README.md, invariants 2 and 3). The events are not built by hand: the
processors derive them (:mod:`tests.agent_streams`) from generated agent streams in which sessions,
years and chapters end, memories are promoted, summarised and forgotten, so every kind of derived
event reaches the stores, in the batches the worker makes.

Each example opens stores of its own (a fresh Redis namespace, a fresh episodic store): the
stores are created in the test body, since function fixtures live across hypothesis examples.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.interfaces import EpisodicMemoryStore
from projections.memory import StoredMemory
from projections.working.redis_store import RedisWorkingMemory
from schemas.memory_events import DerivedEvent, MemoryWritten
from tests.agent_streams import (
    AGENTS,
    EMBEDDER,
    TOPICS,
    Action,
    action,
    build_stream,
    projected,
    run,
    split,
)
from tests.integration.fixtures.qdrant import _client_store, _edge_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OpenEpisodic = Callable[[], AbstractAsyncContextManager[EpisodicMemoryStore]]
QUERY = EMBEDDER.embed("flood warning at the river, houses wet")
POSITIONS = [
    (topic, partition)
    for topic in (*TOPICS.agent_inputs, TOPICS.schedule, TOPICS.access)
    for partition in (0, 1)
]
"""Every source partition a derived event can name (and some none does: both stores say None)."""

actions = st.lists(action, min_size=30, max_size=90)
cuts = st.lists(st.integers(1, 100), max_size=20)
PROPERTY = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
"""Few examples: qdrant-client's local mode is slow, and every example opens four stores."""


@pytest.fixture(params=["edge", "qdrant-local"])
def open_episodic(request: pytest.FixtureRequest, tmp_path: Path) -> OpenEpisodic:
    """Opens a fresh, empty episodic store of the parametrised backend (as ``episodic_store``
    does, so ``ENGRAM_TEST_BACKEND=containers`` gives a new collection on a real server)."""

    @asynccontextmanager
    async def fresh() -> AsyncIterator[EpisodicMemoryStore]:
        if request.param == "edge":
            async for edge in _edge_store(tmp_path / f"edge-{uuid.uuid4().hex[:8]}"):
                yield edge
        else:
            async for client in _client_store(request):
                yield client

    return fresh


@dataclass
class Stores:
    working: RedisWorkingMemory
    episodic: EpisodicMemoryStore

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        await self.working.apply(events)
        await self.episodic.apply(events)

    async def snapshot(self) -> dict[str, Any]:
        """Everything a reader can see: every agent's memories (payloads) in both stores and
        arousal, the similarities to a query (so the vectors), the counts and every applied
        position. A similarity compares within float noise: a store that applied a batch
        twice may sum a cosine in another order, and rounding would not absorb a difference
        that straddles the rounding's boundary (0.678685 rounds either way)."""
        working = {a: await self.working.memories(a) for a in AGENTS}
        episodic = {a: sorted_by_seq(await self.episodic.memories(a, 1000)) for a in AGENTS}
        similar = {
            a: {
                m.memory_id: pytest.approx(m.similarity or 0.0, abs=1e-5)
                for m in await self.search(a)
            }
            for a in AGENTS
        }
        applied = {
            f"{t}:{p}": (
                await self.working.applied_offset(t, p),
                await self.episodic.applied_offset(t, p),
            )
            for t, p in POSITIONS
        }
        return {
            "working": working,
            "arousal": {a: await self.working.arousal(a) for a in AGENTS},
            "episodic": episodic,
            "similar": similar,
            "count": await self.episodic.count(),
            "applied": applied,
        }

    async def search(self, agent_id: str) -> list[StoredMemory]:
        return await self.episodic.search(agent_id, QUERY, limit=1000)


def sorted_by_seq(memories: list[StoredMemory]) -> list[StoredMemory]:
    return sorted(memories, key=lambda m: (m.seq, m.memory_id))


@asynccontextmanager
async def fresh_stores(redis_url: str, open_episodic: OpenEpisodic) -> AsyncIterator[Stores]:
    working = RedisWorkingMemory.from_url(redis_url, namespace=f"prop-{uuid.uuid4().hex}")
    try:
        async with open_episodic() as episodic:
            yield Stores(working, episodic)
    finally:
        try:
            await working.clear()
        finally:
            await working.close()


def expected_ids(events: Sequence[DerivedEvent], destination: str) -> dict[str, set[str]]:
    """Per agent, the memory ids a projection of ``destination`` must hold after ``events``."""
    held: dict[str, set[str]] = {a: set() for a in AGENTS}
    for memory in projected(events).values():
        assert isinstance(memory, MemoryWritten)
        if memory.destination == destination:
            held[memory.agent_id].add(memory.memory_id)
    return held


async def holds(stores: Stores, events: Sequence[DerivedEvent]) -> None:
    """The stores hold exactly the memories the log says, so equal snapshots mean something."""
    snap = await stores.snapshot()
    working = {a: {m.memory_id for m in ms} for a, ms in snap["working"].items()}
    episodic = {a: {m.memory_id for m in ms} for a, ms in snap["episodic"].items()}
    assert working == expected_ids(events, "working")
    assert episodic == expected_ids(events, "episodic")


@PROPERTY
@given(actions=actions, cuts=cuts, data=st.data())
async def test_applying_derived_events_again_changes_nothing(
    redis_server_url: str,
    open_episodic: OpenEpisodic,
    actions: list[Action],
    cuts: list[int],
    data: st.DataObject,
) -> None:
    """Once, against: every batch twice; a crash and a redelivery from an earlier batch; then
    a suffix of the log again in one batch (a takeover's catch-up). An old prefix on its own is
    not part of the contract (``projections.interfaces``), and Redis's promise to skip one has a
    gap: ``test_an_old_prefix_does_not_bring_back_a_working_memory_forgotten_later``."""
    records, _ = build_stream(actions)
    batches = run(split(records, cuts)).applied
    log = [e for batch in batches for e in batch]
    crashed = data.draw(st.integers(0, len(batches)), label="crashed after batch")
    resumed = data.draw(st.integers(0, crashed), label="redelivered from batch")
    again = data.draw(st.integers(0, len(log)), label="suffix from event")

    async with (
        fresh_stores(redis_server_url, open_episodic) as once,
        fresh_stores(redis_server_url, open_episodic) as twice,
    ):
        for batch in batches:
            await once.apply(batch)
        for batch in batches[:crashed]:
            await twice.apply(batch)
            await twice.apply(batch)
        for batch in batches[resumed:]:
            await twice.apply(batch)
        await twice.apply(log[again:])

        await holds(once, log)
        assert await twice.snapshot() == await once.snapshot()


@PROPERTY
@given(actions=actions, cuts=cuts, batch_size=st.integers(1, 400), seed=st.integers(0, 2**16))
async def test_rebuilding_from_the_log_gives_the_live_memories(
    redis_server_url: str,
    open_episodic: OpenEpisodic,
    actions: list[Action],
    cuts: list[int],
    batch_size: int,
    seed: int,
) -> None:
    """Live: each batch's derived events applied as the worker derives them, the processing
    state carried between batches. Rebuild: the log read back (partitions interleaved), put in
    causal order and applied in batches of another size, as ``streams.rebuild.from_log`` does."""
    records, _ = build_stream(actions)
    worker = run(split(records, cuts))
    replayed = worker.replayed(seed)

    async with (
        fresh_stores(redis_server_url, open_episodic) as live,
        fresh_stores(redis_server_url, open_episodic) as rebuilt,
    ):
        for batch in worker.applied:
            await live.apply(batch)
        for start in range(0, len(replayed), batch_size):
            await rebuilt.apply(replayed[start : start + batch_size])

        await holds(live, worker.emitted)
        assert await rebuilt.snapshot() == await live.snapshot()


async def test_an_old_prefix_does_not_bring_back_a_working_memory_forgotten_later(
    redis_server_url: str,
) -> None:
    """A decision (agent.decisions, offset 0, the last there), then four observations: the
    fourth evicts the decision (capacity 4). Re-applying the log's first event after the whole
    must change nothing (``projections/working/redis_store.py``: "replaying an old prefix cannot
    resurrect a memory evicted later"); the applied offset of agent.decisions is still 0."""
    _, worker = build_stream([("W1", "decide", 2)] + [("W1", "observe", 1)] * 4)
    log = worker.emitted
    working = RedisWorkingMemory.from_url(redis_server_url, namespace=f"prop-{uuid.uuid4().hex}")
    try:
        await working.apply(log)
        once = await working.memories("W1")
        assert [m.source_event_id for m in once] == ["W1-4", "W1-3", "W1-2", "W1-1"]
        await working.apply(log[:1])
        assert await working.memories("W1") == once
    finally:
        try:
            await working.clear()
        finally:
            await working.close()
