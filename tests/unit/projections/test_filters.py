"""MemoryFilter: which memories any mode may return, and which store levels must be read."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from projections.memory import StoredMemory
from projections.retrieval.filters import MemoryFilter, levels_for, memory_kind
from schemas.memory_events import Level
from tests.unit.projections.test_scoring import memory


def summary(seq: int, level: int) -> StoredMemory:
    return memory(seq, destination="episodic").model_copy(update={"level": level})


def test_kind_is_the_level_for_summaries_else_the_store() -> None:
    assert memory_kind(memory(1, destination="working")) == "working"
    assert memory_kind(memory(2, destination="episodic")) == "episodic"
    assert memory_kind(summary(3, 1)) == "summary_l1"
    assert memory_kind(summary(4, 2)) == "summary_l2"


def test_an_empty_filter_admits_everything() -> None:
    everything = [memory(1, destination="working"), memory(2), summary(3, 1), summary(4, 2)]
    assert all(MemoryFilter().admits(m) for m in everything)


def test_tags_admit_any_of_them_ignoring_case() -> None:
    flood = MemoryFilter(tags=("FLOOD", "fire"))

    assert flood.admits(memory(1, tags=("Flood", "Danger")))
    assert flood.admits(memory(2, tags=("Fire",)))
    assert not flood.admits(memory(3, tags=("Routine",)))
    assert not flood.admits(memory(4))


def test_kinds_select_by_store_and_level() -> None:
    working, episodic, l1, l2 = (
        memory(1, destination="working"),
        memory(2),
        summary(3, 1),
        summary(4, 2),
    )
    chosen = MemoryFilter(kinds=("episodic", "summary_l2"))

    assert [chosen.admits(m) for m in (working, episodic, l1, l2)] == [False, True, False, True]


def test_facts_and_procedures_match_nothing_yet() -> None:
    later_layers = MemoryFilter(kinds=("fact", "procedure"))

    assert not any(
        later_layers.admits(m) for m in (memory(1, destination="working"), memory(2), summary(3, 1))
    )


def test_min_importance_is_inclusive() -> None:
    important = MemoryFilter(min_importance=0.6)

    assert important.admits(memory(1, importance=0.6))
    assert not important.admits(memory(2, importance=0.59))


@pytest.mark.parametrize(
    ("bounds", "admitted"),
    [
        ({"year_from": 3, "year_to": 5}, [3, 4, 5]),
        ({"year_from": 5}, [5, 6]),
        ({"year_to": 2}, [1, 2]),
        ({}, [1, 2, 3, 4, 5, 6, None]),
    ],
)
def test_year_bounds_are_inclusive_and_exclude_memories_without_a_year(
    bounds: dict[str, int], admitted: list[int | None]
) -> None:
    years: list[int | None] = [1, 2, 3, 4, 5, 6, None]
    memories = [memory(seq, year=year) for seq, year in enumerate(years, start=1)]

    kept = [m.year for m in memories if MemoryFilter.model_validate(bounds).admits(m)]

    assert kept == admitted


def test_step_bounds_ignore_years_and_the_reverse() -> None:
    stepped = memory(1, step=40)
    dated = memory(2, year=4)

    assert MemoryFilter(step_from=40, step_to=40).admits(stepped)
    assert not MemoryFilter(step_from=41).admits(stepped)
    assert not MemoryFilter(step_to=100).admits(dated), "no step: excluded by a step bound"
    assert not MemoryFilter(year_from=0).admits(stepped)


def test_conditions_combine() -> None:
    strict = MemoryFilter(tags=("flood",), kinds=("episodic",), min_importance=0.5, year_from=2)

    assert strict.admits(memory(1, tags=("flood",), importance=0.9, year=3))
    assert not strict.admits(memory(2, tags=("flood",), importance=0.9, year=1))
    assert not strict.admits(memory(3, tags=("flood",), importance=0.4, year=3))
    assert not strict.admits(
        memory(4, tags=("flood",), importance=0.9, year=3, destination="working")
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"year_from": 2**53 + 1}, "year_from"),
        ({"step_to": -(2**53) - 1}, "step_to"),
        ({"min_importance": 1.5}, "min_importance"),
        ({"kinds": ["semantic"]}, "kinds"),
        ({"tags": [""]}, "tags"),
        ({"level": 1}, "level"),
    ],
)
def test_invalid_filters_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        MemoryFilter.model_validate(fields)


def test_a_range_ending_before_it_starts_admits_nothing() -> None:
    """Accepted, as an empty interval: no JSON Schema can compare two fields, so a refusal
    would make a request valid by the OpenAPI document one the service refuses."""
    years = MemoryFilter(year_from=5, year_to=4)
    steps = MemoryFilter(step_from=10, step_to=9)

    assert not any(years.admits(memory(1, year=year)) for year in range(10))
    assert not any(steps.admits(memory(2, step=step)) for step in range(20))


@pytest.mark.parametrize(
    ("kinds", "levels", "expected"),
    [
        ((), (0,), ((0,), True)),
        ((), (2, 1), ((1, 2), False)),
        (("working",), (0,), ((0,), True)),
        (("episodic",), (0,), ((0,), False)),
        (("summary_l1",), (0,), ((1,), False)),
        (("working", "summary_l2"), (0,), ((0, 2), True)),
        (("episodic", "summary_l1"), (0, 2), ((0, 1), False)),
        (("episodic",), (1,), ((0,), False)),
        (("fact",), (0, 1), ((), False)),
        (("procedure",), (0,), ((), False)),
    ],
)
def test_kinds_decide_the_levels_read_when_given(
    kinds: tuple[str, ...], levels: tuple[Level, ...], expected: tuple[tuple[int, ...], bool]
) -> None:
    memory_filter = MemoryFilter.model_validate({"kinds": kinds})

    assert levels_for(memory_filter, levels) == expected


def test_no_filter_reads_the_asked_levels() -> None:
    assert levels_for(None, (0, 1)) == ((0, 1), True)
    assert levels_for(None, (2,)) == ((2,), False)
