"""What a takeover applies again of the derived log it read (``catch_up``)."""

from __future__ import annotations

from datetime import UTC, datetime

from processors.batch import RawRecord
from processors.emission_order import causal_order
from schemas.agent_events import Decision, Observation
from schemas.codec import encode_event
from schemas.memory_events import (
    AgentForgotten,
    DerivedEvent,
    ForgetAgent,
    MemoryForgotten,
    MemoryRecorded,
    memory_id_for,
)
from streams.worker.catch_up import catch_up
from tests.agent_streams import TOPICS, derived_in_batches, projected, reused_after_forgetting

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def forgotten_between_two_lives() -> list[DerivedEvent]:
    """H001's ended life (an episodic observation, the last record of its topic), its erasure,
    its next life (a decision): the log read back, in causal order."""
    old = Observation(agent_id="H001", content="the ended life", importance=0.9)
    forget = ForgetAgent(event_id="forget-1", agent_id="H001", requested_at=NOW)
    new = Decision(agent_id="H001", content="the next life", skill="elevate", importance=0.9)
    batches = [
        [RawRecord(TOPICS.observations, 0, 10, b"H001", encode_event(old), "observation")],
        [RawRecord(TOPICS.schedule, 0, 5, b"H001", encode_event(forget), None, "tick")],
        [RawRecord(TOPICS.decisions, 0, 3, b"H001", encode_event(new), "decision")],
    ]
    derived, _ = derived_in_batches(batches)
    return causal_order(derived)


def described(events: list[DerivedEvent]) -> list[str]:
    return [
        e.content if isinstance(e, MemoryRecorded) else type(e).__name__
        for e in events
        if isinstance(e, MemoryRecorded | AgentForgotten)
    ]


def test_an_applied_erasure_is_not_applied_again_nor_the_life_it_ended() -> None:
    """Applied again at its offset, the erasure erased the next life (not applied again, its
    recording below its own topic's offset); skipped alone, the ended life's last recording,
    at its own topic's offset, came back."""
    logged = forgotten_between_two_lives()
    applied = {
        (TOPICS.observations, 0): 10,
        (TOPICS.schedule, 0): 5,
        (TOPICS.decisions, 0): 3,
    }
    assert described(catch_up(logged, applied)) == ["the next life"]


def test_an_erasure_not_applied_yet_is_applied_after_what_it_erases() -> None:
    logged = forgotten_between_two_lives()
    applied = {(TOPICS.observations, 0): 10, (TOPICS.schedule, 0): 4}
    assert described(catch_up(logged, applied)) == [
        "the ended life",
        "AgentForgotten",
        "the next life",
    ]


def test_a_forgetting_of_an_id_recorded_again_after_it_is_not_applied_again() -> None:
    """x is pushed out of working memory (capacity 4) by four decisions, then published again
    as an observation. The first life's forgetting sits at the decisions' applied offset:
    applied again, it deleted the second life (below the observations' offset, not applied
    again), which a rebuild keeps."""
    logged, offsets = reused_after_forgetting()
    x = memory_id_for("A1", "x")
    assert [type(e).__name__ for e in logged if getattr(e, "memory_id", None) == x] == [
        "MemoryRecorded",
        "MemoryForgotten",
        "MemoryRecorded",
    ]
    applied = offsets  # all applied

    tail = catch_up(logged, applied)

    assert not any(isinstance(e, MemoryForgotten) and e.memory_id == x for e in tail)
    live = projected(logged)
    assert projected([*logged, *tail]) == live
    assert live[x].content == "life 5 of x"
