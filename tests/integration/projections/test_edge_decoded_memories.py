"""The embedded store's decoded memories (``projections/episodic/decoded_memories.py``) against
a real Qdrant Edge shard: a warm read answers what a cold store answers, and a write is never
hidden by a memory decoded before it."""

from __future__ import annotations

from pathlib import Path

import pytest

from processors.lexical import query_vector
from projections.episodic.candidates import CandidateSignals
from projections.episodic.edge import EdgeEpisodicMemory
from schemas.memory_events import MemoryRecorded, SourcePosition
from tests.integration.projections.test_episodic_candidates_contract import QUERY, random_log
from tests.integration.projections.test_episodic_memory_contract import EMBEDDER, TOPIC

pytestmark = pytest.mark.integration

SIGNALS = CandidateSignals(
    10, recency=True, vector=EMBEDDER.embed(QUERY), lexical=query_vector(QUERY)
)
OTHER = "a quiet garden after the storm"
OTHER_SIGNALS = CandidateSignals(
    10, recency=True, vector=EMBEDDER.embed(OTHER), lexical=query_vector(OTHER)
)


async def test_a_warm_read_answers_what_a_reopened_store_answers(tmp_path: Path) -> None:
    store = EdgeEpisodicMemory.open(tmp_path, dim=EMBEDDER.dim)
    await store.apply(random_log("alice", 40, seed=7))
    cold = await store.candidates("alice", SIGNALS)
    warm = await store.candidates("alice", SIGNALS)
    # Another query meets memories kept from the first: each with its own cosine.
    warm_other = await store.candidates("alice", OTHER_SIGNALS)
    beside = CandidateSignals(vector=SIGNALS.vector, at_seqs=(2, 3, 17))
    warm_beside = await store.candidates("alice", beside)
    await store.close()

    reopened = EdgeEpisodicMemory.open(tmp_path, dim=EMBEDDER.dim)
    try:
        assert len(cold) > 10
        assert sorted(warm, key=lambda m: m.memory_id) == sorted(cold, key=lambda m: m.memory_id)
        fresh = await reopened.candidates("alice", SIGNALS)
        assert sorted(fresh, key=lambda m: m.memory_id) == sorted(warm, key=lambda m: m.memory_id)
        fresh_other = await reopened.candidates("alice", OTHER_SIGNALS)
        assert {m.memory_id for m in warm_other} & {m.memory_id for m in warm}
        by_id = sorted(fresh_other, key=lambda m: m.memory_id)
        assert sorted(warm_other, key=lambda m: m.memory_id) == by_id
        assert sorted(m.seq for m in warm_beside) == [2, 3, 17]
        assert warm_beside == await reopened.candidates("alice", beside)
    finally:
        await reopened.close()


async def test_a_rewritten_memory_is_read_as_rewritten(tmp_path: Path) -> None:
    store = EdgeEpisodicMemory.open(tmp_path, dim=EMBEDDER.dim)
    try:
        log = random_log("alice", 20, seed=8)
        await store.apply(log)
        signals = CandidateSignals(30, recency=True)
        before = {m.memory_id: m for m in await store.candidates("alice", signals)}
        original = next(e for e in log if isinstance(e, MemoryRecorded))
        assert before[original.memory_id].content == original.content

        rewritten = original.model_copy(
            update={
                "content": "the pumps failed at dawn",
                "importance": 0.99,
                "source_position": SourcePosition(topic=TOPIC, partition=8, offset=1_000),
            }
        )
        await store.apply([rewritten])

        after = {m.memory_id: m for m in await store.candidates("alice", signals)}
        assert after[original.memory_id].content == "the pumps failed at dawn"
        assert after[original.memory_id].importance == 0.99
        assert {k: v for k, v in after.items() if k != original.memory_id} == {
            k: v for k, v in before.items() if k != original.memory_id
        }
    finally:
        await store.close()
