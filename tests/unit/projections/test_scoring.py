"""The ranking functions against the seeds' worked examples, formulas and invariants."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from processors.embedding import keywords
from projections.memory import StoredMemory
from projections.retrieval.scoring import (
    INTERFERENCE_CAP,
    Clock,
    TwoPhaseBreakdown,
    WeightedBreakdown,
    Weights,
    hour_of,
    overlap,
    resolve_clock,
    time_of,
    two_phase,
    weighted,
)
from schemas.memory_events import Destination

SEED_003_CONTEXT = ("Flood", "Danger", "Rain")


def memory(
    seq: int,
    *,
    importance: float = 0.5,
    year: int | None = None,
    step: int | None = None,
    tags: tuple[str, ...] = (),
    content: str | None = None,
    destination: Destination = "episodic",
    source_event_id: str | None = None,
) -> StoredMemory:
    return StoredMemory(
        memory_id=f"memory-{seq}",
        agent_id="H001",
        content=content if content is not None else f"event number {seq}",
        importance=importance,
        destination=destination,
        seq=seq,
        occurred_at=datetime(2024, 1, 1, tzinfo=UTC),
        step=step,
        year=year,
        tags=tags,
        source_event_id=source_event_id or f"event-{seq}",
        source_event_type="observation",
    )


def seed_003_memories() -> tuple[StoredMemory, StoredMemory]:
    disaster = memory(
        1,
        importance=1.0,
        year=1,
        tags=("Flood",),
        content="Year 1: A massive flood breached the levee. My basement was under 2 feet of "
        "water, and I lost all my furniture. It was terrifying.",
    )
    routine = memory(
        2,
        importance=0.1,
        year=10,
        tags=("Routine",),
        content="Year 10: The sun was out all day. I spent the afternoon gardening in the "
        "backyard. It was a normal, quiet Saturday.",
    )
    return disaster, routine


def weighted_parts(memory_breakdown: WeightedBreakdown | TwoPhaseBreakdown) -> WeightedBreakdown:
    assert isinstance(memory_breakdown, WeightedBreakdown)
    return memory_breakdown


def two_phase_parts(memory_breakdown: WeightedBreakdown | TwoPhaseBreakdown) -> TwoPhaseBreakdown:
    assert isinstance(memory_breakdown, TwoPhaseBreakdown)
    return memory_breakdown


# --- weighted mode: seed 003 -------------------------------------------------------------------


def test_seed_003_year_11_disaster_beats_routine() -> None:
    """Seed 003, section 2, Model v2: A = 0.38 and B = 0.315. The seed rounds e^-1 to 0.36, so
    A is 0.1839 + 0.2 = 0.3839 exactly."""
    disaster, routine = seed_003_memories()
    ranking = weighted([routine, disaster], top_k=2, current_year=11, context_tags=SEED_003_CONTEXT)
    first, second = ranking.results
    assert first.memory == disaster
    assert first.score == pytest.approx(0.384, abs=5e-4)
    assert second.score == pytest.approx(0.315, abs=5e-4)
    assert ranking.clock == Clock("year", 11)


def test_seed_003_context_is_triggered_by_the_word_in_the_forecast() -> None:
    """Seed 003: C = 1 "is triggered by the word 'Flood' in the current forecast": with the
    forecast as the query and no tags, the example's ranking and scores are the same."""
    disaster, routine = seed_003_memories()
    ranking = weighted(
        [routine, disaster],
        top_k=2,
        current_year=11,
        query_text="Forecast: heavy FLOOD expected along the river",
        weights=Weights(relevance=0.0),
    )
    first, second = ranking.results
    assert first.memory == disaster
    assert weighted_parts(first.breakdown).context == 1.0
    assert weighted_parts(second.breakdown).context == 0.0
    assert first.score == pytest.approx(0.384, abs=5e-4)
    assert second.score == pytest.approx(0.315, abs=5e-4)


