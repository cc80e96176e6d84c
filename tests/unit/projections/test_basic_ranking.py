"""Basic ranking (seed 003, WRR-validated) and the cognitive-constraint profiles (seed 003,
section 5.1): window sizes, interpolation by arousal, and the supplement."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.memory import StoredMemory
from projections.retrieval.basic import (
    PROFILES,
    Profile,
    basic,
    constrained,
    memory_count,
)
from projections.retrieval.breakdowns import BasicBreakdown, ConstrainedBreakdown, ProfileName
from tests.unit.projections.test_scoring import memory


def a_history() -> list[StoredMemory]:
    """Twelve memories, one a year; two old ones stand out by importance: year 3 (0.9, decayed
    to 0.331 by year 13) and year 1 (0.95, decayed to 0.286); year 2 (0.6) is next."""
    importance = {1: 0.95, 2: 0.6, 3: 0.9}
    return [memory(year, importance=importance.get(year, 0.2), year=year) for year in range(1, 13)]


def ids(memories: list[StoredMemory]) -> list[str]:
    return [m.memory_id for m in memories]


def test_basic_is_the_five_most_recent_then_the_two_most_important_of_the_rest() -> None:
    history = a_history()
    ranking = basic(random.Random(7).sample(history, len(history)), current_year=13)

    picked = [s.memory for s in ranking.results]
    assert [m.year for m in picked] == [12, 11, 10, 9, 8, 3, 1]
    sources = [
        s.breakdown.source for s in ranking.results if isinstance(s.breakdown, BasicBreakdown)
    ]
    assert sources == ["recent"] * 5 + ["supplement"] * 2
    decayed = ranking.results[5].breakdown
    assert isinstance(decayed, BasicBreakdown)
    assert decayed.decayed_importance == pytest.approx(0.9 * math.exp(-1.0))
    assert ranking.results[5].score == decayed.decayed_importance


def test_the_supplement_ranks_by_decayed_not_raw_importance() -> None:
    """Year 1 at 0.95 decays to 0.286 by year 13; year 6 at 0.5 to 0.249; year 7 at 0.45 to
    0.247 beats year 2 at 0.6 (0.200)."""
    history = [memory(year, importance=0.2, year=year) for year in range(1, 13)]
    history[0] = memory(1, importance=0.95, year=1)
    history[1] = memory(2, importance=0.6, year=2)
    history[5] = memory(6, importance=0.5, year=6)
    history[6] = memory(7, importance=0.45, year=7)

    ranking = basic(history, recent=3, current_year=13)

    assert [s.memory.year for s in ranking.results] == [12, 11, 10, 1, 6]


def test_fewer_memories_than_the_window_are_all_recent_and_listed_once() -> None:
    few = [memory(seq, year=seq) for seq in range(1, 4)]
    copy = few[0].model_copy(update={"memory_id": "copy-of-1"})

    ranking = basic([*few, copy])

    assert ids([s.memory for s in ranking.results]) == ids(few[::-1])
    assert all(isinstance(s.breakdown, BasicBreakdown) for s in ranking.results)
    assert basic([]).results == ()


def test_within_a_year_the_later_recorded_memory_is_more_recent() -> None:
    same_year = [memory(seq, importance=1.0 - seq / 10, year=5) for seq in range(1, 9)]

    ranking = basic(same_year, recent=2, top=1)

    assert [s.memory.seq for s in ranking.results] == [8, 7, 1]


@pytest.mark.parametrize(
    ("name", "system1", "system2", "capacity"),
    [
        ("MILLER_STANDARD", 5, 7, 10),
        ("COWAN_CONSERVATIVE", 3, 5, 7),
        ("EXTENDED_CONTEXT", 7, 9, 15),
        ("MINIMAL", 3, 4, 5),
    ],
)
def test_profiles_of_seed_003(name: ProfileName, system1: int, system2: int, capacity: int) -> None:
    profile = PROFILES[name]
    assert (profile.system1, profile.system2, profile.working_capacity) == (
        system1,
        system2,
        capacity,
    )
    assert memory_count(profile, 0.0) == system1
    assert memory_count(profile, 1.0) == system2


@pytest.mark.parametrize(
    ("name", "arousal", "count"),
    [
        ("MILLER_STANDARD", 0.25, 6),  # 5.5 rounds up
        ("MILLER_STANDARD", 0.24, 5),  # 5.48
        ("MILLER_STANDARD", 0.75, 7),  # 6.5 rounds up
        ("MILLER_STANDARD", 0.5, 6),
        ("MINIMAL", 0.5, 4),  # 3.5 rounds up, not to even
        ("MINIMAL", 0.49, 3),
        ("COWAN_CONSERVATIVE", 0.3, 4),  # 3.6
        ("EXTENDED_CONTEXT", 0.1, 7),  # 7.2
    ],
)
def test_count_interpolates_and_rounds_half_up(
    name: ProfileName, arousal: float, count: int
) -> None:
    assert memory_count(PROFILES[name], arousal) == count


@given(a=st.floats(0.0, 1.0), b=st.floats(0.0, 1.0), name=st.sampled_from(sorted(PROFILES)))
def test_count_never_falls_as_arousal_rises(a: float, b: float, name: ProfileName) -> None:
    low, high = sorted((a, b))
    profile = PROFILES[name]
    assert profile.system1 <= memory_count(profile, low) <= memory_count(profile, high)
    assert memory_count(profile, high) <= profile.system2


@pytest.mark.parametrize(
    ("arousal", "threshold", "system"),
    [
        (0.0, None, "SYSTEM_1"),
        (0.49, None, "SYSTEM_1"),
        (0.5, None, "SYSTEM_2"),
        (1.0, None, "SYSTEM_2"),
        (0.6, 0.7, "SYSTEM_1"),
        (0.7, 0.7, "SYSTEM_2"),
    ],
)
def test_the_breakdown_names_the_system_at_the_threshold_seed_003_or_the_agents(
    arousal: float, threshold: float | None, system: str
) -> None:
    """System 2 from arousal 0.5 (seed 003, 3.1 and 6), or from the agent type's own threshold;
    the count follows arousal alone."""
    at = {} if threshold is None else {"threshold": threshold}
    ranking = constrained(a_history(), profile=PROFILES["MILLER_STANDARD"], arousal=arousal, **at)
    breakdowns = {r.breakdown for r in ranking.results}
    assert {(b.system, b.count) for b in breakdowns} == {  # type: ignore[union-attr]
        (system, memory_count(PROFILES["MILLER_STANDARD"], arousal))
    }


@pytest.mark.parametrize("arousal", [-0.01, 1.01, math.nan])
def test_arousal_outside_zero_one_is_refused(arousal: float) -> None:
    with pytest.raises(ValueError, match="arousal"):
        memory_count(PROFILES["MILLER_STANDARD"], arousal)
    with pytest.raises(ValueError, match="arousal"):
        constrained(a_history(), profile=PROFILES["MINIMAL"], arousal=arousal)


def test_an_inconsistent_profile_is_refused() -> None:
    with pytest.raises(ValueError, match="system1 <= system2"):
        Profile("MINIMAL", 5, 4, 10)
    with pytest.raises(ValueError, match="working_capacity"):
        Profile("MINIMAL", 3, 6, 5)


def test_high_arousal_widens_the_window_and_keeps_the_supplement() -> None:
    history = a_history()

    calm = constrained(history, profile=PROFILES["EXTENDED_CONTEXT"], arousal=0.0)
    aroused = constrained(history, profile=PROFILES["EXTENDED_CONTEXT"], arousal=1.0)

    assert [s.memory.year for s in calm.results] == [12, 11, 10, 9, 8, 7, 6, 3, 1]
    assert [s.memory.year for s in aroused.results] == [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 1]
    last = aroused.results[-1].breakdown
    assert last == ConstrainedBreakdown(
        source="supplement",
        profile="EXTENDED_CONTEXT",
        arousal=1.0,
        count=9,
        system="SYSTEM_2",
        time=1,
        time_imputed=False,
        age=12,
        importance=0.95,
        decayed_importance=pytest.approx(0.95 * math.exp(-1.2)),
    )
    first = calm.results[0].breakdown
    assert isinstance(first, ConstrainedBreakdown)
    assert (first.source, first.count, first.system) == ("recent", 7, "SYSTEM_1")


@st.composite
def histories(draw: st.DrawFn) -> list[StoredMemory]:
    size = draw(st.integers(0, 30))
    return [
        memory(
            seq,
            importance=draw(st.floats(0.0, 1.0)),
            year=draw(st.none() | st.integers(0, 20)),
            destination=draw(st.sampled_from(["working", "episodic"])),
        )
        for seq in range(1, size + 1)
    ]


@settings(max_examples=150, deadline=None)
@given(memories=histories(), now=st.none() | st.integers(0, 25))
def test_miller_at_arousal_zero_is_basic_ranking(
    memories: list[StoredMemory], now: int | None
) -> None:
    expected = basic(memories, current_year=now)
    actual = constrained(
        memories, profile=PROFILES["MILLER_STANDARD"], arousal=0.0, current_year=now
    )

    assert actual.clock == expected.clock
    assert [(s.memory, s.score) for s in actual.results] == [
        (s.memory, s.score) for s in expected.results
    ]
    assert len(actual.results) == min(len(memories), 7)
    assert len({s.memory.memory_id for s in actual.results}) == len(actual.results)
