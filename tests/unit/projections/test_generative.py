"""Generative-agents scoring (Park et al. 2023, seed 003 [4]) and the relevance mode."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from projections.memory import StoredMemory
from projections.retrieval.breakdowns import GenerativeBreakdown, RelevanceBreakdown
from projections.retrieval.by_relevance import by_relevance
from projections.retrieval.generative import GenerativeWeights, generative, min_max
from tests.unit.projections.test_scoring import memory


def three() -> list[StoredMemory]:
    """Oldest and most important; middling; newest and least important."""
    return [
        memory(1, importance=0.9, step=0),
        memory(2, importance=0.5, step=50),
        memory(3, importance=0.1, step=100),
    ]


def test_min_max_spans_zero_to_one() -> None:
    assert min_max([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert min_max([]) == []


def test_equal_values_are_all_or_nothing() -> None:
    """No spread to normalise: a shared positive value counts fully, a shared zero not at all."""
    assert min_max([0.7, 0.7]) == [1.0, 1.0]
    assert min_max([0.7]) == [1.0]
    assert min_max([0.0, 0.0]) == [0.0, 0.0]


def test_score_is_the_weighted_sum_of_normalised_components() -> None:
    memories = three()
    relevance = {"memory-1": 0.0, "memory-2": 0.8, "memory-3": 0.2}

    ranking = generative(memories, top_k=3, relevance=relevance, current_step=100)

    by_id = {s.memory.memory_id: s for s in ranking.results}
    middle = by_id["memory-2"]
    assert isinstance(middle.breakdown, GenerativeBreakdown)
    b = middle.breakdown
    recency = [0.995**100, 0.995**50, 1.0]
    assert b.recency == pytest.approx(0.995**50)
    assert b.recency_norm == pytest.approx((recency[1] - recency[0]) / (1.0 - recency[0]))
    assert b.importance_norm == pytest.approx(0.5)
    assert (b.relevance, b.relevance_norm) == (0.8, 1.0)
    assert middle.score == pytest.approx(b.recency_norm + 0.5 + 1.0)
    assert ranking.results[0].memory.memory_id == "memory-2"


@pytest.mark.parametrize(
    ("weights", "first"),
    [
        (GenerativeWeights(recency=1.0, importance=0.0, relevance=0.0), "memory-3"),
        (GenerativeWeights(recency=0.0, importance=1.0, relevance=0.0), "memory-1"),
        (GenerativeWeights(recency=0.0, importance=0.0, relevance=1.0), "memory-2"),
    ],
)
def test_each_weight_alone_orders_by_its_component(weights: GenerativeWeights, first: str) -> None:
    relevance = {"memory-2": 0.4}
    ranking = generative(three(), top_k=1, relevance=relevance, weights=weights)

    [best] = ranking.results
    assert best.memory.memory_id == first


def test_the_decay_shapes_recency_between_the_extremes() -> None:
    """Min-max puts the newest at 1 and the oldest at 0 whatever the decay; the decay decides
    where a memory one step old lands: ~0.9 at 0.995 per step (its importance then lifts it
    above both), ~0.5 at 0.5 per step (it falls below both)."""
    old = memory(1, importance=1.0, step=0)
    middle = memory(2, importance=0.3, step=9)
    new = memory(3, importance=0.05, step=10)

    slow = generative([old, middle, new], top_k=3, relevance={}, current_step=10)
    fast = generative(
        [old, middle, new],
        top_k=3,
        relevance={},
        weights=GenerativeWeights(recency_decay=0.5),
        current_step=10,
    )

    assert slow.results[0].memory == middle
    assert fast.results[-1].memory == middle
    shaped = {s.memory.memory_id: s.breakdown for s in fast.results}["memory-2"]
    assert isinstance(shaped, GenerativeBreakdown)
    assert shaped.recency == 0.5
    assert shaped.recency_norm == pytest.approx((0.5 - 0.5**10) / (1 - 0.5**10))


def test_memories_without_relevance_have_none() -> None:
    ranking = generative(three(), top_k=3, relevance={})

    for scored in ranking.results:
        assert isinstance(scored.breakdown, GenerativeBreakdown)
        assert (scored.breakdown.relevance, scored.breakdown.relevance_norm) == (0.0, 0.0)


@pytest.mark.parametrize(
    "fields",
    [
        {"recency": 0.0, "importance": 0.0, "relevance": 0.0},
        {"recency": -1.0},
        {"recency_decay": 0.0},
        {"recency_decay": 1.5},
        {"relevance": float("inf")},
        {"alpha": 1.0},
    ],
)
def test_invalid_generative_weights_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        GenerativeWeights.model_validate(fields)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.floats(0.0, 1.0), st.integers(0, 50), st.floats(0.0, 1.0)),
        min_size=1,
        max_size=20,
    ),
    top_k=st.integers(1, 25),
)
def test_generative_scores_are_bounded_sorted_and_cut(
    rows: list[tuple[float, int, float]], top_k: int
) -> None:
    memories = [
        memory(seq, importance=importance, step=step)
        for seq, (importance, step, _) in enumerate(rows, start=1)
    ]
    relevance = {m.memory_id: rel for m, (_, _, rel) in zip(memories, rows, strict=True)}

    ranking = generative(memories, top_k=top_k, relevance=relevance)

    scores = [s.score for s in ranking.results]
    assert scores == sorted(scores, reverse=True)
    assert len(scores) == min(top_k, len(memories))
    assert all(-1e-9 <= score <= 3.0 + 1e-9 for score in scores)


def test_relevance_mode_ranks_by_relevance_then_recency() -> None:
    a, b, c = three()
    relevance = {a.memory_id: 0.5, b.memory_id: 0.9, c.memory_id: 0.5}
    parts = {b.memory_id: {"overlap": 0.9, "similarity": 0.4}}

    ranking = by_relevance([a, b, c], top_k=3, relevance=relevance, parts=parts)

    assert [s.memory for s in ranking.results] == [b, c, a]
    assert ranking.results[0].breakdown == RelevanceBreakdown(
        time=50,
        time_imputed=False,
        age=51,
        relevance=0.9,
        parts={"overlap": 0.9, "similarity": 0.4},
    )
    last = ranking.results[2].breakdown
    assert isinstance(last, RelevanceBreakdown)
    assert (last.relevance, last.parts) == (0.5, {})


def test_relevance_mode_ties_at_one_time_go_to_the_later_recorded() -> None:
    first, second = memory(1, step=3), memory(2, step=3)

    ranking = by_relevance([first, second], top_k=1, relevance={})

    assert [s.memory for s in ranking.results] == [second]
    assert ranking.results[0].score == 0.0