def test_seed_003_components_of_the_example() -> None:
    """R = 1 - age/max_age (0.0 and 0.9), I = I0 * e^(-0.1 age) (v1 saliency: 0.368 and 0.0905,
    the seed's 0.36 and 0.09), C binary on tags (1 and 0)."""
    disaster, routine = seed_003_memories()
    ranking = weighted([disaster, routine], top_k=2, current_year=11, context_tags=SEED_003_CONTEXT)
    parts = {r.memory.memory_id: weighted_parts(r.breakdown) for r in ranking.results}
    a, b = parts[disaster.memory_id], parts[routine.memory_id]
    assert (a.age, b.age) == (10, 1)
    assert (a.recency, b.recency) == pytest.approx((0.0, 0.9))
    assert a.importance == pytest.approx(math.exp(-1.0))
    assert b.importance == pytest.approx(0.1 * math.exp(-0.1))
    assert (a.context, b.context) == (1.0, 0.0)


def test_default_weights_ignore_relevance_and_interference() -> None:
    """With the seed's defaults (Wrel = Wint = 0) the score is 0.3 R + 0.5 I + 0.2 C, however
    large Rel and Int are."""
    old = memory(1, importance=0.8, year=1, content="flood flood levee")
    new = memory(2, importance=0.2, year=2, content="flood levee")
    ranking = weighted([old, new], top_k=2, query_text="flood levee")
    parts = {r.memory.memory_id: weighted_parts(r.breakdown) for r in ranking.results}
    assert parts[old.memory_id].interference == pytest.approx(INTERFERENCE_CAP)
    assert parts[old.memory_id].relevance == 1.0
    for result in ranking.results:
        own = parts[result.memory.memory_id]
        assert result.score == pytest.approx(
            0.3 * own.recency + 0.5 * own.importance + 0.2 * own.context
        )


def test_recency_is_linear_in_age_relative_to_the_oldest() -> None:
    memories = [memory(1, year=0), memory(2, year=5), memory(3, year=10)]
    ranking = weighted(memories, top_k=3, current_year=10)
    recency = {r.memory.year: weighted_parts(r.breakdown).recency for r in ranking.results}
    assert recency == pytest.approx({0: 0.0, 5: 0.5, 10: 1.0})


def test_recency_is_one_when_every_memory_is_as_old() -> None:
    ranking = weighted([memory(1, year=4), memory(2, year=4)], top_k=2, current_year=4)
    assert [weighted_parts(r.breakdown).recency for r in ranking.results] == [1.0, 1.0]


def test_context_match_is_binary_and_ignores_case() -> None:
    tagged = memory(1, year=1, tags=("FLOOD", "rain"))
    other = memory(2, year=1, tags=("routine",))
    ranking = weighted([tagged, other], top_k=2, context_tags=("flood", "Rain"))
    context = {r.memory.memory_id: weighted_parts(r.breakdown).context for r in ranking.results}
    assert context == {tagged.memory_id: 1.0, other.memory_id: 0.0}


def test_no_context_tags_means_no_context_score() -> None:
    ranking = weighted([memory(1, year=1, tags=("flood",))], top_k=1)
    assert weighted_parts(ranking.results[0].breakdown).context == 0.0


def test_relevance_is_the_overlap_coefficient() -> None:
    assert overlap(frozenset({"flood", "levee"}), frozenset({"levee", "flood", "spring"})) == 1.0
    assert overlap(frozenset({"flood", "insurance"}), frozenset({"flood", "levee", "x"})) == 0.5
    assert overlap(frozenset(), frozenset({"flood"})) == 0.0


def test_relevance_weight_lifts_the_memory_matching_the_query() -> None:
    """Seed 003, P2 Contextual Resonance: off by default, decisive when weighted."""
    levee = memory(1, importance=0.3, year=1, content="The levee broke during the flood")
    garden = memory(2, importance=0.6, year=2, content="I planted tomatoes in the garden")
    query = "Will the levee hold?"
    plain = weighted([levee, garden], top_k=2, query_text=query)
    assert plain.results[0].memory == garden

    resonant = weighted(
        [levee, garden],
        top_k=2,
        query_text=query,
        weights=Weights(recency=0.3, importance=0.5, context=0.2, relevance=1.0),
    )
    assert resonant.results[0].memory == levee
    assert weighted_parts(resonant.results[0].breakdown).relevance == 0.5
    assert weighted_parts(resonant.results[1].breakdown).relevance == 0.0


