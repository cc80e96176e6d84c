"""The processor's state is a function of the log: folding what it wrote gives what it held.

A worker that takes a partition over rebuilds its state this way, so any difference between the
live state and the folded one would make the new owner decide differently (a summary twice, a
promotion lost). Checked on generated streams that exercise every lifecycle rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.batch import RawRecord, process_batch
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState, causal_order
from schemas.agent_events import Observation
from schemas.codec import encode_event
from schemas.memory_events import (
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
    RetrievedItem,
    ScheduleTick,
    SourcePosition,
)
from streams.ingest import split_triggered
from tests.agent_streams import CTX, START

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
        raw = RawRecord(topic, partition, offset, None, value, expected, kind)  # type: ignore[arg-type]
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


def read_back(derived: list[DerivedEvent], records_per_batch: int = 1) -> list[DerivedEvent]:
    """memory.items, then memory.lifecycle, as a reader gets them: each topic's partitions in
    an order of their own (here the opposite one), each partition in log order. The worker
    sends a batch's triggered events ahead of its recordings (``split_triggered``), so with
    several records a batch, the lifecycle log is not in emission order."""

    def partition(e: DerivedEvent) -> int:
        return e.source_position.partition if e.source_position is not None else -1

    records: list[list[DerivedEvent]] = []
    for event in derived:
        if records and records[-1][0].source_position == event.source_position:
            records[-1].append(event)
        else:
            records.append([event])
    logged: list[DerivedEvent] = []
    for start in range(0, len(records), records_per_batch):
        triggered, following = split_triggered(
            [e for r in records[start : start + records_per_batch] for e in r]
        )
        logged.extend([*triggered, *following])
    items = sorted((e for e in logged if isinstance(e, MemoryRecorded)), key=partition)
    lifecycle = sorted(
        (e for e in logged if not isinstance(e, MemoryRecorded)), key=lambda e: -partition(e)
    )
    return [*items, *lifecycle]


def projected(events: list[DerivedEvent]) -> dict[str, DerivedEvent]:
    """What a projection holds after applying ``events`` in order: the last word per id."""
    held: dict[str, DerivedEvent] = {}
    for event in events:
        if isinstance(event, MemoryForgotten):
            held.pop(event.memory_id, None)
        elif isinstance(event, MemoryRecorded | MemoryPromoted | MemorySummarised):
            held[event.memory_id] = event
    return held


def fold(run: Run, events: list[DerivedEvent]) -> FoldedState:
    folded = FoldedState(schedule_topic=SCHED).apply_all(events)
    for position, retrieval in run.retrievals:
        folded.apply_retrieval(retrieval, position)
    return folded


@settings(max_examples=60, deadline=None)
@given(st.lists(action, min_size=40, max_size=160), st.integers(1, 8))
def test_folding_the_log_as_read_back_rebuilds_the_live_state(
    actions: list[tuple[str, str, float]], records_per_batch: int
) -> None:
    run = play(actions)
    as_read = read_back(run.derived, records_per_batch)
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
