"""The extractive summariser: the default that every deployment (and every fallback) relies on.

It must be reproducible byte for byte, since a reprocess of the log recomputes summaries, and
fit its budget, since a summary is stored and retrieved whole.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.summarising import (
    ELLIPSIS,
    MAX_SUMMARY_CHARS,
    ExtractiveSummariser,
    Summariser,
    SummaryItem,
    SummaryRequest,
    period_of,
    shorten,
    strip_prefix,
)

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def item(
    content: str,
    importance: float = 0.5,
    step: int | None = None,
    year: int | None = None,
    at: int = 0,
) -> SummaryItem:
    return SummaryItem(content, importance, step, year, T0 + timedelta(minutes=at))


def request(*items: SummaryItem, level: int = 1) -> SummaryRequest:
    assert level in (1, 2)
    return SummaryRequest("H1", "household", 1 if level == 1 else 2, list(items))


def body(summary: str) -> str:
    """The summary without its prefix."""
    return summary.split("): ", 1)[1]


FLOOD_YEAR = [
    item("The river flooded the lower field and the barn took damage", 0.9, 3, 2, 0),
    item("I bought flood insurance after talking to the neighbour", 0.7, 4, 2, 1),
    item("Had lunch with the family", 0.2, 4, 2, 2),
    item("The neighbour elevated his house against the next flood", 0.4, 5, 2, 3),
    item("My insurance claim for the barn was denied by the insurer", 0.8, 5, 2, 4),
]


def test_the_same_request_gives_the_same_bytes() -> None:
    first = ExtractiveSummariser().summarise(request(*FLOOD_YEAR))
    rebuilt = [item(i.content, i.importance, i.step, i.year) for i in FLOOD_YEAR]
    again = ExtractiveSummariser().summarise(request(*rebuilt))
    assert first.encode() == again.encode()
    assert first == ExtractiveSummariser().summarise(request(*FLOOD_YEAR))


def test_it_is_a_non_blocking_summariser_that_names_itself() -> None:
    summariser: Summariser = ExtractiveSummariser()
    assert summariser.id == "extractive-v1"
    assert summariser.blocking is False
    text, origin = summariser.summarise_with_origin(request(*FLOOD_YEAR))
    assert (text, origin) == (summariser.summarise(request(*FLOOD_YEAR)), "extractive-v1")
    # Another budget gives other summaries, so it must not pass for the default.
    assert ExtractiveSummariser(300).id == "extractive-v1-300"


def test_everything_fits_in_the_budget_in_the_order_it_happened() -> None:
    summary = ExtractiveSummariser().summarise(request(*FLOOD_YEAR))
    assert summary == (
        "Year 2, steps 3-5 (5 memories): "
        "The river flooded the lower field and the barn took damage. "
        "I bought flood insurance after talking to the neighbour. "
        "Had lunch with the family. "
        "The neighbour elevated his house against the next flood. "
        "My insurance claim for the barn was denied by the insurer."
    )


def test_a_tight_budget_keeps_the_most_important_in_chronological_order() -> None:
    summary = ExtractiveSummariser(budget=200).summarise(request(*FLOOD_YEAR))
    assert len(summary) <= 200
    # The two most important fit; the next two do not, and the room left takes the short one.
    assert body(summary) == (
        "The river flooded the lower field and the barn took damage. "
        "Had lunch with the family. "
        "My insurance claim for the barn was denied by the insurer."
    )


def test_at_equal_importance_the_memory_about_the_recurring_theme_wins() -> None:
    memories = [
        item("Flood water reached the barn door again"),
        item("A stranger asked for directions to town"),
        item("The flood damaged the barn roof"),
        item("Cleaned the barn after the flood"),
    ]
    summary = ExtractiveSummariser(budget=130).summarise(request(*memories))
    kept = body(summary)
    assert "stranger" not in kept
    assert "Flood water reached the barn door again." in kept


def test_at_a_full_tie_the_most_recent_memory_wins() -> None:
    memories = [item("Alpha event here"), item("Gamma event here"), item("Delta event here")]
    summariser = ExtractiveSummariser(budget=80)
    long_tail = " ".join(["filler words"] * 5)
    padded = [item(f"{m.content} {long_tail}") for m in memories]
    summary = summariser.summarise(request(*padded))
    assert len(summary) <= 80
    assert "Delta" in summary
    assert "Alpha" not in summary


@pytest.mark.parametrize(
    ("memories", "prefix"),
    [
        ([item("a", step=3), item("b", step=5), item("c", step=4)], "Steps 3-5 (3 memories): "),
        ([item("a", step=4)], "Step 4 (1 memory): "),
        ([item("a", year=4), item("b", year=4)], "Year 4 (2 memories): "),
        ([item("a", year=2), item("b", year=4)], "Years 2-4 (2 memories): "),
        ([item("a", year=2, step=9), item("b", year=3, step=12)], "Years 2-3, steps 9-12"),
        ([item("a"), item("b", step=7)], "Step 7 (2 memories): "),
        ([item("a"), item("b")], "(2 memories): "),
        ([item("a", year=-2), item("b", year=1)], "Years -2-1 (2 memories): "),
    ],
)
def test_the_prefix_names_the_period_and_the_count(
    memories: list[SummaryItem], prefix: str
) -> None:
    assert ExtractiveSummariser().summarise(request(*memories)).startswith(prefix)


def test_period_of_is_none_when_nothing_is_dated() -> None:
    assert period_of([item("a"), item("b")]) is None
    assert period_of([item("a", step=1, year=1)]) == "Year 1, step 1"


def test_a_chapter_quotes_sessions_without_their_prefixes_and_covers_their_whole_range() -> None:
    summariser = ExtractiveSummariser()
    first = summariser.summarise(request(*FLOOD_YEAR))
    second = summariser.summarise(
        request(
            item("The barn roof was repaired before winter", 0.6, 6, 3),
            item("The insurer approved the second claim", 0.8, 9, 3),
        )
    )
    # The L1s are stamped with their last step and no year: only their prefixes tell the rest.
    sessions = [item(first, 0.8, 5, None, 0), item(second, 0.7, 9, None, 1)]
    chapter = summariser.summarise(request(*sessions, level=2))
    assert chapter.startswith("Years 2-3, steps 3-9 (2 summaries): ")
    assert chapter.count("memories") == 0
    assert chapter.count("Year") == 1
    assert "The insurer approved the second claim." in chapter
    assert len(chapter) <= summariser.budget


def test_a_chapter_picks_sentences_so_one_long_session_cannot_crowd_out_the_others() -> None:
    long_session = "Steps 1-9 (9 memories): " + " ".join(
        f"Routine chore number {n} was done." for n in range(40)
    )
    short_session = "Steps 10-12 (3 memories): The levee broke and the house flooded."
    sessions = [item(long_session, 0.5, 9, at=0), item(short_session, 0.5, 12, at=1)]
    chapter = ExtractiveSummariser().summarise(request(*sessions, level=2))
    assert chapter.startswith("Steps 1-12 (2 summaries): ")
    assert "The levee broke and the house flooded." in chapter
    assert ELLIPSIS not in chapter  # whole sentences, no cut


def test_strip_prefix_leaves_other_text_alone() -> None:
    assert strip_prefix("Year 4, steps 30-39 (6 memories): It rained.") == "It rained."
    assert strip_prefix("(1 summary): It rained.") == "It rained."
    assert strip_prefix("Steps 3-5: It rained.") == "It rained."
    assert strip_prefix("It rained in Year 4: a lot.") == "It rained in Year 4: a lot."


def test_an_over_long_memory_is_cut_at_a_word_boundary() -> None:
    words = [f"word{n}" for n in range(400)]
    rant = " ".join(words)
    memories = [item(rant, 0.9), item("The levee held.", 0.5)]
    summary = ExtractiveSummariser().summarise(request(*memories))
    assert len(summary) <= 600
    assert "The levee held." in summary  # the rant left room for the rest
    cut = body(summary).split(ELLIPSIS)[0]
    assert cut.split()[-1] in words  # a whole word before the ellipsis
    assert rant.startswith(cut)


def test_a_single_memory_may_use_the_whole_budget() -> None:
    rant = " ".join(f"word{n}" for n in range(400))
    summary = ExtractiveSummariser().summarise(request(item(rant)))
    assert summary.endswith(ELLIPSIS)
    assert 550 < len(summary) <= 600


def test_shorten_cuts_hard_only_when_there_is_no_word_boundary() -> None:
    assert shorten("short", 10) == "short"
    assert shorten("one two three four", 12) == "one two" + ELLIPSIS
    assert shorten("x" * 30, 10) == "x" * 9 + ELLIPSIS


def test_an_empty_request_is_refused() -> None:
    with pytest.raises(ValueError, match="no items"):
        ExtractiveSummariser().summarise(request())
    with pytest.raises(ValueError, match="blank"):
        ExtractiveSummariser().summarise(request(item("  "), item("\n")))


@pytest.mark.parametrize("budget", [79, MAX_SUMMARY_CHARS + 1])
def test_a_budget_outside_the_stored_limits_is_refused(budget: int) -> None:
    with pytest.raises(ValueError, match="budget"):
        ExtractiveSummariser(budget)


fragments = st.sampled_from([*"abcdefgh .!?\n\u00e9", "Year 3: ", "(2 memories): ", " word"])
texts = st.lists(fragments, min_size=1, max_size=120).map("".join).filter(str.strip)
items = st.builds(
    item,
    texts,
    st.floats(0, 1),
    st.none() | st.integers(0, 10**9),
    st.none() | st.integers(-(10**6), 10**6),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(items, min_size=1, max_size=25),
    st.sampled_from([1, 2]),
    st.integers(80, MAX_SUMMARY_CHARS),
)
def test_any_request_gives_a_non_empty_summary_within_budget(
    memories: list[SummaryItem], level: int, budget: int
) -> None:
    summariser = ExtractiveSummariser(budget)
    summary = summariser.summarise(request(*memories, level=level))
    assert 0 < len(summary) <= budget
    assert re.search(r"\S", body(summary) if "): " in summary else summary)
    assert summary == summariser.summarise(request(*memories, level=level))
