"""Ranking the store's candidates equals ranking the whole pool while the pool is within the
candidate bound: the engine with a candidate limit and the engine that reads every memory give
the same results (ids, ranks, scores, breakdowns) on seeded random pools, in every mode, with and
without a query, a filter, context tags; past the bound, what the engine reads stays bounded."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.episodic.edge import EdgeEpisodicMemory
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.models import RetrievalRequest
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.memory_events import DerivedEvent, SourcePosition
from tests.integration.projections.lifecycle_events import promoted

pytestmark = pytest.mark.integration

EMBEDDER = HashingEmbedder()
WORDS = [
    "river",
    "levee",
    "flood",
    "basement",
    "insurance",
    "claim",
    "denied",
    "storm",
    "garden",
    "quiet",
    "meeting",
    "neighbor",
    "the",
    "and",
]
LIMIT = 40


START = datetime(2026, 1, 1, tzinfo=UTC)
"""The wall clock of the pools' events: each occurred within 20 days after it, in an order of
its own (not the order it was recorded in, as a producer's backfill or a late record is)."""


def pool(
    agent_id: str, seed: int, size: int, *, ties: bool = True, promote: bool = False
) -> list[DerivedEvent]:
    """A random life: words, importance on both sides of the episodic threshold, tags, a year
    or a step on some memories only (so imputed times are ranked too), and a time of its
    event out of the recording order (with ``ties``, some at the same instant; without, each
    at a minute of its own). With ``promote``, every working memory gets an episodic copy, as
    a consolidation that promotes them all makes."""
    rng = random.Random(seed)
    minutes = rng.sample(range(20 * 24 * 60), size)
    config = load_processing_config(episodic_capacity=size, working_capacity=rng.randint(2, 10))
    state = AgentMemoryState()
    log: list[DerivedEvent] = []
    axis = rng.choice(["year", "step", "none"])
    for i in range(size):
        when = {} if axis == "none" or rng.random() < 0.2 else {axis: i // rng.randint(1, 4)}
        observation = Observation(
            agent_id=agent_id,
            content=" ".join(rng.choices(WORDS, k=rng.randint(2, 9))),
            importance=rng.choice([0.2, 0.5, 0.7, 0.8, 0.9, 0.95, rng.random()]),
            tags=tuple(rng.sample(WORDS[:12], rng.randint(0, 2))),
            occurred_at=START
            + (timedelta(hours=rng.randint(0, 20 * 24)) if ties else timedelta(minutes=minutes[i])),
            **when,  # type: ignore[arg-type]
        )
        out = record(
            observation,
            state,
            config=config,
            embedder=EMBEDDER,
            config_version=config.version(EMBEDDER.id),
            position=SourcePosition(topic="agent.observations", partition=seed, offset=i),
        )
        copies = [promoted(out.memory)] if promote and out.memory.destination == "working" else []
        log.extend([out.memory, *copies, *out.forgotten])
        state = out.state
    return log


def requests(rng: random.Random) -> list[RetrievalRequest]:
    query = " ".join(rng.choices(WORDS, k=3))
    top_k = rng.randint(1, 12)
    asked: list[dict[str, object]] = [
        {"mode": "two_phase"},
        {"mode": "two_phase", "query": query},
        {"mode": "weighted", "tags": rng.sample(WORDS[:12], 2)},
        {"mode": "weighted", "query": query, "weights": {"relevance": 0.5, "interference": 0.3}},
        {"mode": "saliency"},
        {"mode": "basic"},
        {"mode": "constrained", "arousal": rng.random()},
        {"mode": "generative", "query": query},
        {"mode": "relevance", "query": query},
        {"mode": "relevance", "query": "the and"},
        {"mode": "saliency", "filter": {"min_importance": 0.75, "kinds": ["episodic"]}},
        {"mode": "relevance", "query": query, "filter": {"tags": [rng.choice(WORDS[:12])]}},
        {"mode": "recent", "current_time": RECENT_NOW, "days": rng.choice([1, 3.5, 7, 30])},
        {
            "mode": "recent",
            "current_time": RECENT_NOW,
            "query": query,
            "filter": {"tags": ["flood"]},
        },
    ]
    for body in asked:
        if body["mode"] not in ("basic", "constrained"):
            body["top_k"] = top_k
    return [RetrievalRequest.model_validate(body) for body in asked]


RECENT_NOW = (START + timedelta(days=15)).isoformat()
"""The recent mode's time, given: each engine would pin its own now otherwise."""


def shown(response: object) -> list[tuple[object, ...]]:
    results = response.results  # type: ignore[attr-defined]
    return [(m.memory_id, m.rank, m.score, m.similarity, m.breakdown) for m in results]


@pytest.mark.parametrize("seed", range(8))
async def test_candidates_rank_as_the_whole_pool_within_the_bound(
    working_store: RedisWorkingMemory, edge_store: EdgeEpisodicMemory, seed: int
) -> None:
    rng = random.Random(seed)
    agent = f"A{seed}"
    log = pool(agent, seed, size=rng.randint(1, LIMIT + 8))
    await working_store.apply(log)
    await edge_store.apply(log)
    assert await edge_store.count(agent) <= LIMIT
    bounded = RetrievalEngine(
        working_store,
        edge_store,
        EMBEDDER,
        candidate_limit=LIMIT,
        relevance_candidate_limit=LIMIT,
    )
    whole = RetrievalEngine(working_store, edge_store, EMBEDDER, candidate_limit=None)

    for request in requests(rng):
        mine = await bounded.retrieve(agent, request)
        reference = await whole.retrieve(agent, request)
        assert shown(mine) == shown(reference), request


async def test_past_the_bound_the_engine_reads_a_bounded_set(
    working_store: RedisWorkingMemory, edge_store: EdgeEpisodicMemory
) -> None:
    log = pool("big", 99, size=400)
    await working_store.apply(log)
    await edge_store.apply(log)
    assert await edge_store.count("big") > 200
    engine = RetrievalEngine(working_store, edge_store, EMBEDDER, candidate_limit=10)

    asked = RetrievalRequest(mode="generative", query="flood insurance claim", top_k=5)
    answer = await engine.retrieve("big", asked)

    # 10 newest + oldest, 10 most important + least, 10 nearest, 10 lexical; then the
    # turns beside the 10 most relevant: 20 seqs, at most an original and a copy at each.
    assert answer.episodic_count <= 42 + 2 * 20
    assert len(answer.results) == 5
    important = MemoryFilter(min_importance=0.9)
    stored = [*await working_store.memories("big"), *await edge_store.memories("big", limit=1000)]
    admitted = {m.memory_id for m in stored if important.admits(m)}
    filtered = RetrievalRequest(mode="saliency", filter=important)
    assert len(admitted) > filtered.top_k, "the filter leaves more than an answer holds"
    kept = (await engine.retrieve("big", filtered)).results
    assert len(kept) == filtered.top_k
    assert {m.memory_id for m in kept} <= admitted
    assert all(m.importance >= 0.9 for m in kept)


@pytest.mark.parametrize("scope", ["active", "all", "archive"])
@pytest.mark.parametrize("top_k", [1, 10])
async def test_past_the_bound_the_recent_mode_is_still_exact(
    working_store: RedisWorkingMemory, edge_store: EdgeEpisodicMemory, top_k: int, scope: str
) -> None:
    """Its candidates are the newest by the events' time within the window, so as long as
    ``top_k`` is within the bound the newest ``top_k`` are among them, however far the pool
    goes past it and whatever order the events were recorded in (events at the same instant
    as the last one in the bound may be cut either way: the store orders by time alone).
    Outside scope active, an archived memory and the copy promoted from it share their time:
    read by the bound alone, the two took two of its places, and fewer than ``top_k`` came
    back."""
    agent = f"busy-{scope}-{top_k}"
    log = pool(agent, 7, size=300, ties=False, promote=scope != "active")
    await working_store.apply(log)
    await edge_store.apply(log)
    bounded = RetrievalEngine(working_store, edge_store, EMBEDDER, candidate_limit=10)
    whole = RetrievalEngine(working_store, edge_store, EMBEDDER, candidate_limit=None)

    asked = RetrievalRequest(
        mode="recent", current_time=RECENT_NOW, days=7, top_k=top_k, scope=scope
    )
    mine = await bounded.retrieve(agent, asked)
    reference = await whole.retrieve(agent, asked)

    assert len(reference.results) == top_k
    assert shown(mine) == shown(reference)
    # The newest 10 points in the window (20 outside scope active), copies left out.
    assert mine.episodic_count <= (10 if scope == "active" else 20)