def test_interference_comes_from_newer_similar_memories_only() -> None:
    """Seed 003, P2: Int = min(max over newer m' of Rel(m, m') * 0.8, 0.8)."""
    oldest = memory(1, year=1, content="flood basement water")
    middle = memory(2, year=2, content="flood insurance premium")
    newest = memory(3, year=3, content="quiet garden afternoon")
    ranking = weighted([oldest, middle, newest], top_k=3)
    parts = {r.memory.memory_id: weighted_parts(r.breakdown) for r in ranking.results}
    assert parts[oldest.memory_id].interference == pytest.approx(INTERFERENCE_CAP / 3)
    assert parts[middle.memory_id].interference == 0.0
    assert parts[newest.memory_id].interference == 0.0


def test_interference_weight_suppresses_the_superseded_memory() -> None:
    superseded = memory(1, importance=1.0, year=1, content="premium is 900 dollars")
    current = memory(2, importance=0.5, year=2, content="premium is 1200 dollars")
    assert weighted([superseded, current], top_k=1).results[0].memory == superseded
    suppressed = weighted([superseded, current], top_k=2, weights=Weights(interference=0.5)).results
    assert suppressed[0].memory == current
    parts = weighted_parts(suppressed[1].breakdown)
    assert parts.interference == pytest.approx(INTERFERENCE_CAP * 2 / 3)
    assert suppressed[1].score == pytest.approx(
        0.3 * parts.recency + 0.5 * parts.importance - 0.5 * parts.interference
    )


# --- two-phase mode: seed 004 ------------------------------------------------------------------


def test_memory_retrieval_priority() -> None:
    """Seed 004, section 7.1: the working memory comes first though the episodic one is more
    important."""
    old = memory(1, importance=0.9, year=1, content="Old event")
    recent = memory(2, importance=0.5, year=5, content="Recent event", destination="working")
    ranking = two_phase([recent], [old], top_k=2, current_year=5)
    assert [r.memory.content for r in ranking.results] == ["Recent event", "Old event"]
    assert [two_phase_parts(r.breakdown).phase for r in ranking.results] == [1, 2]
    assert [r.store for r in ranking.results] == ["working", "episodic"]


def test_memory_retrieval_decay() -> None:
    """Seed 004, section 7.1, adapted. The seed's comment says the Year 10 event (0.5) "should
    rank higher despite lower importance due to less decay", but its own formula (section 3.1,
    0.95 ** years_passed * importance) gives the Year 1 event 0.9 * 0.95**9 = 0.567 > 0.5. The
    formula is the specification; this test pins it."""
    year_1 = memory(1, importance=0.9, year=1, content="Year 1 event")
    year_10 = memory(2, importance=0.5, year=10, content="Year 10 event")
    ranking = two_phase([], [year_10, year_1], top_k=2, current_year=10)
    assert [r.memory.content for r in ranking.results] == ["Year 1 event", "Year 10 event"]
    assert [r.score for r in ranking.results] == pytest.approx([0.9 * 0.95**9, 0.5])
    assert two_phase_parts(ranking.results[0].breakdown).decay == pytest.approx(0.95**9)


def test_seed_004_audit_scores() -> None:
    """Seed 004, sections 8.3 and 11: year-2 memories of importance 0.9 and 0.7 read in year 3 score
    0.855 and 0.665."""
    flood = memory(1, importance=0.9, year=2, content="Year 2: A major flood caused damages")
    insured = memory(2, importance=0.7, year=2, content="Year 2: I purchased flood insurance")
    ranking = two_phase([], [insured, flood], top_k=5, current_year=3)
    assert [r.memory for r in ranking.results] == [flood, insured]
    assert [r.score for r in ranking.results] == pytest.approx([0.855, 0.665])


