"""Per-agent processing state, folded from the derived log itself.

The processor's state (next sequence number, clock, working and episodic membership, summaries
and their use) is a function of the derived events it has emitted and of the retrievals on
``memory.access``, so a worker that takes over a
partition rebuilds it by reading the derived topics: no separate changelog to drift from the
log. The same fold tells which source records were already derived (``derived_upto``), so a
record redelivered after a crash is not derived twice (DESIGN.md, invariant 3).

Which batches are in the log is said by the workers' markers (:class:`DerivedUpTo`, written
after everything a batch derived was delivered, naming where it landed): a derived event no
marker covers was logged by an attempt at a batch that a crash cut short, and is left out
(:func:`logged_batches`), so the batch is derived again from the state before it, whole.

Markers rule a partition number once any marker of it is in the log: a worker writes one
before its first batch there (covering what the log held before, or nothing), so even a crash
in its first batch leaves nothing that counts. In a partition number without any marker (a log
written before markers existed) the older rule decides instead: a record is derived once its
recording is in the log (a tick, or a command on the schedule topic, once anything it derived
is), and what lies beyond that is left out the same way.
"""

from __future__ import annotations

from bisect import bisect_right, insort
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
    AgentForgotten,
    ConsolidationCompleted,
    DerivedEvent,
    DerivedRecord,
    DerivedUpTo,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
    SourcePosition,
)

SourceKey = tuple[str, int]
"""A source (topic, partition)."""

Logged = tuple[SourcePosition, DerivedRecord]
"""A record of the derived log and where it was read (its topic, partition and offset)."""


def marked_upto(markers: Iterable[DerivedUpTo]) -> dict[SourceKey, int]:
    """The highest source offset per source partition that markers say is wholly logged."""
    upto: dict[SourceKey, int] = {}
    for marker in markers:
        for position in marker.upto:
            key = (position.topic, position.partition)
            if upto.get(key, -1) < position.offset:
                upto[key] = position.offset
    return upto


@dataclass
class MarkerIndex:
    """The markers read so far, to tell for an event of the log whether its batch is whole."""

    ranges: dict[tuple[bool, int], list[tuple[int, int, DerivedUpTo]]] = field(default_factory=dict)
    """(recording?, partition) -> the batches' (first, last, marker), by first offset."""
    marked: set[int] = field(default_factory=set)
    """Partition numbers with markers: markers alone rule them."""
    last_marker: dict[int, int] = field(default_factory=dict)
    """Per partition number, the highest ``memory.lifecycle`` offset of a marker (if known)."""

    def add(self, marker: DerivedUpTo, at: int | None = None) -> None:
        """Take note of ``marker``, read at offset ``at`` of its lifecycle partition."""
        self.marked.add(marker.partition)
        if at is not None:
            self.last_marker[marker.partition] = max(self.last_marker.get(marker.partition, -1), at)
        for recording, logged in ((True, marker.items), (False, marker.lifecycle)):
            if logged is not None:
                runs = self.ranges.setdefault((recording, marker.partition), [])
                insort(runs, (logged.first, logged.last, marker), key=lambda r: r[0])

    def covers(self, where: SourcePosition, event: DerivedEvent) -> bool:
        """Whether a marker covers ``event``, read at ``where``."""
        runs = self.ranges.get((isinstance(event, MemoryRecorded), where.partition), [])
        at = bisect_right(runs, where.offset, key=lambda r: r[0]) - 1
        return at >= 0 and runs[at][2].covers(where, event)

    def superseded(self, where: SourcePosition, event: DerivedEvent) -> bool:
        """Whether a batch logged after ``event`` landed in the same partition, or (a lifecycle
        event) a marker follows it: an event no marker covers is then a leftover of an attempt
        cut short, never to be covered. A covered event is never one, even if its marker was
        read with later ones (the episodic projector holds a marker until its batch's last
        recording is applied, and checks what waits at every fetch)."""
        if self.covers(where, event):
            return False
        recording = isinstance(event, MemoryRecorded)
        runs = self.ranges.get((recording, where.partition), [])
        if runs and runs[-1][0] > where.offset:
            return True
        return not recording and self.last_marker.get(where.partition, -1) > where.offset


@dataclass
class LoggedBatches:
    """The derived log read back, without what crashes cut short."""

    events: list[DerivedEvent]
    """Derived events of wholly logged batches, in the order read."""
    upto: dict[SourceKey, int]
    """Per source partition, the highest offset of wholly logged batches."""
    marked: set[int]
    """Partition numbers with markers, which rule them."""
    partial: list[DerivedEvent]
    """Events left out: logged by an attempt at a batch that never logged its marker."""
    ends: dict[SourceKey, int]
    """Per derived topic and partition, the highest offset read."""


