"""The engine's pure part: which episodic memories are copies of working ones."""

from __future__ import annotations

from datetime import UTC, datetime

from projections.memory import StoredMemory
from projections.retrieval.engine import without_copies_of
from schemas.memory_events import Destination


def memory(
    memory_id: str, source_event_id: str, *, level: int = 0, destination: Destination = "episodic"
) -> StoredMemory:
    return StoredMemory(
        memory_id=memory_id,
        agent_id="H001",
        content=memory_id,
        importance=0.8,
        destination=destination,
        seq=1,
        occurred_at=datetime(2024, 1, 1, tzinfo=UTC),
        source_event_id=source_event_id,
        source_event_type="observation",
        level=level,
    )


def test_a_copy_is_dropped_while_its_original_is_in_working_memory() -> None:
    original = memory("original", "event-1", destination="working")
    copy = memory("copy", "event-1")
    other = memory("other", "event-2")

    assert without_copies_of([original], [copy, other]) == [other]
    assert without_copies_of([], [copy, other]) == [copy, other], "FIFO took the original"


def test_a_summary_of_the_same_source_event_is_no_copy() -> None:
    trigger = memory("trigger", "event-1", destination="working")
    l1 = memory("l1", "event-1", level=1)
    l2 = memory("l2", "event-1", level=2)

    assert without_copies_of([trigger], [l1, l2]) == [l1, l2]
