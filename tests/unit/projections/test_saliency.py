"""Model v1 (seed 003): saliency I x e^(-0.1 age), against the seed's worked example."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.retrieval.breakdowns import SaliencyBreakdown
from projections.retrieval.saliency import decayed_importance, saliency
from tests.unit.projections.test_scoring import memory, seed_003_memories


def test_seed_003_section_2_worked_example() -> None:
    """Memory A (1.0, age 10) scores 0.368 (the seed rounds it to 0.36), Memory B (0.1,
    age 1) 0.0905: the disaster still outranks the routine day in v1."""
    assert decayed_importance(1.0, 10) == pytest.approx(0.3679, abs=1e-4)
    assert decayed_importance(0.1, 1) == pytest.approx(0.0905, abs=1e-4)

    disaster, routine = seed_003_memories()
    ranking = saliency([routine, disaster], top_k=2, current_year=11)

    assert [s.memory.memory_id for s in ranking.results] == [disaster.memory_id, routine.memory_id]
    first, second = ranking.results
    assert first.score == pytest.approx(math.exp(-1.0))
    assert second.score == pytest.approx(0.1 * math.exp(-0.1))
    assert first.breakdown == SaliencyBreakdown(
        time=1, time_imputed=False, age=10, importance=1.0, decay=pytest.approx(math.exp(-1.0))
    )


def test_a_recent_shock_beats_an_older_equal_one() -> None:
    older = memory(1, importance=0.9, year=3)
    newer = memory(2, importance=0.9, year=8)

    ranking = saliency([older, newer], top_k=2, current_year=10)

    assert [s.memory for s in ranking.results] == [newer, older]


def test_equal_scores_go_to_the_later_recorded_memory() -> None:
    a = memory(1, importance=0.5, year=4)
    b = memory(2, importance=0.5, year=4)

    assert [s.memory for s in saliency([a, b], top_k=2).results] == [b, a]


def test_top_k_cuts_and_duplicates_count_once() -> None:
    memories = [memory(seq, importance=seq / 10, year=1) for seq in range(1, 6)]
    copy = memories[4].model_copy(update={"memory_id": "copy", "destination": "episodic"})

    ranking = saliency([*memories, copy], top_k=3)

    assert [s.memory.seq for s in ranking.results] == [5, 4, 3]
    with pytest.raises(ValueError, match="top_k"):
        saliency(memories, top_k=0)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 30)), min_size=1, max_size=25),
    now=st.integers(0, 40),
)
def test_scores_follow_the_formula_and_are_sorted(rows: list[tuple[float, int]], now: int) -> None:
    memories = [
        memory(seq, importance=importance, year=year)
        for seq, (importance, year) in enumerate(rows, start=1)
    ]
    ranking = saliency(memories, top_k=len(memories), current_year=now)

    scores = [s.score for s in ranking.results]
    assert scores == sorted(scores, reverse=True)
    assert len(scores) == len(memories)
    for scored in ranking.results:
        age = max(now - (scored.memory.year or 0), 0)
        assert scored.score == pytest.approx(scored.memory.importance * math.exp(-0.1 * age))
