"""The episodic contract's ``candidates``, on Qdrant Edge and on the qdrant-client adapter: each
signal brings its best ``limit`` memories in one query, a pool within the limit comes back
whole, the request's levels and filter hold for every candidate; and its scopes: the archive
keeps what capacity and forgetting took from the active set until the agent is erased."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from processors.config import ProcessingConfig, load_processing_config
from processors.lexical import query_vector
from processors.recording import AgentMemoryState, record
from projections.episodic.candidates import CandidateSignals
from projections.episodic.edge import EdgeEpisodicMemory
from projections.episodic.qdrant_server import QdrantServerEpisodicMemory
from projections.interfaces import EpisodicMemoryStore
from projections.memory import StoredMemory
from projections.retrieval.filters import MemoryFilter
from schemas.agent_events import Observation
from schemas.memory_events import DerivedEvent, MemoryForgotten, MemoryRecorded, SourcePosition
from tests.integration.projections.lifecycle_events import (
    agent_forgotten,
    forgotten_by_utility,
    summarised,
)
from tests.integration.projections.test_episodic_memory_contract import EMBEDDER, TOPIC

pytestmark = pytest.mark.integration

ROOMY = load_processing_config(episodic_capacity=10_000)
"""No eviction: every memory stays in the pool."""

WORDS = [
    "river",
    "levee",
    "flood",
    "basement",
    "insurance",
    "claim",
    "storm",
    "garden",
    "quiet",
    "meeting",
    "harvest",
]


def random_log(agent_id: str, n: int, seed: int) -> list[DerivedEvent]:
    """``n`` episodic memories of random words, tags and step, each with a word of its own
    (so no two embed alike) and an importance of its own (so no order ties)."""
    rng = random.Random(seed)
    importances = rng.sample(range(7000, 10_000), n)
    observations = [
        Observation(
            agent_id=agent_id,
            content=" ".join([*rng.choices(WORDS, k=6), f"entry{i}"]),
            importance=importances[i] / 10_000,
            step=i,
            tags=tuple(rng.sample(WORDS, 2)),
        )
        for i in range(n)
    ]
    return recorded_log(observations, ROOMY, partition=seed)


def recorded_log(
    observations: list[Observation], config: ProcessingConfig, *, partition: int
) -> list[DerivedEvent]:
    """The derived events of one agent's observations, recorded in order as the processor
    records them (its capacities applied), each at the next offset of ``partition``."""
    state = AgentMemoryState()
    log: list[DerivedEvent] = []
    for offset, observation in enumerate(observations):
        out = record(
            observation,
            state,
            config=config,
            embedder=EMBEDDER,
            config_version=config.version(EMBEDDER.id),
            position=SourcePosition(topic=TOPIC, partition=partition, offset=offset),
        )
        log.extend([out.memory, *out.forgotten])
        state = out.state
    return log


def ids(memories: list[StoredMemory]) -> set[str]:
    return {m.memory_id for m in memories}


QUERY = "the levee and the flood insurance claim"


@pytest.mark.parametrize(
    "signals",
    [
        CandidateSignals(20, recency=True),
        CandidateSignals(20, importance=True),
        CandidateSignals(20, vector=EMBEDDER.embed(QUERY)),
        CandidateSignals(20, recency=True, lexical=query_vector(QUERY), tags=("flood",)),
    ],
    ids=["recency", "importance", "vector", "recency+lexical+tags"],
)
async def test_a_pool_within_the_limit_comes_back_whole(
    episodic_store: EpisodicMemoryStore, signals: CandidateSignals
) -> None:
    await episodic_store.apply(random_log("alice", 20, seed=1))
    await episodic_store.apply(random_log("bob", 5, seed=2))

    found = await episodic_store.candidates("alice", signals)

    pool = await episodic_store.memories("alice")
    assert len(found) == len(pool) == 20
    if signals.vector is None:
        assert found == pool  # newest first, as listed
        return
    searched = await episodic_store.search("alice", signals.vector, limit=1000)
    assert [m.similarity for m in found] == sorted(
        (m.similarity for m in found if m.similarity is not None), reverse=True
    )
    expected = {m.memory_id: m.similarity for m in searched}
    assert {m.memory_id: m.similarity for m in found} == pytest.approx(expected, abs=1e-6)


async def test_each_signal_brings_its_best_past_the_limit(
    episodic_store: EpisodicMemoryStore,
) -> None:
    await episodic_store.apply(random_log("alice", 120, seed=3))
    pool = await episodic_store.memories("alice")
    vector = EMBEDDER.embed(QUERY)
    limit = 10

    recency = await episodic_store.candidates("alice", CandidateSignals(limit, recency=True))
    importance = await episodic_store.candidates("alice", CandidateSignals(limit, importance=True))
    nearest = await episodic_store.candidates("alice", CandidateSignals(limit, vector=vector))
    everything = await episodic_store.candidates(
        "alice",
        CandidateSignals(
            limit,
            recency=True,
            importance=True,
            vector=vector,
            lexical=query_vector(QUERY),
            tags=("FLOOD",),
        ),
    )

    by_seq = sorted(pool, key=lambda m: m.seq, reverse=True)
    assert [m.seq for m in recency] == [m.seq for m in [*by_seq[:limit], by_seq[-1]]]
    by_importance = sorted(pool, key=lambda m: m.importance, reverse=True)
    assert sorted(m.importance for m in importance) == sorted(
        m.importance for m in [*by_importance[:limit], by_importance[-1]]
    )
    searched = await episodic_store.search("alice", vector, limit=limit)
    assert ids(nearest) == ids(searched)
    assert all(m.similarity is not None for m in everything)
    tagged = [m for m in by_seq if "flood" in {t.casefold() for t in m.tags}][:limit]
    lexical = await episodic_store.search(
        "alice", np.zeros_like(vector), limit=limit, lexical=query_vector(QUERY)
    )
    assert ids(everything) >= ids(recency) | ids(importance) | ids(nearest) | ids(tagged)
    # The lexical signal's best, up to which of several equal BM25 scores make its cut.
    others = ids(everything) - ids(recency) - ids(importance) - ids(nearest) - ids(tagged)
    assert len(others) <= limit
    assert all(m.lexical for m in lexical)
    cut = min(m.lexical or 0.0 for m in lexical)
    matched = await episodic_store.search(
        "alice", np.zeros_like(vector), limit=1000, lexical=query_vector(QUERY)
    )
    at_least_cut = {m.memory_id for m in matched if (m.lexical or 0.0) >= cut - 1e-9}
    assert others <= at_least_cut
    assert len(everything) <= 5 * limit + 2


def backdated_log(agent_id: str, n: int) -> list[DerivedEvent]:
    """``n`` memories recorded in one order and dated in the reverse one: the first recorded
    occurred last (a producer's backfill), an hour apart."""
    observations = [
        Observation(
            agent_id=agent_id,
            content=f"{agent_id} backfilled entry{i}",
            importance=0.9,
            occurred_at=BACKDATED + timedelta(hours=n - i),
        )
        for i in range(n)
    ]
    return recorded_log(observations, ROOMY, partition=7)


BACKDATED = datetime(2026, 3, 1, tzinfo=UTC)


async def test_occurred_brings_the_newest_by_the_events_time_not_by_seq(
    episodic_store: EpisodicMemoryStore,
) -> None:
    """The recent mode's signal: the ``limit`` latest ``occurred_at`` within the filter's time
    range, whatever order they were recorded in; a pool within the limit whole."""
    await episodic_store.apply(backdated_log("alice", 30))
    await episodic_store.apply(backdated_log("bob", 5))
    pool = await episodic_store.memories("alice")
    latest = sorted(pool, key=lambda m: m.occurred_at, reverse=True)
    window = MemoryFilter(
        occurred_after=BACKDATED + timedelta(hours=11),
        occurred_before=BACKDATED + timedelta(hours=20),
    )

    newest = await episodic_store.candidates("alice", CandidateSignals(5, occurred=True))
    within = await episodic_store.candidates(
        "alice", CandidateSignals(5, occurred=True), filter=window
    )
    whole = await episodic_store.candidates("alice", CandidateSignals(50, occurred=True))

    assert ids(newest) == ids(latest[:5])
    last_recorded = sorted(pool, key=lambda m: m.seq, reverse=True)[:5]
    assert ids(newest).isdisjoint(ids(last_recorded)), "the latest were recorded first"
    in_window = [m for m in latest if window.admits(m)]
    assert len(in_window) == 10
    assert ids(within) == ids(in_window[:5])
    assert ids(whole) == ids(pool)


async def test_levels_and_filter_hold_for_every_candidate(
    episodic_store: EpisodicMemoryStore,
) -> None:
    await episodic_store.apply(random_log("alice", 60, seed=4))
    memory_filter = MemoryFilter(tags=("river",), min_importance=0.8, step_from=10)
    signals = CandidateSignals(
        5, recency=True, importance=True, vector=EMBEDDER.embed(QUERY), lexical=query_vector(QUERY)
    )

    found = await episodic_store.candidates("alice", signals, levels=[0], filter=memory_filter)

    assert found
    assert all(memory_filter.admits(m) for m in found)
    assert await episodic_store.candidates("alice", signals, levels=[1]) == []
    admitted = await episodic_store.memories("alice", filter=memory_filter)
    assert ids(found) <= ids(admitted)


async def test_at_seqs_reads_the_memories_at_those_seqs_alone(
    episodic_store: EpisodicMemoryStore,
) -> None:
    await episodic_store.apply(random_log("alice", 60, seed=5))
    await episodic_store.apply(random_log("bob", 60, seed=6))
    pool = {m.seq: m for m in await episodic_store.memories("alice")}
    # 28 and 30 are read through one range (29 between them is not wanted); 500: no memory.
    wanted = (3, 4, 28, 30, 59, 500)
    vector = EMBEDDER.embed(QUERY)

    scored = await episodic_store.candidates(
        "alice", CandidateSignals(1, vector=vector, at_seqs=wanted)
    )
    listed = await episodic_store.candidates(
        "alice", CandidateSignals(1, recency=True, at_seqs=wanted)
    )
    filtered = await episodic_store.candidates(
        "alice",
        CandidateSignals(vector=vector, at_seqs=wanted),
        filter=MemoryFilter(step_from=10),
    )

    assert ids(scored) == ids(listed) == {pool[s].memory_id for s in (3, 4, 28, 30, 59)}
    assert {m.agent_id for m in scored} == {"alice"}
    searched = {
        m.memory_id: m.similarity for m in await episodic_store.search("alice", vector, 1000)
    }
    assert {m.memory_id: m.similarity for m in scored} == pytest.approx(
        {key: searched[key] for key in ids(scored)}, abs=1e-6
    ), "each carries its cosine"
    assert all(m.similarity is None for m in listed)
    assert ids(filtered) == {pool[s].memory_id for s in (28, 30, 59) if pool[s].step >= 10}
    assert CandidateSignals(at_seqs=(1, 1, 2)).at_seqs_limit == 4, "two per seq: a copy too"


def test_at_seqs_close_together_are_read_as_one_range() -> None:
    signals = CandidateSignals(at_seqs=(20, 9, 3, 5, 10, 9))
    assert signals.at_seq_ranges == ((3, 5), (9, 10), (20, 20))
    assert signals.at_seqs_limit == 2 * (3 + 2 + 1), "two per seq a range covers"
    assert [seq for seq in range(25) if signals.wanted(seq)] == [3, 5, 9, 10, 20]
    assert CandidateSignals(recency=True).wanted(4), "without at_seqs every memory is wanted"


def test_signals_that_could_leave_out_a_small_pool_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        CandidateSignals(0, recency=True)
    with pytest.raises(ValueError, match="recency, importance, occurred or a query vector"):
        CandidateSignals(10, lexical=query_vector(QUERY), tags=("flood",))
    with pytest.raises(ValueError, match="recency, importance, occurred or a query vector"):
        CandidateSignals(10, vector=np.zeros(EMBEDDER.dim, dtype=np.float32))


async def test_candidates_of_the_backends_agree(
    edge_store: EpisodicMemoryStore, client_store: EpisodicMemoryStore
) -> None:
    log = random_log("alice", 80, seed=5)
    signals = CandidateSignals(
        7,
        recency=True,
        importance=True,
        vector=EMBEDDER.embed(QUERY),
    )
    for store in (edge_store, client_store):
        await store.apply(log)

    edge = await edge_store.candidates("alice", signals)
    client = await client_store.candidates("alice", signals)

    assert ids(edge) == ids(client)
    assert len(edge) == len(client)


SMALL = load_processing_config(episodic_capacity=3, working_capacity=2)
"""Small capacities, so a handful of events already forgets memories."""


def small_log(agent_id: str, n: int) -> list[DerivedEvent]:
    """Memories on both sides of the episodic threshold, many evicted by capacity."""
    observations = [
        Observation(
            agent_id=agent_id,
            content=f"{agent_id} saw the river at mark {i}",
            importance=0.9 if i % 2 else 0.3,
            step=i,
            occurred_at=datetime(2026, 3, 1, tzinfo=UTC) + timedelta(hours=i),
        )
        for i in range(n)
    ]
    return recorded_log(observations, SMALL, partition=0)


def written(log: list[DerivedEvent]) -> set[str]:
    return {e.memory_id for e in log if isinstance(e, MemoryRecorded)}


EVERY_SIGNAL = CandidateSignals(1000, recency=True, importance=True)


@pytest.mark.parametrize("one_call", [True, False], ids=["one-apply", "apply-per-event"])
async def test_the_archive_keeps_what_capacity_took_until_the_agent_is_erased(
    episodic_store: EpisodicMemoryStore, one_call: bool
) -> None:
    log = small_log("alice", 12)
    assert any(isinstance(e, MemoryForgotten) for e in log)
    if one_call:
        await episodic_store.apply(log)
    else:
        for event in log:
            await episodic_store.apply([event])

    active = ids(await episodic_store.memories("alice"))
    everything = ids(await episodic_store.candidates("alice", EVERY_SIGNAL, scope="all"))
    archive = ids(await episodic_store.candidates("alice", EVERY_SIGNAL, scope="archive"))

    assert len(active) == 3
    assert everything == written(log)  # working memories included: Redis drops them
    assert archive == written(log) - active
    assert await episodic_store.count("alice") == 3
    assert ids(await episodic_store.candidates("alice", EVERY_SIGNAL)) == active

    await episodic_store.apply([agent_forgotten("alice")])
    assert await episodic_store.candidates("alice", EVERY_SIGNAL, scope="all") == []


async def test_replaying_the_log_keeps_the_archive(episodic_store: EpisodicMemoryStore) -> None:
    log = small_log("alice", 10)
    await episodic_store.apply(log)
    await episodic_store.apply(log[:5])  # an old prefix again, then the rest
    await episodic_store.apply(log[5:])

    active = ids(await episodic_store.memories("alice"))
    archive = ids(await episodic_store.candidates("alice", EVERY_SIGNAL, scope="archive"))
    assert len(active) == 3
    assert archive == written(log) - active


async def test_a_summary_pruned_by_utility_is_archived(episodic_store: EpisodicMemoryStore) -> None:
    log = small_log("alice", 4)
    summary = summarised(
        [e for e in log if isinstance(e, MemoryRecorded)],
        level=1,
        content="a season of high water",
        seq=4,
        trigger_event_id=log[-1].source_event_id,  # type: ignore[union-attr]
    )
    await episodic_store.apply([*log, summary])
    await episodic_store.apply([forgotten_by_utility(summary)])

    assert summary.memory_id not in ids(await episodic_store.memories("alice", levels=[1]))
    archived = await episodic_store.candidates("alice", EVERY_SIGNAL, [1], scope="archive")
    assert ids(archived) == {summary.memory_id}


async def test_a_time_range_selects_by_when_the_event_occurred(
    episodic_store: EpisodicMemoryStore,
) -> None:
    log = small_log("alice", 12)
    await episodic_store.apply(log)
    start = datetime(2026, 3, 1, 3, tzinfo=UTC)
    window = MemoryFilter(occurred_after=start, occurred_before=start + timedelta(hours=4))

    found = await episodic_store.candidates("alice", EVERY_SIGNAL, filter=window, scope="all")

    assert sorted(m.occurred_at.hour for m in found) == [3, 4, 5, 6, 7]
    assert all(window.admits(m) for m in found)


@pytest.mark.parametrize("backend", ["edge", "qdrant-local"])
async def test_without_the_archive_forgotten_memories_are_deleted(
    tmp_path: Path, backend: str
) -> None:
    if backend == "edge":
        store: EpisodicMemoryStore = EdgeEpisodicMemory.open(
            tmp_path / "edge", EMBEDDER.dim, archive=False
        )
    else:
        store = await QdrantServerEpisodicMemory.open(":memory:", dim=EMBEDDER.dim, archive=False)
    try:
        log = small_log("alice", 12)
        await store.apply(log)
        active = ids(await store.memories("alice"))
        everything = await store.candidates("alice", EVERY_SIGNAL, scope="all")
        assert len(active) == 3
        assert ids(everything) == active
        assert await store.candidates("alice", EVERY_SIGNAL, scope="archive") == []
    finally:
        await store.close()
