"""Per-agent processing state, folded from the derived log itself.

The processor's state (next sequence number, clock, working and episodic membership, summaries
and their use) is a function of the derived events it has emitted and of the retrievals on
``memory.access``, so a worker that takes over a
partition rebuilds it by reading the derived topics: no separate changelog to drift from the
log. The same fold tells which source records were already derived (``derived_upto``), so a
record redelivered after a crash is not derived twice (DESIGN.md, invariant 3).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from processors.lifecycle import on_retrieval
from processors.recording import (
    AgentMemoryState,
    EpisodicEntry,
    SummaryEntry,
    WorkingEntry,
    with_clock,
)
from schemas.memory_events import (
    ConsolidationCompleted,
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
    SourcePosition,
)


@dataclass
class FoldedState:
    schedule_topic: str | None = None
    """Ticks have no recording; what they derived marks them as done instead."""
    states: dict[str, AgentMemoryState] = field(default_factory=dict)
    derived_upto: dict[tuple[str, int], int] = field(default_factory=dict)
    """The highest source offset per (topic, partition) whose derived events are in the log."""

    def _mark(self, position: SourcePosition) -> None:
        key = (position.topic, position.partition)
        if self.derived_upto.get(key, -1) < position.offset:
            self.derived_upto[key] = position.offset

    def apply(self, event: DerivedEvent) -> None:
        position = event.source_position
        # An agent event is done once its recording is in the log, which is the last of what it
        # derives but for the forgettings that recording caused: a record whose lifecycle events
        # were logged but whose recording was lost (the topics are written independently) must
        # be derived again.
        if position is not None and (
            isinstance(event, MemoryRecorded) or position.topic == self.schedule_topic
        ):
            self._mark(position)
        state = self.states.get(event.agent_id) or AgentMemoryState()
        self.states[event.agent_id] = fold(state, event)

    def apply_retrieval(self, event: MemoryRetrieved, position: SourcePosition | None) -> None:
        """Count a retrieval read back from ``memory.access``; its offset is then consumed."""
        if position is not None:
            self._mark(position)
        state = self.states.get(event.agent_id)
        if state is not None:
            self.states[event.agent_id] = on_retrieval(event, state)

    def apply_all(self, events: Iterable[DerivedEvent]) -> FoldedState:
        for event in events:
            self.apply(event)
        return self


def fold(state: AgentMemoryState, event: DerivedEvent) -> AgentMemoryState:
    """The state after one derived event: equal to what the processor held after emitting it.

    Idempotent per event (a redelivered or re-derived event changes nothing), which a property
    test checks against the live path.
    """
    if isinstance(event, MemoryRecorded):
        working, episodic = state.working, state.episodic
        if event.destination == "working":
            if all(w.memory_id != event.memory_id for w in working):
                working = (*working, WorkingEntry.of(event))
        elif all(e.memory_id != event.memory_id for e in episodic):
            episodic = (*episodic, EpisodicEntry(event.importance, event.seq, event.memory_id))
        return with_clock(
            replace(
                state,
                next_seq=max(state.next_seq, event.seq + 1),
                agent_type=event.agent_type,
                working=working,
                episodic=episodic,
            ),
            event.year,
            event.step,
        )
    if isinstance(event, MemoryPromoted):
        if any(e.memory_id == event.memory_id for e in state.episodic):
            return state
        copy = EpisodicEntry(event.importance, event.seq, event.memory_id)
        return replace(state, episodic=(*state.episodic, copy))
    if isinstance(event, ConsolidationCompleted):
        considered = {o.memory_id for o in event.considered}
        return replace(
            state,
            working=tuple(
                replace(w, considered=True) if w.memory_id in considered else w
                for w in state.working
            ),
        )
    if isinstance(event, MemorySummarised):
        if any(s.memory_id == event.memory_id for s in (*state.summaries, *state.pending_l1)):
            return state
        entry = SummaryEntry.of(event)
        next_seq = max(state.next_seq, event.seq + 1)
        if event.level == 1:
            return replace(
                state,
                next_seq=next_seq,
                l1_upto_seq=max(state.l1_upto_seq, event.covers_upto_seq),
                pending_l1=(*state.pending_l1, entry),
                summaries=(*state.summaries, entry),
            )
        covered = set(event.summarises)
        return replace(
            state,
            next_seq=next_seq,
            pending_l1=tuple(s for s in state.pending_l1 if s.memory_id not in covered),
            summaries=(*state.summaries, entry),
        )
    if isinstance(event, MemoryForgotten):
        gone = event.memory_id
        if event.destination == "working":
            return replace(state, working=tuple(w for w in state.working if w.memory_id != gone))
        if event.level == 0:
            return replace(state, episodic=tuple(e for e in state.episodic if e.memory_id != gone))
        return replace(state, summaries=tuple(s for s in state.summaries if s.memory_id != gone))
    return state


def _position_key(event: DerivedEvent) -> tuple[str, int, int] | tuple[str]:
    position = event.source_position
    if position is None:
        return (event.event_id,)
    return (position.topic, position.partition, position.offset)


def causal_order(events: Iterable[DerivedEvent]) -> list[DerivedEvent]:
    """The emission order of derived events read back from two topics.

    ``memory.items`` holds the recordings and ``memory.lifecycle`` everything else, each in
    emission order. What one source record derived shares its position: the lifecycle events it
    triggered (summaries, promotions, prunings, and the forgettings promotions caused), then its
    recording, then the forgettings the recording caused. So the lifecycle events are grouped by
    source position, and each group is put before the recording of the same position, after
    every group that precedes it in the lifecycle log.

    Groups of records without a recording (ticks) keep their place among the lifecycle groups,
    but may come out ahead of recordings that derived nothing else and were emitted before
    them. That reordering is harmless: such a recording touches only its new memory and working
    memories, a tick's events only summaries, so the two commute in every projection, and the
    fold does not depend on their order (checked by a property test).

    Applying all recordings before all lifecycle events instead would move a projection's
    applied position past lifecycle events it then skips, and could delete a promoted copy
    before it is written. Forgettings whose cause is not in ``events`` (its recording was lost
    in a partial write) come last. Duplicates (same event id) are dropped. Partitions are put
    in order one by one: only within one are the two topics' orders comparable.
    """
    # A producer retry can log a record twice; the ids are deterministic, so the first copy is
    # the event and any later one a duplicate, which folding must not see again.
    seen: set[str] = set()
    unique: list[DerivedEvent] = []
    for event in events:
        if event.event_id not in seen:
            seen.add(event.event_id)
            unique.append(event)
    by_partition: dict[int | None, list[DerivedEvent]] = {}
    for event in unique:
        position = event.source_position
        by_partition.setdefault(None if position is None else position.partition, []).append(event)
    return [e for part in by_partition.values() for e in _partition_order(part)]


def _partition_order(events: list[DerivedEvent]) -> list[DerivedEvent]:
    """:func:`causal_order` within one partition number, where both topics hold one worker's
    emissions in order (derived events go to their source's partition number)."""
    recorded = [e for e in events if isinstance(e, MemoryRecorded)]
    recorded_ids = {e.event_id for e in recorded}
    after: dict[str, list[DerivedEvent]] = {}
    groups: dict[tuple[str, int, int] | tuple[str], list[DerivedEvent]] = {}
    for event in events:
        if isinstance(event, MemoryRecorded):
            continue
        if isinstance(event, MemoryForgotten) and event.caused_by in recorded_ids:
            after.setdefault(event.caused_by, []).append(event)
        else:
            groups.setdefault(_position_key(event), []).append(event)
    keys = list(groups)
    index = {key: i for i, key in enumerate(keys)}
    ordered: list[DerivedEvent] = []
    done = 0
    for memory in recorded:
        at = index.get(_position_key(memory))
        if at is not None and at >= done:
            for key in keys[done : at + 1]:
                ordered.extend(groups[key])
            done = at + 1
        ordered.append(memory)
        ordered.extend(after.pop(memory.event_id, ()))
    for key in keys[done:]:
        ordered.extend(groups[key])
    for orphans in after.values():
        ordered.extend(orphans)
    return ordered
