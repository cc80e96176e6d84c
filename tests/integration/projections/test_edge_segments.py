"""The Edge store optimizes its shard as it writes, and what reads return does not change."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from processors.lexical import query_vector
from projections.episodic import edge_segments
from projections.episodic.candidates import CandidateSignals
from projections.episodic.edge import EdgeEpisodicMemory
from tests.integration.fixtures.qdrant import EMBEDDING_DIM
from tests.integration.projections.test_episodic_candidates_contract import EMBEDDER, small_log

pytestmark = pytest.mark.integration

QUERY = "the river at mark 7"


async def answers(store: EdgeEpisodicMemory) -> list[object]:
    """Candidates, and a dense-only search, come in no promised order among equal scores (the
    log's memories differ by a number only, so many tie); a hybrid search breaks ties by id."""
    signals = CandidateSignals(1000, recency=True, importance=True, vector=EMBEDDER.embed(QUERY))
    candidates = await store.candidates("alice", signals, scope="all")
    return [
        sorted(candidates, key=lambda m: m.memory_id),
        await store.memories("alice"),
        await store.search("alice", EMBEDDER.embed(QUERY), 5, lexical=query_vector(QUERY)),
    ]


async def test_writing_past_the_cadence_optimizes_and_reads_stay_the_same(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A test-sized shard: segments are indexed from 50 KB rather than 10 MB.
    monkeypatch.setattr(edge_segments, "INDEXING_KB", 50)
    log = small_log("alice", 120)
    optimized = EdgeEpisodicMemory.open(tmp_path / "often", EMBEDDING_DIM, optimize_every=25)
    never = EdgeEpisodicMemory.open(tmp_path / "never", EMBEDDING_DIM, optimize_every=10**9)
    try:
        with caplog.at_level(logging.INFO, logger="projections.episodic.edge"):
            for start in range(0, len(log), 10):
                await optimized.apply(log[start : start + 10])
                await never.apply(log[start : start + 10])
        runs = [r for r in caplog.records if r.getMessage() == "optimized the episodic shard"]
        assert len(runs) >= 2
        assert any(r.changed for r in runs)
        assert all(r.path == str(tmp_path / "often") for r in runs)
        assert any(r.segments > 1 for r in runs), "the optimizer split the shard into segments"
        assert await answers(optimized) == await answers(never)
        assert len((await answers(optimized))[0]) > 30
    finally:
        await optimized.close()
        await never.close()


async def test_a_segment_an_optimization_built_is_not_merged_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each optimization indexes the points written since the last one into a segment past
    ``SEGMENT_KB``, which no later optimization rewrites: one more segment per optimization,
    each costing what its own points cost (a merge rewrote the segment before it too)."""
    monkeypatch.setattr(edge_segments, "INDEXING_KB", 1)
    monkeypatch.setattr(edge_segments, "SEGMENT_KB", 2)
    log = small_log("alice", 120)
    store = EdgeEpisodicMemory.open(tmp_path / "shard", EMBEDDING_DIM, optimize_every=25)
    try:
        with caplog.at_level(logging.INFO, logger="projections.episodic.edge"):
            for start in range(0, len(log), 10):
                await store.apply(log[start : start + 10])
        runs = [r for r in caplog.records if r.getMessage() == "optimized the episodic shard"]
        assert len(runs) >= 3
        counts = [r.segments for r in runs]
        assert counts == sorted(set(counts)), f"a merge took segments back: {counts}"
    finally:
        await store.close()
