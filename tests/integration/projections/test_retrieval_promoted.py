"""A query over real stores (Redis, Qdrant Edge) after the lifecycle rules ran for years: a working
memory promoted at a year end and then pushed out of working memory leaves two memories at one
place (its ``seq``) in scope ``all``: the archived original and the promoted copy. A query without
a mode (relevance over ``all``, the commonest request) answered 500 on such an agent."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

from processors.batch_order import topic_rank
from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.lifecycle import Deriving
from processors.state_fold import FoldedState
from processors.summarising import ExtractiveSummariser
from processors.worker_step import carry, derive_batch
from projections.episodic.edge import EdgeEpisodicMemory
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.models import RetrievalRequest
from projections.working.redis_store import RedisWorkingMemory
from schemas.memory_events import DerivedEvent, MemoryPromoted
from tests.benchmarks.bench_deriving import TOPICS, records_of

pytestmark = pytest.mark.integration

AGENTS = 8


def lived_years() -> list[DerivedEvent]:
    """Ten simulated years of the benchmarks' households, derived by the worker's rules."""
    config = load_processing_config()
    embedder, summariser = HashingEmbedder(384), ExtractiveSummariser()
    ctx = Deriving(config, embedder, summariser, config.version(embedder.id, summariser.id))
    folded, partition_of = FoldedState(schedule_topic=TOPICS.schedule), dict[str, int]()
    records = records_of(800, AGENTS)
    derived: list[DerivedEvent] = []
    for i in range(0, len(records), 200):
        step = derive_batch(
            records[i : i + 200],
            folded,
            partition_of,
            ctx=ctx,
            rank=topic_rank(TOPICS),
            failed_at=datetime.now(UTC),
        )
        derived.extend(step.result.derived)
        carry(folded, partition_of, step)
    return derived


async def test_a_query_ranks_an_archived_original_beside_its_promoted_copy(
    working_store: RedisWorkingMemory, edge_store: EdgeEpisodicMemory
) -> None:
    derived = lived_years()
    await working_store.apply(derived)
    await edge_store.apply(derived)
    engine = RetrievalEngine(working_store, edge_store, HashingEmbedder(384))

    in_working = {
        m.memory_id for n in range(AGENTS) for m in await working_store.memories(f"H{n:05d}")
    }
    promoted = [e for e in derived if isinstance(e, MemoryPromoted)]
    left = Counter(e.agent_id for e in promoted if e.promoted_from not in in_working)
    assert left, "some promoted memory's original has left working memory for the archive"

    for number in range(AGENTS):
        agent = f"H{number:05d}"
        answer = await engine.retrieve(agent, RetrievalRequest(query="flood", top_k=100))

        assert (answer.mode, answer.scope) == ("relevance", "all")
        assert answer.results, agent
        assert all(0.0 <= m.score <= 1.0 for m in answer.results)
