"""Every dispatch on a derived event's type in the processors refuses a type it does not name.

``MemoryReinforced`` stands for a derived event type added to the log without its handling. A
fold that ended in a silent ``return state`` would let the worker's state drift from the log
unnoticed, and a routing by ``isinstance(event, MemoryRecorded)`` would log it on
``memory.lifecycle`` without anyone deciding so. Each dispatch is an exhaustive ``match``
ending in ``assert_never`` (mypy proves it complete), which raises ``AssertionError``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import pytest

from processors.batch import RawRecord, process_batch
from processors.batch_markers import MarkerIndex, logged_ranges
from processors.emission_order import causal_order
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState, fold
from schemas.envelope import Event
from schemas.memory_events import SourcePosition, derived_topic_of
from schemas.topics import Topics
from tests.agent_streams import CTX, FAILED_AT

POSITION = SourcePosition(topic="agent.observations", partition=0, offset=7)


class MemoryReinforced(Event):
    event_type: Literal["memory.reinforced"] = "memory.reinforced"
    memory_id: str = "m-1"
    source_position: SourcePosition | None = POSITION


def unknown() -> Any:
    """Typed ``Any`` on purpose: the point is what happens when the type check is bypassed."""
    return MemoryReinforced(agent_id="H001", occurred_at=datetime(2024, 5, 1, tzinfo=UTC))


def test_the_fold_refuses_an_unknown_event_type() -> None:
    with pytest.raises(AssertionError):
        fold(AgentMemoryState(), unknown())
    with pytest.raises(AssertionError):
        FoldedState().apply(unknown())


def test_no_derived_topic_is_guessed_for_an_unknown_event_type() -> None:
    with pytest.raises(AssertionError):
        derived_topic_of(unknown())
    with pytest.raises(AssertionError):
        Topics().derived_topic(unknown())


def test_markers_and_the_emission_order_refuse_an_unknown_event_type() -> None:
    """What the worker logs as a batch's range, and what readers count and reorder."""
    landed = SourcePosition(topic="memory.lifecycle", partition=0, offset=3)
    with pytest.raises(AssertionError):
        logged_ranges([unknown()], [landed])
    with pytest.raises(AssertionError):
        MarkerIndex().covers(landed, unknown())
    with pytest.raises(AssertionError):
        causal_order([unknown()])


def test_a_batch_refuses_a_record_of_an_unknown_kind() -> None:
    record = RawRecord("agent.observations", 0, 0, b"A", b"{}", "observation", kind=unknown_kind())
    with pytest.raises(AssertionError):
        process_batch([record], lambda _: AgentMemoryState(), ctx=CTX, failed_at=FAILED_AT)


def unknown_kind() -> Any:
    return "reinforcement"
