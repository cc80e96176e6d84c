"""The processor's state is a function of the log: folding what it wrote gives what it held.

A worker that takes a partition over rebuilds its state this way, so any difference between the
live state and the folded one would make the new owner decide differently (a summary twice, a
promotion lost). Checked on generated streams that exercise every lifecycle rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.batch import RawRecord, process_batch
from processors.batch_markers import (
    Logged,
    MarkerIndex,
    batch_markers,
    logged_batches,
    logged_ranges,
    marked_upto,
)
from processors.emission_order import causal_order
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from schemas.agent_events import Observation
from schemas.codec import encode_event
from schemas.memory_events import (
    AgentForgotten,
    DerivedEvent,
    DerivedRecord,
    DerivedUpTo,
    LogRange,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
    RetrievedItem,
    ScheduleTick,
    SourcePosition,
)
from tests.agent_streams import CTX, START, agent_key_of

OBS, SCHED, ACCESS = "agent.observations", "memory.schedule", "memory.access"
PARTITION = {"S1": 0, "W1": 0, "S2": 1}

# An action: (agent, what, value). Agents S* are simulation agents (steps and years), W* wall-clock.
action = st.one_of(
    st.tuples(st.sampled_from(["S1", "S2", "W1"]), st.just("event"), st.floats(0.0, 1.0)),
    st.tuples(st.sampled_from(["S1", "S2"]), st.just("advance"), st.integers(1, 3)),
    st.tuples(st.sampled_from(["S1", "W1"]), st.just("retrieve"), st.floats(-0.5, 1.5)),
    st.tuples(st.just("W1"), st.just("tick"), st.integers(1, 200)),
)


@dataclass
class Run:
    states: dict[str, AgentMemoryState] = field(default_factory=dict)
    derived: list[DerivedEvent] = field(default_factory=list)
    retrievals: list[tuple[SourcePosition, MemoryRetrieved]] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)
    step: dict[str, int] = field(default_factory=dict)
    now: datetime = START

    def feed(
        self, topic: str, value: bytes, kind: str, expected: str | None = None, partition: int = 0
    ) -> SourcePosition:
        offset = self.offsets.get(f"{topic}/{partition}", 0)
        self.offsets[f"{topic}/{partition}"] = offset + 1
        key = agent_key_of(value) if kind == "agent" else None
        raw = RawRecord(topic, partition, offset, key, value, expected, kind)  # type: ignore[arg-type]
        result = process_batch(
            [raw],
            lambda a: self.states.get(a) or AgentMemoryState(),
            ctx=CTX,
            failed_at=self.now,
            agents_of_partition=lambda p: [a for a in self.states if PARTITION[a] == p],
        )
        assert not result.dead_letters, result.dead_letters
        self.states.update(result.states)
        self.derived.extend(result.derived)
        return SourcePosition(topic=topic, partition=partition, offset=offset)

    def act(self, agent: str, what: str, value: float, n: int) -> None:
        self.now += timedelta(seconds=7)
        if what == "advance":
            self.step[agent] = self.step.get(agent, 0) + int(value)
        elif what == "event":
            simulated = agent.startswith("S")
            step = self.step.get(agent, 0)
            event = Observation(
                agent_id=agent,
                event_id=f"{agent}-{n}",
                content=f"flood warning {n} at the river, neighbours {n % 3} elevated",
                importance=round(value, 3),
                occurred_at=self.now,
                step=step if simulated else None,
                year=step // 4 if simulated else None,
            )
            self.feed(OBS, encode_event(event), "agent", "observation", PARTITION[agent])
        elif what == "tick":
            self.now += timedelta(seconds=int(value))
            tick = ScheduleTick(
                event_id=f"tick-{n}", occurred_at=self.now, partition=0, interval_seconds=60
            )
            self.feed(SCHED, encode_event(tick), "tick")
        else:
            state = self.states.get(agent)
            if state is None or not state.summaries:
                return
            target = state.summaries[n % len(state.summaries)]
            retrieval = MemoryRetrieved(
                agent_id=agent,
                event_id=f"r-{n}",
                occurred_at=self.now,
                step=self.step.get(agent) if agent.startswith("S") else None,
                mode="two_phase",
                parameters={},
                results=(
                    RetrievedItem(
                        memory_id=target.memory_id, rank=1, score=value, store="episodic", level=1
                    ),
                ),
                took_ms=1.0,
            )
            position = self.feed(
                ACCESS, encode_event(retrieval), "retrieval", partition=PARTITION[agent]
            )
            self.retrievals.append((position, retrieval))


def play(actions: list[tuple[str, str, float]]) -> Run:
    run = Run()
    for n, (agent, what, value) in enumerate(actions):
        run.act(agent, what, value, n)
    return run


def read_back(derived: list[DerivedEvent]) -> list[DerivedEvent]:
    """memory.items, then memory.lifecycle, as a reader gets them: each topic's partitions in
    an order of their own (here the opposite one), each partition in log order (the worker
    logs what it derived in emission order)."""

    def partition(e: DerivedEvent) -> int:
        return e.source_position.partition if e.source_position is not None else -1

    items = sorted((e for e in derived if isinstance(e, MemoryRecorded)), key=partition)
    lifecycle = sorted(
        (e for e in derived if not isinstance(e, MemoryRecorded)), key=lambda e: -partition(e)
    )
    return [*items, *lifecycle]


def projected(events: list[DerivedEvent]) -> dict[str, DerivedEvent]:
    """What a projection holds after applying ``events`` in order: the last word per id."""
    held: dict[str, DerivedEvent] = {}
    for event in events:
        if isinstance(event, MemoryForgotten):
            held.pop(event.memory_id, None)
        elif isinstance(event, AgentForgotten):
            held = {k: e for k, e in held.items() if e.agent_id != event.agent_id}
        elif isinstance(event, MemoryRecorded | MemoryPromoted | MemorySummarised):
            held[event.memory_id] = event
    return held


def fold(run: Run, events: list[DerivedEvent]) -> FoldedState:
    folded = FoldedState(schedule_topic=SCHED).apply_all(events)
    for position, retrieval in run.retrievals:
        folded.apply_retrieval(retrieval, position)
    return folded


@settings(max_examples=60, deadline=None)
@given(st.lists(action, min_size=40, max_size=160))
def test_folding_the_log_as_read_back_rebuilds_the_live_state(
    actions: list[tuple[str, str, float]],
) -> None:
    run = play(actions)
    as_read = read_back(run.derived)
    ordered = causal_order(as_read)
    assert sorted(e.event_id for e in ordered) == sorted(e.event_id for e in run.derived)
    assert projected(ordered) == projected(run.derived)
    for source in {(e.source_position.topic, e.source_position.partition) for e in as_read}:
        offsets = [
            e.source_position.offset
            for e in ordered
            if (e.source_position.topic, e.source_position.partition) == source
        ]
        assert offsets == sorted(offsets), "a projection would skip events behind its position"
    folded = fold(run, ordered)
    assert folded.states == {a: s for a, s in run.states.items()}
    # Records logged twice (a producer retry) are read back once.
    assert causal_order(as_read + as_read[::3]) == ordered


def test_the_generated_streams_exercise_every_lifecycle_rule() -> None:
    """Guards the property above against testing nothing: a plain long run hits every rule."""
    actions: list[tuple[str, str, float]] = []
    for i in range(60):
        actions.append(("S1", "event", 0.65 if i % 3 else 0.3))
        actions.append(("W1", "event", 0.4))
        if i % 2:
            actions.append(("S1", "advance", 1))
        if i % 5 == 4:
            actions.append(("W1", "tick", 90))
    run = play(actions)
    kinds = {type(e).__name__ for e in run.derived}
    assert {"MemoryPromoted", "MemorySummarised", "ConsolidationCompleted"} <= kinds
    levels = {e.level for e in run.derived if isinstance(e, MemorySummarised)}
    assert levels == {1, 2}
    reasons = {e.reason for e in run.derived if isinstance(e, MemoryForgotten)}
    assert reasons == {"capacity", "utility"}
    assert any(isinstance(e, MemorySummarised) and e.trigger == "tick" for e in run.derived), (
        "wall-clock sessions"
    )
    assert any(isinstance(e, MemoryPromoted) and e.decision.rule == "burn" for e in run.derived)
    ordered = causal_order(read_back(run.derived))
    assert fold(run, ordered).states == run.states


def test_ticks_are_marked_derived_only_through_what_they_derived() -> None:
    run = play([("W1", "event", 0.4)] * 3 + [("W1", "tick", 10)])
    folded = fold(run, run.derived)
    assert folded.derived_upto[(SCHED, 0)] == 0
    assert folded.derived_upto[(OBS, 0)] == 2


ITEMS, LIFECYCLE = "memory.items", "memory.lifecycle"


@dataclass
class Log:
    """A derived log written as a worker writes it: each event to its source's partition of
    ``memory.items`` or ``memory.lifecycle``, markers to ``memory.lifecycle``."""

    records: list[Logged] = field(default_factory=list)
    ends: dict[tuple[str, int], int] = field(default_factory=dict)

    def _append(self, topic: str, partition: int, record: DerivedRecord) -> SourcePosition:
        offset = self.ends.get((topic, partition), -1) + 1
        self.ends[(topic, partition)] = offset
        where = SourcePosition(topic=topic, partition=partition, offset=offset)
        self.records.append((where, record))
        return where

    def write(self, events: list[DerivedEvent]) -> list[SourcePosition]:
        return [
            self._append(
                ITEMS if isinstance(e, MemoryRecorded) else LIFECYCLE,
                e.source_position.partition if e.source_position else 0,
                e,
            )
            for e in events
        ]

    def mark(
        self, partition: int, *upto: tuple[str, int], landed: Sequence[DerivedEvent] = ()
    ) -> None:
        """The marker of a batch whose events ``landed`` were just written (the last ones)."""
        positions = [w for w, _ in self.records[len(self.records) - len(landed) :]]
        items, lifecycle = logged_ranges(list(landed), positions)
        self._append(
            LIFECYCLE,
            partition,
            DerivedUpTo(
                event_id=f"m{len(self.records)}",
                occurred_at=START,
                partition=partition,
                upto=tuple(SourcePosition(topic=t, partition=partition, offset=o) for t, o in upto),
                items=items.get(partition),
                lifecycle=lifecycle.get(partition),
            ),
        )


def test_events_no_marker_covers_are_left_out() -> None:
    """A batch cut short by a crash logged some events and no marker: they must neither be
    folded nor move ``derived_upto``, so the whole batch is derived again; done again, its
    events count, the first attempt's copies (which could differ) do not."""
    run = play([("S1", "event", 0.4)] * 3 + [("S1", "advance", 1), ("S1", "event", 0.4)])
    first_two, rest = run.derived[:2], run.derived[2:]
    assert all(isinstance(e, MemoryRecorded) for e in first_two)
    log = Log()
    log.mark(0)
    log.write(first_two)
    log.mark(0, (OBS, 1), landed=first_two)
    log.write(rest)
    folded, events = FoldedState.from_log(log.records, SCHED)
    assert events == first_two
    assert folded.derived_upto == {(OBS, 0): 1}
    assert folded.states == play([("S1", "event", 0.4)] * 2).states
    assert logged_batches(log.records, SCHED).partial == rest
    log.write(rest)
    log.mark(0, (OBS, 3), landed=rest)
    again, counted = FoldedState.from_log(log.records, SCHED)
    assert again.states == run.states
    assert again.derived_upto == {(OBS, 0): 3}
    assert sorted(e.event_id for e in counted) == sorted(e.event_id for e in run.derived)
    assert len(logged_batches(log.records, SCHED).partial) == len(rest)


