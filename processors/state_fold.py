"""Per-agent processing state, folded from the derived log itself.

The processor's state (next sequence number, working and episodic membership) is a function of
the MemoryRecorded and MemoryForgotten events it has emitted, so a worker that takes over a
partition rebuilds it by reading the derived topics: no separate changelog to drift from the
log. The same fold tells which source records were already derived (``derived_upto``), so a
record redelivered after a crash is not derived twice (DESIGN.md, invariant 3).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from processors.recording import AgentMemoryState, EpisodicEntry
from schemas.memory_events import DerivedEvent, MemoryForgotten, MemoryRecorded


@dataclass
class FoldedState:
    states: dict[str, AgentMemoryState] = field(default_factory=dict)
    derived_upto: dict[tuple[str, int], int] = field(default_factory=dict)
    """The highest source offset per (topic, partition) whose memory is in the log."""

    def apply(self, event: DerivedEvent) -> None:
        position = event.source_position
        # From recordings only: a record whose forgettings were logged but whose recording was
        # lost (the two topics are written independently) must be derived again.
        if position is not None and isinstance(event, MemoryRecorded):
            key = (position.topic, position.partition)
            if self.derived_upto.get(key, -1) < position.offset:
                self.derived_upto[key] = position.offset
        state = self.states.get(event.agent_id) or AgentMemoryState()
        self.states[event.agent_id] = fold(state, event)

    def apply_all(self, events: Iterable[DerivedEvent]) -> FoldedState:
        for event in events:
            self.apply(event)
        return self


def fold(state: AgentMemoryState, event: DerivedEvent) -> AgentMemoryState:
    """The state after one derived event; equal to what ``record`` returned when it emitted it."""
    if isinstance(event, MemoryRecorded):
        working, episodic = state.working, state.episodic
        if event.destination == "working":
            if event.memory_id not in working:
                working = (*working, event.memory_id)
        elif all(e.memory_id != event.memory_id for e in episodic):
            episodic = (*episodic, EpisodicEntry(event.importance, event.seq, event.memory_id))
        return AgentMemoryState(
            next_seq=max(state.next_seq, event.seq + 1), working=working, episodic=episodic
        )
    if isinstance(event, MemoryForgotten):
        if event.destination == "working":
            return AgentMemoryState(
                next_seq=state.next_seq,
                working=tuple(m for m in state.working if m != event.memory_id),
                episodic=state.episodic,
            )
        return AgentMemoryState(
            next_seq=state.next_seq,
            working=state.working,
            episodic=tuple(e for e in state.episodic if e.memory_id != event.memory_id),
        )
    return state


def causal_order(events: Iterable[DerivedEvent]) -> list[DerivedEvent]:
    """The emission order of derived events read back from two topics: each recording in log
    order, followed by the forgettings it caused.

    Read back, ``memory.items`` and ``memory.lifecycle`` are two sequences; applying all
    recordings before all forgettings would move a projection's applied position past
    forgettings it then skips. Forgettings whose cause is not in ``events`` (its recording was
    lost in a partial write) come last.
    """
    recorded = [e for e in events if isinstance(e, MemoryRecorded)]
    caused: dict[str, list[DerivedEvent]] = {}
    for event in events:
        if isinstance(event, MemoryForgotten):
            caused.setdefault(event.caused_by, []).append(event)
    ordered: list[DerivedEvent] = []
    for memory in recorded:
        ordered.append(memory)
        ordered.extend(caused.pop(memory.event_id, ()))
    for orphans in caused.values():
        ordered.extend(orphans)
    return ordered
