"""Ten simulated years for a few hundred households through the real broker, Redis and Qdrant
Edge: promotions, summaries and forgetting match the pure model, and rebuilding the
projections from the log gives exactly the memories of the live run."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from processors.config import LifecycleRules, PruningRules
from processors.lifecycle import Deriving, on_agent_event, on_retrieval
from processors.recording import AgentMemoryState
from processors.summarising import ExtractiveSummariser
from projections.episodic.edge import EdgeEpisodicMemory
from projections.memory import StoredMemory
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.codec import decode_retrieval
from schemas.memory_events import (
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRetrieved,
    MemorySummarised,
)
from schemas.topics import Topics
from streams.eventlog.derived_log import read_partitions, read_records
from streams.eventlog.publisher import AsyncPublisher
from streams.privacy.sealing import RecordSealer
from streams.rebuild.from_log import rebuild_projections
from streams.runtime.node import Endpoints, Node
from streams.settings import processing_config
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

AGENTS = [f"H{i:03d}" for i in range(200)]
RETRIEVING = AGENTS[::10]
"""These households look at their session summaries after year 2, which keeps them (MUS)."""
YEARS = range(1, 11)
LIFECYCLE = LifecycleRules(pruning=PruningRules(l1_min_age=3))
"""Seed 001's thresholds; a short minimum age so that pruning happens within ten years."""


def year_of(agent: str, year: int) -> list[Observation]:
    """Seed 004's household year: routine news, a decision in the consolidation gate band
    (seed 003: 0.6 <= I < 0.7, so the burn draw decides), and one major flood (episodic)."""
    n = int(agent[1:])
    return [
        Observation(
            agent_id=agent,
            agent_type="household",
            event_id=f"{agent}-{year}-{i}",
            occurred_at=datetime(2000 + year, 3, 1 + i, tzinfo=UTC),
            year=year,
            importance=importance,
            tags=tags,
            content=text,
        )
        for i, (importance, tags, text) in enumerate(
            [
                (0.3, ("routine",), f"Year {year}: a quiet month on street {n % 7}"),
                (0.5, ("policy",), f"Year {year}: the town discussed levee funding again"),
                (0.65, ("insurance",), f"Year {year}: I compared flood insurance premiums"),
                (0.9, ("flood",), f"Year {year}: the river flooded {n % 5} houses nearby"),
            ]
        )
    ]


@dataclass
class Expected:
    """The pure model's run of the same streams, per agent."""

    states: dict[str, AgentMemoryState] = field(default_factory=dict)
    derived: dict[str, list[DerivedEvent]] = field(default_factory=lambda: defaultdict(list))


@pytest.fixture(scope="module", params=["worker", "projector"])
async def run(
    request: pytest.FixtureRequest,
    kafka_bootstrap: str,
    redis_server_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[Node, Topics, list[MemoryRetrieved]]]:
    """The same ten years with episodic memory written by the worker in its batch, and by the
    episodic projector from the log (how ``engram up --workers N`` runs)."""
    prefix = f"years{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(
        prefix,
        tmp_path_factory.mktemp("years"),
        lifecycle=LIFECYCLE,
        schedule_interval=0,
        episodic_writer=request.param,
    )
    topics = Topics(prefix)
    node = await Node(
        settings,
        Endpoints(kafka_bootstrap, redis_server_url),
        run_projector=request.param == "projector",
    ).start()
    try:
        assert node.pipeline is not None
        assert node.http_url is not None
        async with (
            AsyncPublisher(kafka_bootstrap, topics=topics) as publisher,
            httpx.AsyncClient(base_url=node.http_url, timeout=10) as http,
        ):
            for year in [*YEARS, 11]:
                events = [e for a in AGENTS for e in year_of(a, year)]
                if year == 11:  # one event each closes year 10
                    events = [e for e in events if e.event_id.endswith("-0")]
                await node.pipeline.stats.wait_for(
                    await publisher.publish_many(events), timeout=120
                )
                if year == 3:
                    await retrieve_summaries(node, http)
        retrievals = [
            r
            for _, r in await read_records(
                kafka_bootstrap,
                [topics.access],
                range(settings.partitions),
                decode_retrieval,
                sealer=RecordSealer(node.keyring),
            )
        ]
        yield node, topics, retrievals
    finally:
        await node.stop()


async def retrieve_summaries(node: Node, http: httpx.AsyncClient) -> None:
    """Each retrieving household asks for its L1 summaries; then wait until the processor has
    counted every retrieval, so the model and the stack see them at the same point."""
    assert node.pipeline is not None
    assert node.episodic is not None
    deadline = time.monotonic() + 60
    for agent in RETRIEVING:
        # Summaries of years 1 and 2; a projector may still be applying them.
        while len(await node.episodic.memories(agent, 10, levels=[1])) < 2:
            assert time.monotonic() < deadline, f"{agent}'s summaries were not projected"
            await asyncio.sleep(0.05)
        response = await http.post(
            f"/v1/agents/{agent}/retrieve", json={"levels": [1], "top_k": 5, "current_year": 3}
        )
        assert response.status_code == 200, response.text
        assert response.json()["results"], f"{agent} has no L1 summary to retrieve"
    folded = node.pipeline.folded.states
    while not all(any(s.retrievals for s in folded[a].summaries) for a in RETRIEVING):
        assert time.monotonic() < deadline, "the processor did not count the retrievals"
        await asyncio.sleep(0.05)