def test_a_first_marker_covering_nothing_leaves_out_everything_after_it() -> None:
    """A worker's first batch of a partition crashed: the marker it wrote before (nothing
    logged yet) must make the partial batch count for nothing, whatever it logged."""
    run = play([("S1", "event", 0.4)] * 3 + [("S2", "event", 0.4)])
    log = Log()
    log.mark(0)
    log.write(run.derived)
    folded, events = FoldedState.from_log(log.records, SCHED)
    assert {e.agent_id for e in events} == {"S2"}, "partition 1 has no marker: older rule"
    assert set(folded.states) == {"S2"}
    assert folded.derived_upto == {(OBS, 1): 0}
    assert folded.marked == {0}


def test_a_log_without_markers_keeps_the_recording_rule() -> None:
    """A log written before markers: a record is derived once its recording is logged, and
    what a record triggered without its recording reaching the log is left out. The first
    marker a worker writes there covers that, and keeps it so."""
    run = play([("S1", "event", 0.4)] * 3 + [("S1", "advance", 1), ("S1", "event", 0.4)])
    *before, last_recording = [e for e in run.derived if isinstance(e, MemoryRecorded)]
    triggered = [e for e in run.derived if not isinstance(e, MemoryRecorded)]
    assert triggered, "the session end summarises"
    assert all(e.source_position == last_recording.source_position for e in triggered)
    log = Log()
    log.write([*before, *triggered])
    folded, events = FoldedState.from_log(log.records, SCHED)
    assert events == before
    assert folded.derived_upto == {(OBS, 0): 2}
    log.mark(0, (OBS, 2), landed=[*before, *triggered])
    opened, events = FoldedState.from_log(log.records, SCHED)
    assert events == before
    assert opened.states == folded.states
    whole, _ = FoldedState.from_log(_written(run.derived), SCHED)
    assert whole.states == run.states
    assert whole.derived_upto == {(OBS, 0): 3}


