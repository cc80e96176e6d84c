"""Every dispatch on an event's type in the projections refuses a type it does not name.

``MemoryReinforced`` stands for a derived event type added to the log without its handling:
it has what the handled types have (a memory id, a destination, a position), so a chain of
``isinstance`` checks would let it through as another type or drop it unnoticed. Each dispatch
is an exhaustive ``match`` ending in ``assert_never``, which mypy proves complete and which
raises ``AssertionError`` at run time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import pytest

from projections.episodic.edge import episodic_changes
from projections.history import LogPosition, PositionedEvent, build_timeline
from projections.retrieval.recall_diff import memory_fates
from projections.working.redis_store import RedisWorkingMemory
from schemas.envelope import Event
from schemas.memory_events import (
    ImportanceInputs,
    MemoryRecorded,
    SourcePosition,
    encode_vector,
)

AGENT = "H001"
POSITION = SourcePosition(topic="agent.observations", partition=0, offset=7)


class MemoryReinforced(Event):
    event_type: Literal["memory.reinforced"] = "memory.reinforced"
    memory_id: str = "m-1"
    destination: Literal["working", "episodic"] = "episodic"
    source_position: SourcePosition | None = POSITION


def unknown() -> Any:
    """Typed ``Any`` on purpose: the point is what happens when the type check is bypassed."""
    return MemoryReinforced(agent_id=AGENT, occurred_at=datetime(2024, 5, 1, tzinfo=UTC))


def recorded(destination: Literal["working", "episodic"]) -> MemoryRecorded:
    return MemoryRecorded(
        agent_id=AGENT,
        memory_id=f"m-{destination}",
        agent_type="household",
        source_event_id="source-1",
        source_event_type="observation",
        source_position=POSITION,
        seq=0,
        content="Year 3: A major flood",
        importance=0.8,
        destination=destination,
        embedding=encode_vector([0.0, 1.0]),
        embedder="hashing-2",
        config_version="cfg1",
        scoring=ImportanceInputs(method="explicit"),
    )


async def test_working_memory_refuses_an_unknown_event_type_before_writing() -> None:
    """Raised while framing the batch: nothing of it reaches Redis (the port is never dialled)."""
    store = RedisWorkingMemory.from_url("redis://127.0.0.1:9/0")
    try:
        with pytest.raises(AssertionError, match="MemoryReinforced"):
            await store.apply([recorded("working"), unknown()])
    finally:
        await store.close()


def test_the_episodic_fold_refuses_an_unknown_event_type() -> None:
    known = episodic_changes([recorded("episodic")], dim=2)
    assert list(known.upserts) == ["m-episodic"]
    with pytest.raises(AssertionError, match="MemoryReinforced"):
        episodic_changes([recorded("episodic"), unknown()], dim=2)


def test_the_timeline_refuses_an_unknown_event_type() -> None:
    where = LogPosition(topic="memory.lifecycle", partition=0, offset=3)
    assert build_timeline(AGENT, [PositionedEvent(recorded("working"), where)]).entries
    with pytest.raises(AssertionError, match="MemoryReinforced"):
        build_timeline(AGENT, [PositionedEvent(unknown(), where)])


def test_the_fates_of_a_recall_refuse_an_unknown_event_type() -> None:
    """Before the point and after it: a memory written by an unhandled type would otherwise
    read as not in the log."""
    assert memory_fates([recorded("working")], [recorded("episodic")]) == {
        "m-working": "held",
        "m-episodic": "written_after",
    }
    with pytest.raises(AssertionError, match="MemoryReinforced"):
        memory_fates([recorded("working"), unknown()], [])
    with pytest.raises(AssertionError, match="MemoryReinforced"):
        memory_fates([recorded("working")], [unknown()])
