"""Per-agent processing state, folded from the derived log itself.

The processor's state (next sequence number, clock, working and episodic membership, summaries
and their use) is a function of the derived events it has emitted and of the retrievals on
``memory.access``, so a worker that takes over a partition rebuilds it by reading the derived
topics: no separate changelog to drift from the log. The same fold tells which source records
were already derived (``derived_upto``), so a record redelivered after a crash is not derived
twice (effectively-once projections).

Only the events of wholly logged batches are folded; which those are is said by the batch
markers (:mod:`processors.batch_markers`), and their emission order by
:func:`processors.emission_order.causal_order`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import assert_never

from processors.batch_markers import Logged, logged_batches, recording_rule_applies
from processors.emission_order import causal_order
from processors.fact_access import is_facts_read
from processors.learning import fold_learning
from processors.lifecycle import on_retrieval
from processors.recording import (
    AgentMemoryState,
    EpisodicEntry,
    SummaryEntry,
    WorkingEntry,
    with_clock,
)
from schemas.learned_events import (
    FactAccessed,
    FactStated,
    MemoryRated,
    PlanChanged,
    ProcedureChanged,
)
from schemas.memory_events import (
    AgentForgotten,
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
    """Ticks have no recording; without markers, what they derived marks them as done."""
    states: dict[str, AgentMemoryState] = field(default_factory=dict)
    derived_upto: dict[tuple[str, int], int] = field(default_factory=dict)
    """The highest source offset per (topic, partition) whose derived events are in the log."""
    logged_upto: dict[tuple[str, int], int] = field(default_factory=dict)
    """The marks of the log read back (:attr:`processors.batch_markers.LoggedBatches.upto`,
    part of ``derived_upto``): the events folded then move no marks of their own."""
    marked: set[int] = field(default_factory=set)
    """Partition numbers with markers in the log."""
    log_ends: dict[tuple[str, int], int] = field(default_factory=dict)
    """Per derived topic and partition, the highest offset read back."""
    partition_of: dict[str, int] = field(default_factory=dict)
    """Per agent, the partition number a snapshot holds it in: its events may all lie before
    the log read back (:mod:`processors.state_snapshot`)."""

    def __post_init__(self) -> None:
        for key, offset in self.logged_upto.items():
            if self.derived_upto.get(key, -1) < offset:
                self.derived_upto[key] = offset

    @classmethod
    def from_log(
        cls, records: Iterable[Logged], schedule_topic: str | None = None
    ) -> tuple[FoldedState, list[DerivedEvent]]:
        """The state folded from the derived log read back (markers included, any order of
        topics), and the events it came from, in causal order."""
        logged = logged_batches(records, schedule_topic)
        events = causal_order(logged.events)
        folded = cls(
            schedule_topic=schedule_topic,
            logged_upto=dict(logged.upto),
            marked=logged.marked,
            log_ends=logged.ends,
        )
        return folded.apply_all(events), events

    def _mark(self, position: SourcePosition) -> None:
        key = (position.topic, position.partition)
        if self.derived_upto.get(key, -1) < position.offset:
            self.derived_upto[key] = position.offset

    def apply(self, event: DerivedEvent) -> None:
        position = event.source_position
        # Without a marker naming its source, an agent event is done once its recording is in
        # the log, which is the last of what it derives but for the forgettings that recording
        # caused: a record whose lifecycle events were logged but whose recording was lost (the
        # topics are written independently) must be derived again.
        if (
            position is not None
            and position.partition not in self.marked
            and (position.topic, position.partition) not in self.logged_upto
            and recording_rule_applies(event, self.schedule_topic)
        ):
            self._mark(position)
        state = self.states.get(event.agent_id) or AgentMemoryState()
        self.states[event.agent_id] = fold(state, event)

    def apply_retrieval(self, event: MemoryRetrieved, position: SourcePosition | None) -> None:
        """Count a retrieval read back from ``memory.access``; its offset is then consumed.

        In a partition number markers rule, only a retrieval a marker names counts here: one
        past them was not derived yet, and is counted where the batches that follow hold it,
        as a reprocess that cuts the raw log at the markers counts it. A facts read counts
        nothing here: what it counted is in the derived log (``FactAccessed``), folded already."""
        if position is not None:
            key = (position.topic, position.partition)
            if position.partition in self.marked and position.offset > self.logged_upto.get(
                key, -1
            ):
                return
            self._mark(position)
        state = self.states.get(event.agent_id)
        if state is not None and not is_facts_read(event):
            self.states[event.agent_id] = on_retrieval(event, state)

    def apply_all(self, events: Iterable[DerivedEvent]) -> FoldedState:
        for event in events:
            self.apply(event)
        return self


def fold(state: AgentMemoryState, event: DerivedEvent) -> AgentMemoryState:
    """The state after one derived event: equal to what the processor held after emitting it.

    Idempotent per event (a redelivered or re-derived event changes nothing), which a property
    test checks against the live path. An event type it does not know fails loudly (mypy
    proves the match complete): a state that silently ignored one would drift from the log.
    """
    match event:
        case MemoryRecorded():
            return _recorded(state, event)
        case MemoryPromoted():
            return _promoted(state, event)
        case ConsolidationCompleted():
            return _consolidated(state, event)
        case MemorySummarised():
            return _summarised(state, event)
        case MemoryForgotten():
            return _forgotten(state, event)
        case AgentForgotten():
            # Every memory of the agent left the projections: what it publishes next starts
            # afresh, its seq going on from where the erasure says (a version-1 erasure says
            # nothing: from where the fold got to, never back to 0, so a later erasure's
            # next_seq is past every seq the agent used).
            below = state.next_seq if event.next_seq is None else event.next_seq
            return AgentMemoryState(next_seq=below)
        case ProcedureChanged() | PlanChanged() | FactStated() | MemoryRated() | FactAccessed():
            return fold_learning(state, event)
        case _:
            assert_never(event)


def _recorded(state: AgentMemoryState, event: MemoryRecorded) -> AgentMemoryState:
    working, episodic = state.working, state.episodic
    if event.destination == "working":
        if all(w.memory_id != event.memory_id for w in working):
            working = (*working, WorkingEntry.of(event))
    elif all(e.memory_id != event.memory_id for e in episodic):
        episodic = (*episodic, EpisodicEntry(event.importance, event.seq, event.memory_id))
    # The latest reading by seq carries the agent's arousal and its strategy's state; an
    # older recording folded again never takes it back.
    surprise, surprise_seq = state.surprise, state.surprise_seq
    if event.surprise is not None and event.seq >= surprise_seq:
        surprise, surprise_seq = event.surprise, event.seq
    return with_clock(
        replace(
            state,
            next_seq=max(state.next_seq, event.seq + 1),
            agent_type=event.agent_type,
            working=working,
            episodic=episodic,
            surprise=surprise,
            surprise_seq=surprise_seq,
        ),
        event.year,
        event.step,
    )


def _promoted(state: AgentMemoryState, event: MemoryPromoted) -> AgentMemoryState:
    if any(e.memory_id == event.memory_id for e in state.episodic):
        return state
    copy = EpisodicEntry(event.importance, event.seq, event.memory_id)
    return replace(state, episodic=(*state.episodic, copy))


def _consolidated(state: AgentMemoryState, event: ConsolidationCompleted) -> AgentMemoryState:
    considered = {o.memory_id for o in event.considered}
    return replace(
        state,
        working=tuple(
            replace(w, considered=True) if w.memory_id in considered else w for w in state.working
        ),
    )


def _summarised(state: AgentMemoryState, event: MemorySummarised) -> AgentMemoryState:
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


def _forgotten(state: AgentMemoryState, event: MemoryForgotten) -> AgentMemoryState:
    gone = event.memory_id
    if event.destination == "working":
        return replace(state, working=tuple(w for w in state.working if w.memory_id != gone))
    if event.level == 0:
        return replace(state, episodic=tuple(e for e in state.episodic if e.memory_id != gone))
    return replace(
        state,
        summaries=tuple(s for s in state.summaries if s.memory_id != gone),
        pending_l1=tuple(p for p in state.pending_l1 if p.memory_id != gone),
    )