def test_working_memories_most_recent_first() -> None:
    """Seed 004 sorts by (timestamp, importance), the timestamp the recording's: within one
    year the later recording comes first, however important the earlier one is."""
    older = memory(1, importance=0.9, year=3, destination="working")
    major = memory(2, importance=0.6, year=4, destination="working")
    minor = memory(3, importance=0.2, year=4, destination="working")
    ranking = two_phase([older, major, minor], [], top_k=3, current_year=4)
    assert [r.memory for r in ranking.results] == [minor, major, older]
    assert [r.score for r in ranking.results] == [0.2, 0.6, 0.9]
    assert all(two_phase_parts(r.breakdown).decay == 1.0 for r in ranking.results)


def test_the_newest_working_memories_fill_top_k() -> None:
    working = [
        memory(seq, importance=imp, year=5, destination="working")
        for seq, imp in enumerate((0.6, 0.1, 0.5, 0.2, 0.4, 0.3, 0.1))
    ]
    ranking = two_phase(working, [], top_k=5, current_year=5)
    assert [r.memory.seq for r in ranking.results] == [6, 5, 4, 3, 2]


def test_top_k_cuts_the_episodic_supplement_first() -> None:
    working = [memory(seq, year=5, destination="working") for seq in (1, 2, 3)]
    episodic = [memory(4, importance=0.9, year=5), memory(5, importance=0.8, year=5)]
    ranking = two_phase(working, episodic, top_k=4, current_year=5)
    assert [r.memory.seq for r in ranking.results] == [3, 2, 1, 4]
    assert len(two_phase(working, episodic, top_k=2, current_year=5).results) == 2


def test_a_memory_in_both_stores_is_listed_once_in_phase_one() -> None:
    in_working = memory(1, importance=0.8, year=2, destination="working")
    promoted = memory(1, importance=0.8, year=2, destination="episodic").model_copy(
        update={"memory_id": "promoted-copy"}
    )
    ranking = two_phase([in_working], [promoted], top_k=5, current_year=3)
    assert [r.memory for r in ranking.results] == [in_working]


def test_a_summary_is_ranked_beside_the_memory_of_its_trigger() -> None:
    """A summary's source event is the one that triggered it, which may be remembered too."""
    trigger = memory(1, importance=0.6, year=2, destination="working")
    summary = memory(2, importance=0.9, year=2).model_copy(
        update={"source_event_id": trigger.source_event_id, "level": 1}
    )

    phases = two_phase([trigger], [summary], top_k=5, current_year=3)
    scored = weighted([trigger, summary], top_k=5, current_year=3)

    assert [r.memory for r in phases.results] == [trigger, summary]
    assert {r.memory.memory_id for r in scored.results} == {"memory-1", "memory-2"}


def test_top_k_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="top_k"):
        two_phase([], [], top_k=0)
    with pytest.raises(ValueError, match="top_k"):
        weighted([], top_k=0)


# --- time ---------------------------------------------------------------------------------------


def test_now_defaults_to_the_latest_memory_time_plus_one() -> None:
    """Seed 003's engine reads just after its newest memory; seed 004's audit reads year-2
    memories in year 3."""
    ranking = two_phase([], [memory(1, importance=0.9, year=2)], top_k=1)
    assert ranking.clock == Clock("year", 3)
    assert ranking.results[0].score == pytest.approx(0.855)


def test_axis_follows_the_request_then_the_data() -> None:
    with_years = [memory(1, year=7, step=70), memory(2, step=80)]
    assert resolve_clock(with_years) == Clock("year", 8)
    assert resolve_clock([memory(1, step=70), memory(2)]) == Clock("step", 71)
    assert resolve_clock([memory(4), memory(9)]) == Clock("seq", 10)
    assert resolve_clock(with_years, current_step=90) == Clock("step", 90)
    assert resolve_clock([], current_year=2030) == Clock("year", 2030)
    with pytest.raises(ValueError, match="not both"):
        resolve_clock([], current_year=1, current_step=1)


