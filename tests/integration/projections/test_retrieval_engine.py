"""The retrieval engine over real stores (Redis, Qdrant Edge): which levels it reads, that a
promoted copy is ranked once, as its working original, in every mode, and that filters choose
what is read and returned."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import pytest

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.episodic.edge import EdgeEpisodicMemory
from projections.interfaces import ProjectionError
from projections.retrieval.basic import Arousal, StoredArousal
from projections.retrieval.breakdowns import RelevanceBreakdown
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.models import Mode, RetrievalRequest
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.memory_events import (
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemorySummarised,
    SourcePosition,
)
from tests.integration.projections.lifecycle_events import (
    EMBEDDER,
    consolidated,
    promoted,
    summarised,
)

pytestmark = pytest.mark.integration

CONFIG = load_processing_config()
TOPIC = "agent.observations"
AGENT = "H001"


def at(offset: int) -> SourcePosition:
    return SourcePosition(topic=TOPIC, partition=0, offset=offset)


@dataclass(frozen=True)
class Year:
    """Three working memories and one episodic; the year end promotes the first two working
    memories and summarises, the L1 triggered by the last working memory's event."""

    recorded: list[MemoryRecorded]
    copies: list[MemoryPromoted]
    l1: MemorySummarised
    l2: MemorySummarised

    @property
    def working(self) -> list[MemoryRecorded]:
        return [m for m in self.recorded if m.destination == "working"]

    @property
    def episodic(self) -> MemoryRecorded:
        [memory] = [m for m in self.recorded if m.destination == "episodic"]
        return memory

    @property
    def log(self) -> list[DerivedEvent]:
        year_end = consolidated(AGENT, self.copies, position=at(4))
        return [*self.recorded, *self.copies, year_end, self.l1, self.l2]


def a_year() -> Year:
    state = AgentMemoryState()
    memories: list[MemoryRecorded] = []
    for offset, (content, importance) in enumerate(
        [
            ("the river rose over the road", 0.3),
            ("we sandbagged the porch", 0.3),
            ("the levee broke at night", 0.9),
            ("the school became a shelter", 0.3),
        ]
    ):
        result = record(
            Observation(agent_id=AGENT, content=content, importance=importance, year=1),
            state,
            config=CONFIG,
            embedder=EMBEDDER,
            config_version=CONFIG.version(EMBEDDER.id),
            position=at(offset),
        )
        memories.append(result.memory)
        state = result.state
    working = [m for m in memories if m.destination == "working"]
    l1 = summarised(
        memories,
        level=1,
        content="a flood season: the levee broke and the town sheltered in the school",
        seq=4,
        trigger_event_id=working[-1].source_event_id,
        position=at(5),
    )
    l2 = summarised(
        [l1],
        level=2,
        content="the year the water came into town",
        seq=5,
        trigger_event_id=memories[0].event_id,
        position=at(6),
    )
    return Year(memories, [promoted(m, position=at(4)) for m in working[:2]], l1, l2)


@pytest.fixture
async def year(working_store: RedisWorkingMemory, edge_store: EdgeEpisodicMemory) -> Year:
    """A year applied to both stores, each taking its own events from the same log."""
    year = a_year()
    await working_store.apply(year.log)
    await edge_store.apply(year.log)
    return year


@pytest.fixture
def engine(working_store: RedisWorkingMemory, edge_store: EdgeEpisodicMemory) -> RetrievalEngine:
    return RetrievalEngine(working_store, edge_store, HashingEmbedder())


@pytest.mark.parametrize(
    "mode", ["two_phase", "weighted", "saliency", "basic", "constrained", "generative", "recent"]
)
async def test_a_promoted_copy_is_ranked_once_as_its_working_original(
    engine: RetrievalEngine, working_store: RedisWorkingMemory, year: Year, mode: Mode
) -> None:
    response = await engine.retrieve(AGENT, RetrievalRequest(top_k=10, mode=mode))

    assert response.working_count == 3
    assert response.episodic_count == 1, "the copies of working memories are not considered"
    shown = {(r.memory_id, r.store) for r in response.results}
    assert shown == {(m.memory_id, "working") for m in year.working} | {
        (year.episodic.memory_id, "episodic")
    }

    first = year.working[0]
    await working_store.apply(
        [
            MemoryForgotten(
                agent_id=AGENT,
                memory_id=first.memory_id,
                destination="working",
                reason="capacity",
                caused_by=first.event_id,
                source_position=at(7),
                config_version=first.config_version,
            )
        ]
    )
    later = await engine.retrieve(AGENT, RetrievalRequest(top_k=10, mode=mode))

    assert (later.working_count, later.episodic_count) == (2, 2)
    [copy] = [r for r in later.results if r.source_event_id == first.source_event_id]
    assert (copy.memory_id, copy.store) == (year.copies[0].memory_id, "episodic")