def expected_run(node: Node, retrievals: list[MemoryRetrieved]) -> Expected:
    """The same streams through the pure functions, retrievals where the test made them."""
    assert node.pipeline is not None
    pipeline = node.pipeline
    ctx = Deriving(
        pipeline.config, pipeline.embedder, ExtractiveSummariser(), pipeline.config_version
    )
    assert ctx.config == processing_config(node.settings)
    expected = Expected()
    by_agent: dict[str, list[MemoryRetrieved]] = defaultdict(list)
    for retrieval in retrievals:
        by_agent[retrieval.agent_id].append(retrieval)
    for agent in AGENTS:
        state = AgentMemoryState()
        for year in [*YEARS, 11]:
            events = year_of(agent, year)[: 1 if year == 11 else None]
            for event in events:
                out = on_agent_event(event, state, ctx)
                state = out.state
                expected.derived[agent].extend(out.events)
            if year == 3:
                for retrieval in by_agent[agent]:
                    state = on_retrieval(retrieval, state)
        expected.states[agent] = state
    return expected


def without_positions(event: DerivedEvent) -> DerivedEvent:
    return event.model_copy(update={"source_position": None})


async def test_ten_years_of_households_follow_the_pure_model(
    run: tuple[Node, Topics, list[MemoryRetrieved]], kafka_bootstrap: str
) -> None:
    node, topics, retrievals = run
    assert len(retrievals) == len(RETRIEVING)
    expected = expected_run(node, retrievals)
    logged = await read_partitions(
        kafka_bootstrap,
        [topics.items, topics.lifecycle],
        range(node.settings.partitions),
        sealer=RecordSealer(node.keyring),
    )
    per_agent: dict[str, list[DerivedEvent]] = defaultdict(list)
    for event in logged:
        per_agent[event.agent_id].append(without_positions(event))
    for agent in AGENTS:
        want = [without_positions(e) for e in expected.derived[agent]]
        got = per_agent[agent]
        assert sorted(e.event_id for e in got) == sorted(e.event_id for e in want), agent
        by_id = {e.event_id: e for e in got}
        assert all(by_id[e.event_id] == e for e in want), agent

    kinds = Counter(type(e).__name__ for e in logged)
    assert kinds["ConsolidationCompleted"] == len(AGENTS) * 10
    summaries = [e for e in logged if isinstance(e, MemorySummarised)]
    assert Counter(s.level for s in summaries) == {1: len(AGENTS) * 10, 2: len(AGENTS)}
    promoted = [e for e in logged if isinstance(e, MemoryPromoted)]
    # Seed 003: about 80% of the gate-band decisions are burned into episodic memory.
    assert 0.7 < len(promoted) / (len(AGENTS) * 10) < 0.9
    assert {p.decision.rule for p in promoted} == {"burn"}
    reasons = Counter(e.reason for e in logged if isinstance(e, MemoryForgotten))
    assert reasons["capacity"] > 0
    assert reasons["utility"] > 0
    # MUS (seed 001): retrieved L1 summaries survive; unretrieved ones older than 3 years go.
    pruned = {e.memory_id for e in logged if isinstance(e, MemoryForgotten) and e.level == 1}
    for agent in AGENTS:
        first_l1 = next(s for s in summaries if s.agent_id == agent and s.level == 1)
        assert (first_l1.memory_id in pruned) == (agent not in RETRIEVING), agent
    assert all(e.source_position is not None for e in logged)

    # The projections hold exactly what the model keeps (once a projector has caught up).
    projector = node.projector
    deadline = time.monotonic() + 60
    while projector is not None and (projector.records < len(logged) or projector.held):
        assert time.monotonic() < deadline, "the episodic projector did not catch up"
        await asyncio.sleep(0.05)
    for agent in AGENTS[:40]:
        state = expected.states[agent]
        working = await node.working.memories(agent)
        assert [m.memory_id for m in working] == list(reversed(state.working_ids))
        assert node.episodic is not None
        episodic = await node.episodic.memories(agent, 1000, levels=None)
        assert {m.memory_id for m in episodic} == {e.memory_id for e in state.episodic} | {
            s.memory_id for s in state.summaries
        }


async def test_rebuilding_the_projections_from_the_log_gives_the_live_memories(
    run: tuple[Node, Topics, list[MemoryRetrieved]],
    kafka_bootstrap: str,
    redis_server_url: str,
    tmp_path: Path,
) -> None:
    node, topics, _ = run
    assert node.episodic is not None
    working = RedisWorkingMemory.from_url(redis_server_url, f"rebuilt{uuid.uuid4().hex[:8]}")
    episodic = EdgeEpisodicMemory.open(tmp_path / "rebuilt", node.embedder.dim)
    try:
        applied = await rebuild_projections(
            kafka_bootstrap,
            topics,
            range(node.settings.partitions),
            [working, episodic],
            batch_size=3000,
            sealer=RecordSealer(node.keyring),
        )
        assert applied > len(AGENTS) * 41
        for agent in AGENTS:
            live: list[StoredMemory] = [
                *await node.working.memories(agent),
                *await node.episodic.memories(agent, 1000, levels=None),
            ]
            rebuilt = [
                *await working.memories(agent),
                *await episodic.memories(agent, 1000, levels=None),
            ]
            assert rebuilt == live, agent
            assert any(m.level == 2 for m in rebuilt)
    finally:
        await working.clear()
        await working.close()
        await episodic.close()
