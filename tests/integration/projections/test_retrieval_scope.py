"""Retrieval scopes over real stores (Redis, Qdrant Edge): a memory capacity evicted from
working or episodic memory is out of the active set, found in the archive and in ``all``, and a
query without a mode searches ``all`` by relevance; a time range filters by ``occurred_at``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.episodic.edge import EdgeEpisodicMemory
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.models import RetrievalRequest
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.memory_events import DerivedEvent, SourcePosition

pytestmark = pytest.mark.integration

EMBEDDER = HashingEmbedder()
CONFIG = load_processing_config(episodic_capacity=3, working_capacity=2)
START = datetime(2026, 3, 2, 9, tzinfo=UTC)
CHAT = [
    ("my sister Ana moved to Lisbon in spring", 0.3),
    ("we talked about the garden and the tomatoes", 0.3),
    ("the car broke down on the motorway", 0.9),
    ("I booked the dentist for Tuesday", 0.3),
    ("the roof leaked during the storm", 0.9),
    ("my boss approved the new project", 0.9),
    ("we watched a film about whales", 0.3),
    ("the insurance paid for the roof", 0.9),
    ("I started running in the mornings", 0.3),
]


def conversation(agent_id: str) -> list[DerivedEvent]:
    state = AgentMemoryState()
    log: list[DerivedEvent] = []
    for i, (content, importance) in enumerate(CHAT):
        out = record(
            Observation(
                agent_id=agent_id,
                content=content,
                importance=importance,
                occurred_at=START + timedelta(days=i),
            ),
            state,
            config=CONFIG,
            embedder=EMBEDDER,
            config_version=CONFIG.version(EMBEDDER.id),
            position=SourcePosition(topic="agent.observations", partition=0, offset=i),
        )
        log.extend([out.memory, *out.forgotten])
        state = out.state
    return log


@pytest.fixture
async def engine(
    working_store: RedisWorkingMemory, edge_store: EdgeEpisodicMemory
) -> RetrievalEngine:
    log = conversation("chat")
    await working_store.apply(log)
    await edge_store.apply(log)
    return RetrievalEngine(working_store, edge_store, EMBEDDER)


def contents(answer: object) -> list[str]:
    return [m.content for m in answer.results]  # type: ignore[attr-defined]


async def test_an_evicted_memory_is_found_in_the_archive_not_in_the_active_set(
    engine: RetrievalEngine,
) -> None:
    sister = "my sister Ana moved to Lisbon in spring"
    query = "where does my sister Ana live"

    active = await engine.retrieve(
        "chat", RetrievalRequest(mode="relevance", query=query, top_k=20)
    )
    archive = await engine.retrieve(
        "chat", RetrievalRequest(mode="relevance", query=query, scope="archive", top_k=20)
    )
    asked = await engine.retrieve("chat", RetrievalRequest(query=query, top_k=1))

    assert sister not in contents(active)
    assert sister in contents(archive)
    assert (asked.mode, asked.scope, contents(asked)) == ("relevance", "all", [sister])
    assert active.working_count + active.episodic_count == 2 + 3
    in_working = {m.content for m in active.results if m.store == "working"}
    assert in_working
    assert not in_working & set(contents(archive))  # still active, so not archived
    everything = await engine.retrieve(
        "chat", RetrievalRequest(mode="saliency", scope="all", top_k=50)
    )
    assert sorted(contents(everything)) == sorted(c for c, _ in CHAT)


async def test_a_time_range_keeps_the_days_asked_for(engine: RetrievalEngine) -> None:
    window = {
        "occurred_after": (START + timedelta(days=2)).isoformat(),
        "occurred_before": (START + timedelta(days=4, hours=1)).isoformat(),
    }
    request = RetrievalRequest.model_validate(
        {"mode": "saliency", "scope": "all", "top_k": 50, "filter": window}
    )

    answer = await engine.retrieve("chat", request)

    assert sorted(contents(answer)) == sorted(c for c, _ in CHAT[2:5])


async def test_weighted_with_a_query_weighs_relevance(engine: RetrievalEngine) -> None:
    asked = RetrievalRequest(mode="weighted", query="the roof and the insurance", scope="all")
    answer = await engine.retrieve("chat", asked)
    assert answer.weights is not None
    assert answer.weights.relevance == 0.5
    assert answer.results[0].content == "the insurance paid for the roof"
    unweighted = RetrievalRequest(
        mode="weighted", query="the roof", weights={"relevance": 0.0}, scope="all"
    )
    assert (await engine.retrieve("chat", unweighted)).weights.relevance == 0.0  # type: ignore[union-attr]


async def test_a_wall_clock_agent_ranks_by_hours_since_its_events(
    engine: RetrievalEngine,
) -> None:
    now = START + timedelta(days=len(CHAT))
    asked = RetrievalRequest(mode="saliency", scope="all", current_time=now, top_k=3)

    answer = await engine.retrieve("chat", asked)

    assert answer.clock.axis == "hour"
    ages = [m.breakdown.age for m in answer.results]  # type: ignore[union-attr]
    # Importance fades by e^-0.1 an hour: yesterday's routine outranks the day before's news.
    assert ages == [24, 48, 72]
    assert answer.results[0].content == "I started running in the mornings"
