"""A memory's relevance lifted by its neighbouring turns (conversation_context)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from projections.memory import StoredMemory
from projections.retrieval.conversation_context import (
    NEIGHBOUR_SHARE,
    best_of_each_signal,
    neighbours,
    seqs_beside,
    with_conversation_context,
)

NOON = datetime(2024, 3, 1, 12, tzinfo=UTC)


def turn(
    seq: int, *, minutes: float = 0.0, agent: str = "a1", level: int = 0, key: str | None = None
) -> StoredMemory:
    return StoredMemory(
        memory_id=key or f"{agent}-{seq}-{level}",
        agent_id=agent,
        content=f"turn {seq}",
        importance=0.5,
        destination="episodic",
        seq=seq,
        occurred_at=NOON + timedelta(minutes=minutes),
        source_event_id=f"event-{agent}-{seq}",
        source_event_type="observation",
        level=level,
    )


def test_consecutive_turns_close_in_time_are_neighbours() -> None:
    pool = [turn(1), turn(2, minutes=1), turn(3, minutes=2), turn(5, minutes=3)]

    assert neighbours(pool) == {
        "a1-1-0": ("a1-2-0",),
        "a1-2-0": ("a1-1-0", "a1-3-0"),
        "a1-3-0": ("a1-2-0",),
        "a1-5-0": (),
    }


def test_a_gap_in_time_another_level_or_another_agent_separates_turns() -> None:
    later = turn(2, minutes=61)
    summary = turn(3, minutes=61, level=1)
    other = turn(4, minutes=61, agent="a2")
    pool = [turn(1), later, summary, other, turn(3, minutes=62, agent="a2")]

    found = neighbours(pool)

    assert found["a1-1-0"] == (), "an hour and a minute apart: another conversation"
    assert found["a1-2-0"] == (), "the summary is of another level"
    assert found["a2-4-0"] == ("a2-3-0",)
    assert neighbours(pool, timedelta(hours=2))["a1-1-0"] == ("a1-2-0",)
    with pytest.raises(ValueError, match="negative"):
        neighbours(pool, timedelta(seconds=-1))


def test_a_silent_turn_takes_a_share_of_its_best_neighbours_relevance() -> None:
    pool = [turn(1), turn(2), turn(3), turn(7)]
    relevance = {"a1-1-0": 0.8, "a1-3-0": 0.2, "a1-7-0": 0.4}

    lifted, context = with_conversation_context(relevance, pool)

    share = NEIGHBOUR_SHARE
    assert lifted["a1-2-0"] == pytest.approx(share * 0.8 / (1 + share)), "the better neighbour"
    assert lifted["a1-1-0"] == pytest.approx(0.8 / (1 + share)), "its neighbour has nothing"
    assert lifted["a1-3-0"] == pytest.approx(0.2 / (1 + share))
    assert lifted["a1-7-0"] == pytest.approx(0.4 / (1 + share)), "alone: order kept"
    assert context == {"a1-2-0": 0.8}
    assert lifted["a1-1-0"] > lifted["a1-2-0"], "the matching turn stays above its neighbour"


def test_lifted_relevance_stays_within_zero_and_one() -> None:
    pool = [turn(1), turn(2), turn(3)]

    lifted, _ = with_conversation_context(dict.fromkeys(["a1-1-0", "a1-2-0", "a1-3-0"], 1.0), pool)
    nothing, context = with_conversation_context({}, pool)

    assert lifted == pytest.approx(dict.fromkeys(lifted, 1.0))
    assert nothing == dict.fromkeys(nothing, 0.0)
    assert context == {}


def test_a_share_outside_zero_and_one_is_refused() -> None:
    with pytest.raises(ValueError, match="share"):
        with_conversation_context({}, [turn(1)], share=1.5)
    unchanged, _ = with_conversation_context({"a1-1-0": 0.3}, [turn(1), turn(2)], share=0.0)
    assert unchanged == {"a1-1-0": 0.3, "a1-2-0": 0.0}


def test_the_turns_beside_the_best_that_the_pool_lacks_are_asked_for() -> None:
    pool = [turn(1), turn(2), turn(10), turn(20), turn(0, key="first")]

    assert seqs_beside(["a1-2-0", "a1-10-0"], pool) == (3, 9, 11)
    assert seqs_beside(["first"], pool) == (), "seq 1 is held, and no seq is negative"
    assert seqs_beside(["unknown"], pool) == ()
    assert seqs_beside([], pool) == ()


def worded(seq: int, content: str, similarity: float | None) -> StoredMemory:
    return turn(seq).model_copy(update={"content": content, "similarity": similarity})


def test_the_best_of_each_signal_are_the_nearest_and_the_best_keyword_matches() -> None:
    pool = [
        worded(1, "the river flooded the basement", 0.9),
        worded(2, "flood insurance claim", 0.1),
        worded(3, "a quiet garden", 0.5),
        worded(4, "a flood", None),
        worded(5, "nothing shared", -0.2),
    ]

    best = best_of_each_signal("flood claim", pool, top=1)
    two = best_of_each_signal("flood claim", pool, top=2)

    assert best == ["a1-1-0", "a1-2-0"], "the nearest, then the best BM25 match"
    assert set(two) == {"a1-1-0", "a1-3-0", "a1-2-0", "a1-4-0"}
    assert "a1-5-0" not in best_of_each_signal("flood claim", pool, top=10), "nothing in common"
    assert best_of_each_signal("flood", pool, top=0) == []
    with pytest.raises(ValueError, match="negative"):
        best_of_each_signal("flood", pool, top=-1)


def test_a_working_memory_and_its_promoted_copy_share_a_place_and_both_count() -> None:
    # A promoted copy keeps the seq of the working memory it was promoted from; both are in
    # the pool while the original is still in working memory.
    original, copy = turn(2, minutes=1, key="working"), turn(2, minutes=1, key="promoted")
    pool = [turn(1), original, copy, turn(3, minutes=2)]

    found = neighbours(pool)

    assert found["working"] == found["promoted"] == ("a1-1-0", "a1-3-0")
    assert found["a1-1-0"] == ("working", "promoted")
    assert found["a1-3-0"] == ("working", "promoted")
    lifted, context = with_conversation_context({"promoted": 0.9, "a1-3-0": 0.3}, pool)
    assert set(lifted) == {"a1-1-0", "working", "promoted", "a1-3-0"}
    assert context == {"a1-1-0": 0.9, "working": 0.3, "promoted": 0.3, "a1-3-0": 0.9}
