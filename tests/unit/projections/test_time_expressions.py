"""Periods named by a query (projections/retrieval/time_expressions) and how relevance uses them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from projections.memory import StoredMemory
from projections.retrieval.query_relevance import OUT_OF_PERIOD, in_period, relevance_parts
from projections.retrieval.time_expressions import TimeWindow, mentions, window_of

NOV_2023 = datetime(2023, 11, 15, tzinfo=UTC)
JULY_2023 = datetime(2023, 7, 1, tzinfo=UTC)


def at(year: int, month: int) -> datetime:
    return datetime(year, month, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "years", "months"),
    [
        ("Where did George travel in the summer of 2023?", {2023}, {6, 7, 8}),
        ("What happened in 2021 or 2022?", {2021, 2022}, None),
        ("What did she plan for August?", None, {8}),
        ("Any news since Sept?", None, {9}),
        ("What did we eat in the fall", None, {9, 10, 11}),
        ("Was the winter hard?", None, {12, 1, 2}),
        ("What happened in May?", None, {5}),
    ],
)
def test_a_query_names_years_months_and_seasons(
    text: str, years: set[int] | None, months: set[int] | None
) -> None:
    window = window_of(text)

    assert window is not None
    assert window.years == (None if years is None else frozenset(years))
    assert window.months == (None if months is None else frozenset(months))


@pytest.mark.parametrize(
    "text",
    [
        "Which hospital does Maya work at?",
        "What may have caused the flood?",
        "How old were the kids turning, 4 or 5?",
        "Call me at 1234",
        "What did she do last year?",  # relative, and no current time given
    ],
)
def test_words_that_name_no_period_give_no_window(text: str) -> None:
    assert window_of(text) is None


def test_relative_expressions_need_the_current_time() -> None:
    assert window_of("last year", NOV_2023) == TimeWindow(frozenset({2022}), None)
    assert window_of("this year", NOV_2023) == TimeWindow(frozenset({2023}), None)
    assert window_of("last month", NOV_2023) == TimeWindow(frozenset({2023}), frozenset({10}))
    assert window_of("last month", at(2024, 1)) == TimeWindow(frozenset({2023}), frozenset({12}))
    last_summer = TimeWindow(frozenset({2023}), frozenset({6, 7, 8}))
    assert window_of("what did we do last summer", NOV_2023) == last_summer
    in_july = window_of("what did we do last summer", JULY_2023)
    assert in_july == TimeWindow(frozenset({2022}), frozenset({6, 7, 8})), "this one is not over"


def test_a_window_holds_dates_and_texts_that_name_it() -> None:
    summer_2023 = TimeWindow(frozenset({2023}), frozenset({6, 7, 8}))
    years = TimeWindow(frozenset({2021}), None)

    assert summer_2023.holds(at(2023, 8))
    assert not summer_2023.holds(at(2022, 8))
    assert not summer_2023.holds(at(2023, 9))
    assert mentions("My sister wants to go on a cruise in August", summer_2023)
    assert not mentions("We went in October", summer_2023)
    assert mentions("back in 2021 we moved", years)
    assert not mentions("back in 2020 we moved", years)


def memory(key: str, content: str, when: datetime, seq: int) -> StoredMemory:
    return StoredMemory(
        memory_id=key,
        agent_id="a1",
        content=content,
        importance=0.5,
        destination="episodic",
        seq=seq,
        occurred_at=when,
        source_event_id=key,
        source_event_type="observation",
        similarity=0.5,
    )


def test_relevance_keeps_a_share_for_memories_outside_the_period() -> None:
    pool = [
        memory("then", "we went to the lake", at(2023, 7), 1),
        memory("plan", "a trip to the lake in August", at(2023, 4), 10),
        memory("other", "we went to the lake", at(2022, 7), 20),
    ]

    parts = relevance_parts("the lake in the summer of 2023", pool)
    plain = relevance_parts("the lake", pool)

    window = window_of("the summer of 2023")
    assert window is not None
    assert [in_period(m, window) for m in pool] == [True, True, False]
    assert parts["then"]["in_period"] == 1.0
    assert parts["other"]["in_period"] == 0.0
    assert "in_period" not in plain["other"]
    assert parts["then"]["relevance"] > parts["other"]["relevance"], "same words, other year"
    assert plain["then"]["relevance"] == pytest.approx(plain["other"]["relevance"])
    assert parts["other"]["own"] == pytest.approx(OUT_OF_PERIOD * parts["then"]["own"]), (
        "same text, same cosine: only the period differs"
    )
