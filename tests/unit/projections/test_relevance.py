"""Hybrid relevance over a candidate pool: BM25 with the pool's IDF, cosine, and their RRF."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.lexical import bm25_weight, idf
from projections.memory import StoredMemory
from projections.retrieval.relevance import (
    RRF_K,
    hybrid_relevance,
    lexical_scores,
    quantized,
    ranking,
    related,
    rrf,
    rrf_order,
)


def memory(memory_id: str, content: str, similarity: float | None = 0.0) -> StoredMemory:
    return StoredMemory(
        memory_id=memory_id,
        agent_id="alice",
        content=content,
        importance=0.5,
        destination="working",
        seq=0,
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        source_event_id=f"event-{memory_id}",
        source_event_type="observation",
        similarity=similarity,
    )


def test_rrf_sums_reciprocal_ranks_from_one() -> None:
    fused = rrf([["a", "b"], ["b", "c"]])
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 62)
    assert rrf([["a"]], k=1)["a"] == pytest.approx(0.5)


def test_rrf_refuses_repeats_and_a_constant_below_one() -> None:
    with pytest.raises(ValueError, match="twice"):
        rrf([["a", "a"]])
    with pytest.raises(ValueError, match="at least 1"):
        rrf([["a"]], k=0)


def test_rrf_order_breaks_ties_by_best_rank_then_id() -> None:
    """At k=1, b (second in both lists: 1/3 + 1/3) beats a and c (first in one list: 1/2);
    a and c tie on score and on best rank, so the id decides."""
    assert rrf_order([["a", "b"], ["c", "b"]], k=1) == ["b", "a", "c"]
    assert rrf_order([["c", "b"], ["a", "b"]], k=1) == ["b", "a", "c"], "list order is irrelevant"
    assert rrf_order([["x", "y"], ["y", "x"]]) == ["x", "y"], "an exact tie goes to the id"


def test_ranking_is_canonical_on_ties() -> None:
    assert ranking({"b": 0.5, "a": 0.5, "c": 0.9}) == ["c", "a", "b"]


def test_a_rare_shared_word_outranks_a_common_one() -> None:
    """Each of the two shares one word with the query and has two words: only IDF differs."""
    pool = [
        memory("levee", "the levee held"),
        memory("rain-1", "rain again today"),
        memory("rain-2", "more rain on the roof"),
        memory("rain-3", "the rain stopped"),
        memory("rain-4", "rain in the valley"),
    ]

    parts = hybrid_relevance("did the rain reach the levee", pool)

    assert parts["levee"].lexical is not None
    assert parts["rain-3"].lexical is not None
    assert parts["levee"].lexical > parts["rain-3"].lexical
    assert parts["levee"].lexical_rank == 1
    assert parts["levee"].fused > parts["rain-3"].fused, "equal similarities: words decide"


def test_stemming_matches_inflections() -> None:
    pool = [memory("floods", "the floods came in spring"), memory("fire", "a fire in the barn")]

    parts = hybrid_relevance("when was the house flooded", pool)

    assert parts["floods"].lexical is not None
    assert parts["floods"].lexical > 0.0
    assert parts["floods"].lexical_rank == 1


def test_a_memory_without_shared_words_gets_no_lexical_rank() -> None:
    pool = [
        memory("match", "the levee held", similarity=0.1),
        memory("none", "a quiet morning", similarity=0.9),
    ]

    parts = hybrid_relevance("the levee", pool)

    assert parts["none"].lexical is None
    assert parts["none"].lexical_rank is None
    assert parts["none"].dense_rank == 1
    assert parts["match"].dense_rank == 2
    assert parts["none"].fused == pytest.approx((1 / 61) / (2 / 61))
    assert parts["match"].fused == pytest.approx((1 / 62 + 1 / 61) / (2 / 61))


def test_lexical_score_is_idf_times_bm25_over_the_pool() -> None:
    """What a Qdrant sparse search with the IDF modifier would score over exactly this pool."""
    pool = [
        memory("a", "levee levee breach"),
        memory("b", "the levee"),
        memory("c", "sunny day"),
    ]

    scores = lexical_scores("levee breach", pool)

    levee, breach = idf(3, 2), idf(3, 1)
    assert scores["a"] == pytest.approx(levee * bm25_weight(2, 3) + breach * bm25_weight(1, 3))
    assert scores["b"] == pytest.approx(levee * bm25_weight(1, 1))
    assert "c" not in scores
    assert breach == pytest.approx(math.log(1 + 2.5 / 1.5))


def test_the_best_memory_of_both_rankings_scores_one() -> None:
    pool = [
        memory("best", "the levee broke", similarity=0.8),
        memory("other", "the school opened", similarity=0.2),
    ]

    parts = hybrid_relevance("levee", pool)

    assert parts["best"].fused == pytest.approx(1.0)
    assert parts["best"].dense == 0.8
    assert parts["other"].fused < 1.0


def test_a_memory_without_similarity_has_no_dense_rank() -> None:
    pool = [memory("a", "the levee", similarity=None), memory("b", "the barn", similarity=0.5)]

    parts = hybrid_relevance("levee", pool)

    assert parts["a"].dense is None
    assert parts["a"].dense_rank is None
    assert parts["a"].lexical_rank == 1
    assert parts["b"].dense_rank == 1


def test_only_a_positive_similarity_earns_a_dense_rank() -> None:
    """A cosine of 0 (no shared feature) or below says nothing for the memory; ranking such
    memories would hand out ranks by id."""
    pool = [
        memory("related", "a walk", similarity=0.2),
        memory("orthogonal", "a talk", similarity=0.0),
        memory("opposite", "a chalk", similarity=-0.3),
    ]

    parts = hybrid_relevance("nothing shared", pool)

    assert parts["related"].dense_rank == 1
    assert parts["orthogonal"].dense_rank is None
    assert parts["orthogonal"].dense == 0.0
    assert parts["opposite"].dense_rank is None
    assert parts["opposite"].fused == 0.0


def test_stopword_queries_and_empty_pools() -> None:
    pool = [memory("a", "the levee", similarity=0.3)]
    parts = hybrid_relevance("what was it?", pool)
    assert parts["a"].lexical is None
    assert parts["a"].dense_rank == 1
    assert hybrid_relevance("levee", []) == {}


@given(
    contents=st.lists(
        st.sampled_from(["levee broke", "rain fell", "the flood", "school shelter", "rain flood"]),
        min_size=1,
        max_size=8,
    ),
    similarities=st.lists(st.floats(-1.0, 1.0), min_size=8, max_size=8),
    query=st.sampled_from(["flood", "rain and flood", "levee", "nothing here"]),
)
def test_fused_scores_lie_in_zero_one(
    contents: list[str], similarities: list[float], query: str
) -> None:
    pool = [memory(str(i), c, similarities[i]) for i, c in enumerate(contents)]

    parts = hybrid_relevance(query, pool)

    assert set(parts) == {m.memory_id for m in pool}
    assert all(0.0 <= p.fused <= 1.0 for p in parts.values())
    positive = [m for m in pool if m.similarity is not None and related(m.similarity)]
    assert sorted(p.dense_rank for p in parts.values() if p.dense_rank) == list(
        range(1, len(positive) + 1)
    )
    best = 2 / (RRF_K + 1)
    for p in parts.values():
        ranks = [r for r in (p.dense_rank, p.lexical_rank) if r is not None]
        assert p.fused == pytest.approx(sum(1 / (RRF_K + r) for r in ranks) / best)
        assert (p.fused == 0.0) == (not ranks)


def test_float_noise_does_not_order_equal_scores() -> None:
    """Two cosines that differ in the last float32 bits (as Edge returned them for two
    memories of the same shape) tie, and the id decides; a real difference still ranks."""
    assert quantized(0.5345224738121033) == quantized(0.5345225056721273)
    assert ranking({"b": 0.5345224738121033, "a": 0.5345225056721273}) == ["a", "b"]
    assert ranking({"a": 0.5345, "b": 0.5351}) == ["b", "a"]
    assert quantized(0.017701106) == quantized(0.017701117)
    assert quantized(12.3456) == 12.35


def test_weighted_rrf_favours_the_heavier_ranking() -> None:
    assert rrf([["a"], ["b"]], weights=[3.0, 1.0]) == {
        "a": pytest.approx(3 / 61),
        "b": pytest.approx(1 / 61),
    }
    with pytest.raises(ValueError, match="one non-negative weight per ranking"):
        rrf([["a"], ["b"]], weights=[1.0])
    with pytest.raises(ValueError, match="one non-negative weight per ranking"):
        rrf([["a"]], weights=[-1.0])
    pool = [
        memory("semantic", "a quiet morning", similarity=0.9),
        memory("lexical", "the levee", similarity=0.0),
    ]

    even = hybrid_relevance("the levee", pool)
    dense_heavy = hybrid_relevance("the levee", pool, dense_weight=3.0)
    lexical_heavy = hybrid_relevance("the levee", pool, lexical_weight=3.0)

    assert even["lexical"].fused == even["semantic"].fused == pytest.approx(0.5)
    assert dense_heavy["semantic"].fused == pytest.approx(0.75)
    assert dense_heavy["lexical"].fused == pytest.approx(0.25)
    assert lexical_heavy["lexical"].fused > lexical_heavy["semantic"].fused
    with pytest.raises(ValueError, match="positive"):
        hybrid_relevance("levee", pool, dense_weight=0.0, lexical_weight=0.0)