async def test_a_summary_is_not_taken_for_a_copy_of_its_trigger(
    engine: RetrievalEngine, year: Year
) -> None:
    """The L1's source is the event of the last working memory: same source, other level."""
    trigger = year.working[-1]
    assert year.l1.source_event_id == trigger.source_event_id

    response = await engine.retrieve(AGENT, RetrievalRequest(top_k=10, levels=(0, 1)))

    shown = {r.memory_id: r.level for r in response.results}
    assert shown[trigger.memory_id] == 0
    assert shown[year.l1.memory_id] == 1
    assert year.l2.memory_id not in shown
    assert response.episodic_count == 2


async def test_levels_choose_what_is_read_and_ranked(engine: RetrievalEngine, year: Year) -> None:
    default = await engine.retrieve(AGENT, RetrievalRequest(top_k=10))
    assert {r.level for r in default.results} == {0}
    assert len(default.results) == 4

    summaries = await engine.retrieve(AGENT, RetrievalRequest(top_k=10, levels=(2, 1)))
    assert summaries.working_count == 0
    assert [(r.memory_id, r.level, r.store) for r in summaries.results] == [
        (year.l2.memory_id, 2, "episodic"),
        (year.l1.memory_id, 1, "episodic"),
    ]

    everything = await engine.retrieve(AGENT, RetrievalRequest(top_k=10, levels=(0, 1, 2)))
    assert sorted(r.level for r in everything.results) == [0, 0, 0, 0, 1, 2]


async def test_a_query_searches_only_the_asked_levels(engine: RetrievalEngine, year: Year) -> None:
    """Searched by the L1's own words, which no memory of an event matches as well."""
    query = year.l1.content

    events = await engine.retrieve(AGENT, RetrievalRequest(query=query, top_k=10))
    assert year.l1.memory_id not in {r.memory_id for r in events.results}
    assert {r.level for r in events.results} == {0}

    l1_only = await engine.retrieve(AGENT, RetrievalRequest(query=query, top_k=10, levels=(1,)))
    [found] = l1_only.results
    assert found.memory_id == year.l1.memory_id
    assert found.similarity == pytest.approx(1.0, abs=1e-5)


async def test_working_memory_is_not_read_when_level_0_is_not_asked_for(
    edge_store: EdgeEpisodicMemory,
) -> None:
    """An unreachable Redis fails a retrieval only if the retrieval needs it."""
    year = a_year()
    await edge_store.apply(year.log)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = RedisWorkingMemory.from_url(f"redis://127.0.0.1:{port}/0", connect_timeout=1.0)
    engine = RetrievalEngine(unreachable, edge_store, HashingEmbedder())
    try:
        summaries = await engine.retrieve(AGENT, RetrievalRequest(levels=(1, 2)))
        assert len(summaries.results) == 2
        with pytest.raises(ProjectionError, match="working memory"):
            await engine.retrieve(AGENT, RetrievalRequest(levels=(0, 1)))
    finally:
        await unreachable.close()


async def test_kinds_filter_what_is_read_and_returned(engine: RetrievalEngine, year: Year) -> None:
    """Without working memory read, the promoted copies are episodic memories like any other."""
    episodic = await engine.retrieve(
        AGENT, RetrievalRequest(top_k=10, filter=MemoryFilter(kinds=("episodic",)))
    )
    assert episodic.working_count == 0
    assert {(r.memory_id, r.store) for r in episodic.results} == {
        (m.memory_id, "episodic") for m in [year.episodic, *year.copies]
    }

    summaries = await engine.retrieve(
        AGENT, RetrievalRequest(filter=MemoryFilter(kinds=("summary_l2", "summary_l1")))
    )
    assert {r.memory_id for r in summaries.results} == {year.l1.memory_id, year.l2.memory_id}

    working = await engine.retrieve(
        AGENT, RetrievalRequest(top_k=10, mode="saliency", filter=MemoryFilter(kinds=("working",)))
    )
    assert {(r.memory_id, r.store) for r in working.results} == {
        (m.memory_id, "working") for m in year.working
    }

    nothing = await engine.retrieve(AGENT, RetrievalRequest(filter=MemoryFilter(kinds=("fact",))))
    assert nothing.results == ()