def _written(events: list[DerivedEvent]) -> list[Logged]:
    log = Log()
    log.write(events)
    return log.records


def test_a_batch_marker_covers_every_record_of_its_partition() -> None:
    """Ticks, retrievals, dead letters and skipped records derive nothing: the marker is
    what says they are done, so it names the highest offset of each topic, per partition."""
    records = [
        RawRecord(OBS, 0, 4, None, b"{broken", "observation"),
        RawRecord(OBS, 0, 7, None, b"{}", "observation"),
        RawRecord(SCHED, 0, 2, None, b"{}", None, "tick"),
        RawRecord(ACCESS, 1, 9, None, b"{}", None, "retrieval"),
    ]
    markers = batch_markers(records, {0: LogRange(first=3, last=12)}, {}, START)
    assert [(m.partition, m.items, m.lifecycle) for m in markers] == [
        (0, LogRange(first=3, last=12), None),
        (1, None, None),
    ]
    assert marked_upto(markers) == {(OBS, 0): 7, (SCHED, 0): 2, (ACCESS, 1): 9}


def test_a_batch_that_derived_nothing_is_done_by_its_marker_alone() -> None:
    """A tick with no agent to concern and a dead letter derive nothing: their batch's marker
    names no events, and must still mark them done, or a redelivery would derive the tick
    again against later state."""
    log = Log()
    log.mark(0)
    log.mark(0, (SCHED, 4), (OBS, 9))
    folded, events = FoldedState.from_log(log.records, SCHED)
    assert events == []
    assert folded.derived_upto == {(SCHED, 0): 4, (OBS, 0): 9}


