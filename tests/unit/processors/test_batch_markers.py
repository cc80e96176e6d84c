"""What one batch marker says of the source records: the readers that cut the log at a source
position (a recall) or advance a store's marks (the episodic projector) ask it here."""

from __future__ import annotations

from datetime import UTC, datetime

from processors.batch_markers import derives, marked_upto, marker_upto
from schemas.memory_events import DerivedUpTo, SourcePosition


def marker(partition: int, *upto: tuple[str, int]) -> DerivedUpTo:
    return DerivedUpTo(
        event_id=f"m-{partition}-{upto}",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        partition=partition,
        upto=tuple(
            SourcePosition(topic=topic, partition=partition, offset=offset)
            for topic, offset in upto
        ),
    )


def at(topic: str, partition: int, offset: int) -> SourcePosition:
    return SourcePosition(topic=topic, partition=partition, offset=offset)


def test_a_marker_upto_is_its_highest_offset_per_source_partition() -> None:
    assert marker_upto(marker(1, ("obs", 4), ("tick", 2))) == {("obs", 1): 4, ("tick", 1): 2}
    assert marker_upto(marker(0)) == {}


def test_a_marker_derives_the_records_it_names_and_those_before_them() -> None:
    m = marker(1, ("obs", 4), ("tick", 2))
    assert derives(m, at("obs", 1, 4))
    assert derives(m, at("obs", 1, 0))
    assert not derives(m, at("obs", 1, 5))
    assert derives(m, at("tick", 1, 2))
    assert not derives(m, at("tick", 1, 3))


def test_a_marker_derives_nothing_of_a_source_partition_it_does_not_name() -> None:
    m = marker(1, ("obs", 4))
    assert not derives(m, at("obs", 0, 0))
    assert not derives(m, at("dec", 1, 0))
    assert not derives(marker(1), at("obs", 1, 0))


def test_markers_together_mark_the_highest_offset_any_names() -> None:
    older, newer = marker(0, ("obs", 3), ("tick", 5)), marker(0, ("obs", 7))
    assert marked_upto([newer, older]) == {("obs", 0): 7, ("tick", 0): 5}
