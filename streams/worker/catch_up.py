"""What a takeover applies again of the derived log it read: the events its stores may lack."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from schemas.memory_events import AgentForgotten, DerivedEvent, MemoryForgotten, MemoryWritten


def catch_up(
    logged: Sequence[DerivedEvent], applied: Mapping[tuple[str, int], int]
) -> list[DerivedEvent]:
    """What a takeover applies again of ``logged`` (in causal order): each event from the
    stores' applied offset of its source on (one source record derives several events, which
    a crash may have cut between), but an erasure only past it, and nothing of an agent before
    an erasure already applied. Applied again, that erasure would erase the agent's next life,
    whose recordings, below their own topics' offsets, are not applied again; and what came
    before it, applied again at its own offset without it, would bring back the ended life.

    Likewise a forgetting of a memory whose id was recorded again after it (an event id used
    again once its memory was forgotten) is not applied again: it would delete that memory,
    or leave Redis refusing it as evicted."""
    ended: dict[str, int] = {}
    written: dict[str, int] = {}
    for number, event in enumerate(logged):
        if isinstance(event, AgentForgotten) and not _lacking(event, applied):
            ended[event.agent_id] = number
        elif isinstance(event, MemoryWritten):
            written[event.memory_id] = number
    return [
        event
        for number, event in enumerate(logged)
        if number > ended.get(event.agent_id, -1)
        and _lacking(event, applied)
        and not (isinstance(event, MemoryForgotten) and written.get(event.memory_id, -1) > number)
    ]


def _lacking(event: DerivedEvent, applied: Mapping[tuple[str, int], int]) -> bool:
    """Whether the stores may lack ``event`` (:func:`catch_up`)."""
    position = event.source_position
    if position is None:
        return True
    mark = applied.get((position.topic, position.partition), -1)
    if isinstance(event, AgentForgotten):
        return position.offset > mark
    return position.offset >= mark