def test_the_wall_clock_ages_memories_in_hours_of_their_events() -> None:
    morning = memory(1, importance=0.9).model_copy(
        update={"occurred_at": datetime(2024, 1, 1, 8, 30, tzinfo=UTC)}
    )
    evening = memory(2, importance=0.9).model_copy(
        update={"occurred_at": datetime(2024, 1, 1, 20, 5, tzinfo=UTC)}
    )
    now = hour_of(datetime(2024, 1, 2, 8, 59, tzinfo=UTC))
    assert time_of(morning, "hour") == hour_of(datetime(2024, 1, 1, 8, tzinfo=UTC))
    assert now - time_of(morning, "hour") == 24  # type: ignore[operator]

    ranking = two_phase([], [morning, evening], top_k=2, current_hour=now)

    assert ranking.clock == Clock("hour", now)
    assert [r.memory.memory_id for r in ranking.results] == ["memory-2", "memory-1"]
    assert ranking.results[1].score == pytest.approx(0.9 * 0.95**24)
    with pytest.raises(ValueError, match="not both"):
        resolve_clock([], current_hour=now, current_step=1)


def test_missing_time_is_taken_from_the_previous_recorded_memory() -> None:
    first = memory(1, importance=0.5)
    timed = memory(2, importance=0.5, year=3)
    untimed = memory(3, importance=0.5)
    later = memory(4, importance=0.5, year=6)
    ranking = two_phase([], [later, untimed, timed, first], top_k=4, current_year=6)
    parts = {r.memory.seq: two_phase_parts(r.breakdown) for r in ranking.results}
    assert {seq: (p.time, p.time_imputed) for seq, p in parts.items()} == {
        1: (3, True),
        2: (3, False),
        3: (3, True),
        4: (6, False),
    }


def test_memories_without_any_time_sit_at_now() -> None:
    ranking = two_phase([], [memory(1, importance=0.4)], top_k=1, current_year=9)
    parts = two_phase_parts(ranking.results[0].breakdown)
    assert (parts.time, parts.age, parts.time_imputed) == (9, 0, True)
    assert ranking.results[0].score == pytest.approx(0.4)


def test_a_memory_newer_than_now_is_not_boosted() -> None:
    """Ages are clamped at zero: asking "as of year 5" never makes a year-8 memory stronger."""
    working = memory(1, importance=0.3, year=9, destination="working")
    episodic = memory(2, importance=0.6, year=8)
    ranking = two_phase([working], [episodic], top_k=2, current_year=5)
    assert [two_phase_parts(r.breakdown).age for r in ranking.results] == [0, 0]
    assert ranking.results[1].score == pytest.approx(0.6)
    scored = weighted([working, episodic], top_k=2, current_year=5)
    assert [weighted_parts(r.breakdown).recency for r in scored.results] == [1.0, 1.0]


# --- weights ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"recency": -0.1},
        {"interference": -1.0},
        {"importance": math.nan},
        {"context": math.inf},
        {"recency": 0.0, "importance": 0.0, "context": 0.0},
        {"novelty": 1.0},
    ],
)
def test_invalid_weights_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        Weights.model_validate(fields)


# --- properties ---------------------------------------------------------------------------------

WORDS = ("flood", "levee", "rain", "insurance", "garden", "river", "basement", "premium")
TAGS = ("flood", "Flood", "rain", "routine", "danger")


@st.composite
def memory_sets(draw: st.DrawFn) -> list[StoredMemory]:
    seqs = draw(st.lists(st.integers(0, 500), unique=True, max_size=30))
    return [
        memory(
            seq,
            importance=draw(st.floats(0.0, 1.0)),
            year=draw(st.none() | st.integers(0, 40)),
            tags=tuple(draw(st.lists(st.sampled_from(TAGS), max_size=3))),
            content=" ".join(draw(st.lists(st.sampled_from(WORDS), max_size=6))),
            destination=draw(st.sampled_from(("working", "episodic"))),
        )
        for seq in seqs
    ]