def test_an_event_its_marker_covers_is_not_superseded_by_a_later_marker_read_with_it() -> None:
    """The episodic projector reads a marker and the next batch's marker in one fetch, and holds
    the first until its batch's last recording is applied: the events the first covers still
    wait, and must not be taken for leftovers of a cut-short attempt (they were, once, and the
    projector lost lifecycle events in a ten-year run)."""
    from datetime import UTC, datetime

    from schemas.memory_events import DerivedUpTo, LogRange, MemoryForgotten, SourcePosition

    at = datetime(2026, 1, 1, tzinfo=UTC)
    source = SourcePosition(topic="agent.observations", partition=0, offset=5)
    forgetting = MemoryForgotten(
        agent_id="H1",
        occurred_at=at,
        memory_id="m1",
        destination="working",
        reason="capacity",
        caused_by="e1",
        source_position=source,
        config_version="c",
    )

    def marker(offset: int, lifecycle: tuple[int, int], items: tuple[int, int]) -> DerivedUpTo:
        return DerivedUpTo(
            event_id=f"mark-{offset}",
            occurred_at=at,
            partition=0,
            upto=(SourcePosition(topic="agent.observations", partition=0, offset=offset),),
            items=LogRange(first=items[0], last=items[1]),
            lifecycle=LogRange(first=lifecycle[0], last=lifecycle[1]),
        )

    index = MarkerIndex()
    index.add(marker(5, (10, 10), (20, 21)), at=11)
    index.add(marker(9, (12, 12), (22, 23)), at=13)
    where = SourcePosition(topic="memory.lifecycle", partition=0, offset=10)
    assert index.covers(where, forgetting)
    assert not index.superseded(where, forgetting)
    # An event no marker covers, with markers after it, is a leftover.
    stray = SourcePosition(topic="memory.lifecycle", partition=0, offset=9)
    assert index.superseded(stray, forgetting)