def recorded_upto(
    events: Iterable[DerivedEvent], schedule_topic: str | None
) -> dict[SourceKey, int]:
    """The marks the older rule gives a log without markers: the highest source offset with a
    recording in the log, or (the schedule topic, which records nothing) with any event."""
    upto: dict[SourceKey, int] = {}
    for event in events:
        position = event.source_position
        if position is not None and (
            isinstance(event, MemoryRecorded) or position.topic == schedule_topic
        ):
            key = (position.topic, position.partition)
            if upto.get(key, -1) < position.offset:
                upto[key] = position.offset
    return upto


def logged_batches(records: Iterable[Logged], schedule_topic: str | None = None) -> LoggedBatches:
    """Split the records of ``memory.items`` and ``memory.lifecycle`` (any order of topics and
    partitions) into the derived events of wholly logged batches and their marks.

    In a partition number with markers an event counts if a marker names where it is; in one
    without (a log from before markers), the older rule: if its source offset is at most the
    highest one with a recording in the log.
    """
    index = MarkerIndex()
    markers: list[DerivedUpTo] = []
    events: list[tuple[SourcePosition, DerivedEvent]] = []
    ends: dict[SourceKey, int] = {}
    for where, record in records:
        key = (where.topic, where.partition)
        ends[key] = max(ends.get(key, -1), where.offset)
        if isinstance(record, DerivedUpTo):
            index.add(record, where.offset)
            markers.append(record)
        else:
            events.append((where, record))
    upto = marked_upto(markers)
    legacy = recorded_upto(
        (e for where, e in events if where.partition not in index.marked), schedule_topic
    )
    upto.update(legacy)
    kept: list[DerivedEvent] = []
    partial: list[DerivedEvent] = []
    for where, event in events:
        if where.partition in index.marked:
            whole = index.covers(where, event)
        else:
            source = event.source_position
            whole = source is None or source.offset <= legacy.get(
                (source.topic, source.partition), -1
            )
        (kept if whole else partial).append(event)
    return LoggedBatches(kept, upto, set(index.marked), partial, ends)


@dataclass
class FoldedState:
    schedule_topic: str | None = None
    """Ticks have no recording; without markers, what they derived marks them as done."""
    states: dict[str, AgentMemoryState] = field(default_factory=dict)
    derived_upto: dict[tuple[str, int], int] = field(default_factory=dict)
    """The highest source offset per (topic, partition) whose derived events are in the log."""
    logged_upto: dict[tuple[str, int], int] = field(default_factory=dict)
    """The marks of the log read back (:attr:`LoggedBatches.upto`, part of ``derived_upto``):
    the events folded then move no marks of their own."""
    marked: set[int] = field(default_factory=set)
    """Partition numbers with markers in the log."""
    log_ends: dict[tuple[str, int], int] = field(default_factory=dict)
    """Per derived topic and partition, the highest offset read back."""

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
            and (isinstance(event, MemoryRecorded) or position.topic == self.schedule_topic)
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
    if event.event_type == "memory.agent_forgotten":
        # Every memory of the agent left the projections: what it publishes next starts afresh.
        return AgentMemoryState()
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
    return [e for part in by_partition.values() for e in _erasures_first(_partition_order(part))]


def _erasures_first(ordered: list[DerivedEvent]) -> list[DerivedEvent]:
    """An erasure of a sealed agent goes before every other event of that agent read with it.

    Its group has no recording to anchor it, so :func:`_partition_order` may place it after
    recordings emitted later (a new life of the agent), which it would then erase. Every event
    of the agent's earlier life was sealed with a key the erasure names, and readers of the
    log leave those out (:meth:`streams.privacy.sealing.RecordSealer.learn_forgotten`): what is
    left of
    the agent came after it. An erasure without keys (the agent was never sealed) keeps its
    place: its earlier life is still in the log, and must be erased after it.
    """
    first: dict[str, int] = {}
    moved: list[tuple[int, DerivedEvent]] = []
    for i, event in enumerate(ordered):
        if isinstance(event, AgentForgotten) and event.key_ids:
            moved.append((first.get(event.agent_id, i), event))
        else:
            first.setdefault(event.agent_id, i)
    if not moved:
        return ordered
    out: list[DerivedEvent] = []
    at = {id(e): i for i, e in moved}
    erasures_at: dict[int, list[DerivedEvent]] = {}
    for i, event in moved:
        erasures_at.setdefault(i, []).append(event)
    for i, event in enumerate(ordered):
        out.extend(erasures_at.pop(i, []))
        if id(event) not in at:
            out.append(event)
    return out


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