weight_values = st.floats(0.0, 5.0, allow_nan=False, allow_infinity=False)
weight_sets = (
    st.tuples(*[weight_values] * 5)
    .filter(lambda values: any(values[:4]))
    .map(
        lambda values: Weights(
            recency=values[0],
            importance=values[1],
            context=values[2],
            relevance=values[3],
            interference=values[4],
        )
    )
)


@settings(max_examples=150, deadline=None)
@given(
    memories=memory_sets(),
    weights=weight_sets,
    top_k=st.integers(1, 40),
    current_year=st.none() | st.integers(0, 50),
    context=st.lists(st.sampled_from(TAGS), max_size=3),
    query=st.none() | st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
)
def test_weighted_scores_are_bounded_sorted_and_cut(
    memories: list[StoredMemory],
    weights: Weights,
    top_k: int,
    current_year: int | None,
    context: list[str],
    query: str | None,
) -> None:
    ranking = weighted(
        memories,
        top_k=top_k,
        current_year=current_year,
        context_tags=context,
        query_text=query,
        weights=weights,
    )
    results = ranking.results
    assert len(results) == min(top_k, len(memories))
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)
    lowest = -weights.interference * INTERFERENCE_CAP
    highest = weights.recency + weights.importance + weights.context + weights.relevance
    for result in results:
        parts = weighted_parts(result.breakdown)
        assert 0.0 <= parts.recency <= 1.0
        assert 0.0 <= parts.importance <= result.memory.importance
        assert parts.context in (0.0, 1.0)
        assert 0.0 <= parts.relevance <= 1.0
        assert 0.0 <= parts.interference <= INTERFERENCE_CAP
        assert lowest - 1e-9 <= result.score <= highest + 1e-9


@settings(max_examples=100, deadline=None)
@given(memories=memory_sets())
def test_interference_matches_its_definition(memories: list[StoredMemory]) -> None:
    """The vectorised computation equals seed 003's formula applied pair by pair."""
    for result in weighted(memories, top_k=max(len(memories), 1)).results:
        own = frozenset(keywords(result.memory.content))
        newer = [
            overlap(own, frozenset(keywords(other.content)))
            for other in memories
            if other.seq > result.memory.seq
        ]
        expected = min(max(newer, default=0.0) * INTERFERENCE_CAP, INTERFERENCE_CAP)
        assert weighted_parts(result.breakdown).interference == pytest.approx(expected)


@settings(max_examples=100, deadline=None)
@given(memories=memory_sets(), top_k=st.integers(1, 40), shuffle_seed=st.integers(0, 1000))
def test_weighted_ranking_does_not_depend_on_input_order(
    memories: list[StoredMemory], top_k: int, shuffle_seed: int
) -> None:
    shuffled = list(memories)
    random.Random(shuffle_seed).shuffle(shuffled)
    query = "flood levee"
    first = weighted(memories, top_k=top_k, query_text=query, weights=Weights(interference=0.3))
    second = weighted(shuffled, top_k=top_k, query_text=query, weights=Weights(interference=0.3))
    assert first == second


@settings(max_examples=150, deadline=None)
@given(
    memories=memory_sets(),
    top_k=st.integers(1, 40),
    current_year=st.none() | st.integers(0, 50),
)
def test_two_phase_lists_working_first_and_decays_episodic(
    memories: list[StoredMemory], top_k: int, current_year: int | None
) -> None:
    working = [m for m in memories if m.destination == "working"]
    episodic = [m for m in memories if m.destination == "episodic"]
    results = two_phase(working, episodic, top_k=top_k, current_year=current_year).results
    assert len(results) == min(top_k, len(memories))
    phases = [two_phase_parts(r.breakdown).phase for r in results]
    assert phases == sorted(phases)
    assert phases.count(1) == min(top_k, len(working))
    supplement = [r.score for r in results if r.store == "episodic"]
    assert supplement == sorted(supplement, reverse=True)
    for result in results:
        parts = two_phase_parts(result.breakdown)
        assert result.score == pytest.approx(parts.decay * result.memory.importance)
        assert 0.0 <= result.score <= result.memory.importance
