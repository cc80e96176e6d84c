"""Cutting an agent's derived log at a point: which batches a time or a position lets in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from projections.retrieval.as_of import AsOfNotInLogError
from schemas.memory_events import (
    DerivedEvent,
    DerivedRecord,
    DerivedUpTo,
    ImportanceInputs,
    LogRange,
    MemoryForgotten,
    MemoryRecorded,
    SourcePosition,
    encode_vector,
)
from schemas.topics import Topics
from streams.rebuild.log_cut import CutLog, LoggedRecord, LogPoint, cut_at, epoch_ms, parse_point

TOPICS = Topics()
AGENT, OTHER = "A1", "B1"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
BASE_MS = epoch_ms(NOW) - 10_000


def source(topic: str, offset: int) -> SourcePosition:
    return SourcePosition(topic=topic, partition=0, offset=offset)


def obs(offset: int) -> SourcePosition:
    return source(TOPICS.observations, offset)


def recorded(memory_id: str, at: int, agent: str = AGENT) -> MemoryRecorded:
    return MemoryRecorded(
        agent_id=agent,
        memory_id=memory_id,
        agent_type="default",
        source_event_id=f"src-{memory_id}",
        source_event_type="observation",
        source_position=obs(at),
        seq=at,
        content=f"memory {memory_id}",
        importance=0.5,
        destination="working",
        embedding=encode_vector([1.0, 0.0]),
        embedder="hashing-2",
        config_version="cfg",
        scoring=ImportanceInputs(method="explicit"),
    )


def forgotten(memory_id: str, cause: MemoryRecorded) -> MemoryForgotten:
    return MemoryForgotten(
        agent_id=cause.agent_id,
        memory_id=memory_id,
        destination="working",
        reason="capacity",
        caused_by=cause.event_id,
        source_position=cause.source_position,
        config_version="cfg",
    )


def marker(
    upto: dict[str, int], items: tuple[int, int] | None, lifecycle: tuple[int, int] | None
) -> DerivedUpTo:
    return DerivedUpTo(
        event_id=f"marker-{upto}",
        occurred_at=NOW,
        partition=0,
        upto=tuple(source(topic, offset) for topic, offset in sorted(upto.items())),
        items=None if items is None else LogRange(first=items[0], last=items[1]),
        lifecycle=None if lifecycle is None else LogRange(first=lifecycle[0], last=lifecycle[1]),
    )


def on(topic: str, offset: int, record: DerivedRecord, ms: int) -> LoggedRecord:
    return LoggedRecord(
        SourcePosition(topic=topic, partition=0, offset=offset), record, BASE_MS + ms
    )


M1 = recorded("m1", 0)
B1 = recorded("b1", 1, agent=OTHER)
M2 = recorded("m2", 2)
M1_OUT = forgotten("m1", M2)
M3 = recorded("m3", 3)
LEFTOVER = recorded("m4", 4)

LOG = [
    # batch 1 (logged at +1 s): observations 0-1; batch 2 (+2 s): observation 2 and retrieval 0,
    # whose recording pushed m1 out; batch 3 (+3 s): observation 3; then a recording of an
    # attempt at observation 4 that no marker covers.
    on(TOPICS.items, 0, M1, 900),
    on(TOPICS.items, 1, B1, 900),
    on(TOPICS.lifecycle, 0, marker({TOPICS.observations: 1}, (0, 1), None), 1000),
    on(TOPICS.items, 2, M2, 1900),
    on(TOPICS.lifecycle, 1, M1_OUT, 1900),
    on(
        TOPICS.lifecycle,
        2,
        marker({TOPICS.observations: 2, TOPICS.access: 0}, (2, 2), (1, 1)),
        2000,
    ),
    on(TOPICS.items, 3, M3, 2900),
    on(TOPICS.lifecycle, 3, marker({TOPICS.observations: 3}, (3, 3), None), 3000),
    on(TOPICS.items, 4, LEFTOVER, 3900),
]


def cut(point: LogPoint, **extra: Any) -> CutLog:
    return cut_at(LOG, point, agent_id=AGENT, partition=0, topics=TOPICS, now=NOW, **extra)


def at_ms(ms: int) -> datetime:
    return datetime.fromtimestamp((BASE_MS + ms) / 1000, UTC)


def ids(events: list[DerivedEvent]) -> list[tuple[str, str]]:
    return [(e.event_type, getattr(e, "memory_id", "")) for e in events]


def test_a_time_lets_in_the_batches_whose_marker_was_logged_by_then() -> None:
    early = cut(LogPoint(time=at_ms(1500)))
    assert ids(early.events) == [("memory.recorded", "m1")]
    assert (early.batches, early.batches_after) == (1, 2)
    assert early.last_batch == source(TOPICS.lifecycle, 0)
    assert ids(early.later) == [
        ("memory.recorded", "m2"),
        ("memory.forgotten", "m1"),
        ("memory.recorded", "m3"),
    ]
    # At the marker's own millisecond the batch counts; its events' earlier times do not.
    assert ids(cut(LogPoint(time=at_ms(2000))).events) == [
        ("memory.recorded", "m1"),
        ("memory.recorded", "m2"),
        ("memory.forgotten", "m1"),
    ]
    assert ids(cut(LogPoint(time=at_ms(1999))).events) == [("memory.recorded", "m1")]


def test_each_memory_held_at_the_cut_is_dated_by_its_batchs_marker() -> None:
    """When the batch that wrote it became part of the memory: what ``--again`` uses to tell a
    memory a retrieval could not have seen yet."""
    assert cut(LogPoint(time=NOW)).written_ms == {
        "m1": BASE_MS + 1000,
        "m2": BASE_MS + 2000,
        "m3": BASE_MS + 3000,
    }


def test_another_agents_events_and_uncovered_ones_never_count() -> None:
    everything = cut(LogPoint(time=NOW))
    assert ("memory.recorded", "b1") not in ids(everything.events)
    assert ids(everything.events)[-1] == ("memory.recorded", "m3")
    assert LEFTOVER not in everything.events + everything.later


def test_a_published_record_lets_in_the_batch_that_derived_it() -> None:
    for offset, batches in ((0, 1), (1, 1), (2, 2), (3, 3)):
        assert cut(LogPoint(position=obs(offset))).batches == batches
    retrieval = cut(LogPoint(position=source(TOPICS.access, 0)))
    assert retrieval.batches == 2


def test_a_derived_position_lets_in_the_batch_that_logged_it() -> None:
    lifecycle = TOPICS.lifecycle
    assert cut(LogPoint(position=source(lifecycle, 0))).batches == 1  # batch 1's marker
    assert cut(LogPoint(position=source(lifecycle, 1))).batches == 2  # batch 2's forgetting
    assert cut(LogPoint(position=source(TOPICS.items, 1))).batches == 1
    assert cut(LogPoint(position=source(TOPICS.items, 3))).batches == 3
    with pytest.raises(AsOfNotInLogError, match=r"no batch marker covers memory\.items:0:4"):
        cut(LogPoint(position=source(TOPICS.items, 4)))


def test_a_recorded_retrieval_is_cut_before_the_batch_that_derived_its_own_record() -> None:
    """Whatever the clocks say: batch 2 derived retrieval 0, so it came after it."""
    served = cut(LogPoint(time=NOW, served_before=source(TOPICS.access, 0)))
    assert served.batches == 1
    assert cut(LogPoint(time=NOW, served_before=source(TOPICS.access, 1))).batches == 3


@pytest.mark.parametrize(
    ("point", "ends", "message"),
    [
        (LogPoint(time=NOW + timedelta(seconds=1)), {}, "is in the future"),
        (
            LogPoint(position=SourcePosition(topic=TOPICS.observations, partition=1, offset=0)),
            {},
            "not on the agent's partition",
        ),
        (LogPoint(position=obs(9)), {(TOPICS.observations, 0): 9}, "the partition ends at 9"),
        (LogPoint(position=obs(4)), {(TOPICS.observations, 0): 9}, "not derived yet"),
    ],
)
def test_a_point_the_log_does_not_hold_is_refused(
    point: LogPoint, ends: dict[tuple[str, int], int], message: str
) -> None:
    with pytest.raises(AsOfNotInLogError, match=message):
        cut(point, ends=ends)


def test_a_partition_without_markers_is_cut_by_each_events_log_time() -> None:
    unmarked = [r for r in LOG if not isinstance(r.record, DerivedUpTo)]
    early = cut_at(
        unmarked,
        LogPoint(time=at_ms(1900)),
        agent_id=AGENT,
        partition=0,
        topics=TOPICS,
        now=NOW,
    )
    assert not early.marked
    # The older rule: what lies beyond the last recording's source is left out (nothing here).
    assert ids(early.events) == [
        ("memory.recorded", "m1"),
        ("memory.recorded", "m2"),
        ("memory.forgotten", "m1"),
    ]
    with pytest.raises(AsOfNotInLogError, match="give a time"):
        cut_at(
            unmarked, LogPoint(position=obs(1)), agent_id=AGENT, partition=0, topics=TOPICS, now=NOW
        )


@pytest.mark.parametrize(
    ("text", "point"),
    [
        ("agent.observations:0:17", LogPoint(position=obs(17))),
        (
            "t1.memory.items:2:5",
            LogPoint(position=SourcePosition(topic="t1.memory.items", partition=2, offset=5)),
        ),
        ("2026-01-01T00:00:00", LogPoint(time=NOW)),
        (
            "2026-01-01T02:00:00+02:00",
            LogPoint(time=datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))),
        ),
    ],
)
def test_points_are_positions_or_times(text: str, point: LogPoint) -> None:
    assert parse_point(text) == point


@pytest.mark.parametrize("text", ["yesterday", "agent.observations:x:1", "", "topic:1:-1"])
def test_anything_else_is_refused_naming_both_forms(text: str) -> None:
    with pytest.raises(
        ValueError, match=r"is neither topic:partition:offset \(as .*\) nor an ISO 8601 time"
    ):
        parse_point(text)


def test_times_at_the_ends_of_the_calendar_do_not_overflow() -> None:
    first = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=23, minutes=59)))
    last = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=23, minutes=59)))
    assert epoch_ms(first) < 0 < epoch_ms(last)
    assert cut(LogPoint(time=first)).batches == 0
    with pytest.raises(AsOfNotInLogError, match="in the future"):
        cut(LogPoint(time=last))