async def test_importance_and_year_filters_over_both_stores(
    engine: RetrievalEngine, year: Year
) -> None:
    important = await engine.retrieve(
        AGENT, RetrievalRequest(mode="basic", filter=MemoryFilter(min_importance=0.5))
    )
    assert [r.memory_id for r in important.results] == [year.episodic.memory_id]

    other_year = await engine.retrieve(
        AGENT, RetrievalRequest(filter=MemoryFilter(year_from=2), levels=(0, 1, 2))
    )
    assert other_year.results == ()


async def test_an_episodic_only_filter_spares_an_unreachable_redis(
    edge_store: EdgeEpisodicMemory,
) -> None:
    year = a_year()
    await edge_store.apply(year.log)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = RedisWorkingMemory.from_url(f"redis://127.0.0.1:{port}/0", connect_timeout=1.0)
    engine = RetrievalEngine(unreachable, edge_store, HashingEmbedder())
    try:
        episodic_only = MemoryFilter(kinds=("episodic",))
        response = await engine.retrieve(
            AGENT, RetrievalRequest(mode="constrained", arousal=0.0, filter=episodic_only)
        )
        assert len(response.results) == 3
        # The agent's arousal lives in Redis too: unknown is refused, not guessed as calm.
        with pytest.raises(ProjectionError, match="arousal"):
            await engine.retrieve(AGENT, RetrievalRequest(mode="constrained", filter=episodic_only))
        with pytest.raises(ProjectionError, match="working memory"):
            await engine.retrieve(
                AGENT, RetrievalRequest(filter=MemoryFilter(kinds=("working", "episodic")))
            )
    finally:
        await unreachable.close()


async def test_relevance_mode_finds_the_memory_the_query_names(
    engine: RetrievalEngine, year: Year
) -> None:
    response = await engine.retrieve(
        AGENT, RetrievalRequest(mode="relevance", query="when did the levee break", top_k=4)
    )

    first = response.results[0]
    assert first.memory_id == year.episodic.memory_id
    assert isinstance(first.breakdown, RelevanceBreakdown)
    assert first.breakdown.parts["lexical_norm"] == 1.0, "levee; broke is not break to a stemmer"
    assert first.breakdown.parts["similarity"] > 0.0, "searched by vector in Qdrant"
    working = [r for r in response.results if r.store == "working"]
    assert working
    assert all(
        isinstance(r.breakdown, RelevanceBreakdown) and "similarity" in r.breakdown.parts
        for r in working
    ), "working memories are embedded at query time"


async def test_tag_filter_and_constrained_arousal_from_the_agent(
    working_store: RedisWorkingMemory, edge_store: EdgeEpisodicMemory
) -> None:
    """Tags as the observations carried them; arousal from the engine's hook, as the lead
    wires it to the working store."""
    state = AgentMemoryState()
    log: list[DerivedEvent] = []
    for offset in range(12):
        flood = offset % 3 == 0
        result = record(
            Observation(
                agent_id=AGENT,
                content=f"{'flood' if flood else 'dry'} day number {offset}",
                importance=0.9 if offset == 0 else 0.3,
                year=offset,
                tags=("Flood",) if flood else ("Routine",),
            ),
            state,
            config=CONFIG,
            embedder=EMBEDDER,
            config_version=CONFIG.version(EMBEDDER.id),
            position=at(offset),
        )
        log.append(result.memory)
        state = result.state
    await working_store.apply(log)
    await edge_store.apply(log)

    async def aroused(agent_id: str) -> StoredArousal | None:
        return Arousal(1.0) if agent_id == AGENT else None

    engine = RetrievalEngine(working_store, edge_store, HashingEmbedder(), arousal_of=aroused)

    floods = await engine.retrieve(
        AGENT, RetrievalRequest(top_k=10, filter=MemoryFilter(tags=("flood",)))
    )
    assert sorted(r.year or 0 for r in floods.results) == [0, 3, 6, 9]

    response = await engine.retrieve(AGENT, RetrievalRequest(mode="constrained"))
    sizes = {(r.breakdown.count, r.breakdown.system) for r in response.results}  # type: ignore[union-attr]
    assert sizes == {(7, "SYSTEM_2")}
    assert len(response.results) == 9
