"""Replay equals live, and a worker that takes over continues as if nothing had happened.

``test_state_fold.py`` checks that folding the log gives the live state, on streams processed
one record per batch. These properties add what the worker does around it
(:class:`tests.agent_streams.Worker` models :meth:`streams.worker.pipeline.IngestPipeline.handle`):
batches of any size with the state carried between them, the log written batch by batch with
a marker after each and read back with its partitions interleaved, and a crash (between
batches, or with any part of a batch logged) after which a new worker folds the log and gets
the uncommitted batches again.

The tests at the end are the smallest crashes these properties once found, from before the
markers: kept as examples of what a partial batch must not do.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.batch import RawRecord
from processors.batch_markers import logged_batches
from processors.state_fold import FoldedState
from schemas.codec import decode_retrieval
from schemas.learned_events import (
    FactAccessed,
    FactStated,
    MemoryRated,
    PlanChanged,
    ProcedureChanged,
)
from schemas.memory_events import (
    ConsolidationCompleted,
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemorySummarised,
    SourcePosition,
)
from tests.agent_streams import (
    TOPICS,
    Action,
    Worker,
    action,
    build_stream,
    learned_projected,
    partition_of,
    projected,
    run,
    split,
)

actions = st.lists(action, min_size=30, max_size=120)
cuts = st.lists(st.integers(1, 150), max_size=30)

InFlight = Callable[[list[DerivedEvent]], list[DerivedEvent]]
"""What the batch in flight derived (emission order) -> what of it the broker took."""


def folded_from(worker: Worker, records: list[RawRecord], seed: int) -> FoldedState:
    """The state a worker would fold from this log and every retrieval of the stream."""
    folded = FoldedState(TOPICS.schedule).apply_all(worker.replayed(seed))
    for raw in records:
        if raw.kind == "retrieval" and raw.value is not None:
            position = SourcePosition(topic=raw.topic, partition=raw.partition, offset=raw.offset)
            folded.apply_retrieval(decode_retrieval(raw.value), position)
    return folded


@settings(max_examples=100, deadline=None)
@given(actions=actions, cuts=cuts, seed=st.integers(0, 2**16))
def test_batches_of_any_size_derive_what_one_record_at_a_time_does(
    actions: list[Action], cuts: list[int], seed: int
) -> None:
    """Batching is the worker's business: the derived log, and so every projection, must not
    depend on where the consumer happened to cut the stream. The log read back (partitions
    interleaved) then rebuilds what the worker applied live, and folds to the state it held."""
    records, one_by_one = build_stream(actions)
    batched = run(split(records, cuts))

    assert batched.emitted == one_by_one.emitted
    assert run([records]).emitted == one_by_one.emitted
    assert batched.folded.states == one_by_one.folded.states
    assert projected(batched.replayed(seed)) == projected(batched.emitted)
    assert learned_projected(batched.replayed(seed)) == learned_projected(batched.emitted)
    assert folded_from(batched, records, seed).states == batched.folded.states


def take_over_after(
    batches: list[list[RawRecord]], crashed: int, in_flight: InFlight | None, seed: int
) -> Worker:
    """A worker that logged ``batches[:crashed]`` (and what ``in_flight`` lets through of the
    next one, without its marker) crashed; the new one folds the log and the retrievals of the
    logged batches.

    A takeover reads ``memory.access`` to its end, but folds only the retrievals the markers
    name (:meth:`processors.state_fold.FoldedState.apply_retrieval`): those of later batches
    count where the redelivered batches hold them
    (the takeover property of ``tests/unit/processors/test_batch_order.py`` hands it them all).
    """
    first = run(batches[:crashed])
    if in_flight is not None:
        first.write(in_flight(first.derive(batches[crashed]).result.derived))
    retrievals = [r for batch in batches[:crashed] for r in batch if r.kind == "retrieval"]
    return Worker.take_over(first.log, retrievals, seed)


def continue_and_check(
    records: list[RawRecord],
    batches: list[list[RawRecord]],
    second: Worker,
    committed: int,
    seed: int = 0,
) -> None:
    """Redeliver ``batches[committed:]`` to ``second``; the log it leaves behind must count
    (markers) what an uninterrupted worker wrote, each event once, so projections and state
    are those of the uninterrupted run."""
    for batch in batches[committed:]:
        second.handle(batch)
    uninterrupted = run(batches)
    counted = logged_batches(second.read_back(seed), TOPICS.schedule).events
    # An id may be derived again at a later position (an event id used again once its memory
    # was forgotten); a record logged twice has the same position too.
    logged = {(e.event_id, e.source_position): e for e in counted}
    assert len(logged) == len(counted), "an event counts twice"
    assert logged == {(e.event_id, e.source_position): e for e in uninterrupted.emitted}
    assert projected(second.replayed(seed)) == projected(uninterrupted.emitted)
    assert learned_projected(second.replayed(seed)) == learned_projected(uninterrupted.emitted)
    assert second.folded.states == uninterrupted.folded.states
    assert folded_from(second, records, seed).states == uninterrupted.folded.states


@settings(max_examples=100, deadline=None)
@given(actions=actions, cuts=cuts, seed=st.integers(0, 2**16), data=st.data())
def test_a_worker_that_takes_over_after_a_crash_between_batches_continues_exactly(
    actions: list[Action], cuts: list[int], seed: int, data: st.DataObject
) -> None:
    """The worker logged some batches and committed fewer (Faust commits on an interval)."""
    records, _ = build_stream(actions)
    batches = split(records, cuts)
    crashed = data.draw(st.integers(0, len(batches)), label="batches logged")
    second = take_over_after(batches, crashed, None, seed)
    committed = data.draw(st.integers(0, crashed), label="batches committed")
    continue_and_check(records, batches, second, committed, seed)


@settings(max_examples=100, deadline=None)
@given(actions=actions, cuts=cuts, seed=st.integers(0, 2**16), data=st.data())
def test_a_worker_that_crashed_while_logging_a_batch_continues_exactly(
    actions: list[Action], cuts: list[int], seed: int, data: st.DataObject
) -> None:
    """The worker crashed while the broker was taking a batch: each partition of the derived
    topics got some prefix of what was sent to it, and no marker. Those events must count for
    nothing; the new worker derives the whole batch again, identically."""
    records, _ = build_stream(actions)
    batches = split(records, cuts)
    crashed = data.draw(st.integers(0, len(batches) - 1), label="batch in flight")

    def some_of_each_partition(derived: list[DerivedEvent]) -> list[DerivedEvent]:
        sent: dict[tuple[bool, int], list[DerivedEvent]] = {}
        for event in derived:
            sent.setdefault((isinstance(event, MemoryRecorded), partition_of(event)), []).append(
                event
            )
        taken: list[DerivedEvent] = []
        for key, events in sorted(sent.items()):
            n = data.draw(st.integers(0, len(events)), label=f"logged of {key}")
            taken.extend(events[:n])
        return taken

    second = take_over_after(batches, crashed, some_of_each_partition, seed)
    committed = data.draw(st.integers(0, crashed), label="batches committed")
    continue_and_check(records, batches, second, committed, seed)


def test_the_generated_streams_exercise_every_rule() -> None:
    """Guards the properties above against testing nothing: a stream built from the same
    actions hits every rule, trigger and reason."""
    day: list[Action] = [
        ("S1", "observe", 2),  # 0.62, working: a burn draw at year end
        ("S1", "observe", 5),  # 0.75, working: promoted on the threshold
        ("S1", "observe", 7),  # 0.95, episodic
        ("Y1", "observe", 3),
        ("Y1", "observe", 4),
        ("Y1", "observe", 33),  # flood.minor three times a year: a fact at year end
        ("Y1", "observe", 33),
        ("Y1", "observe", 33),
        ("W1", "observe", 1),
        ("W1", "decide", 2),
        ("W2", "observe", 6),
        ("S1", "advance", 1),
        ("Y1", "advance", 1),
        ("0", "tick", 90),
        ("1", "tick", 90),
        ("S1", "retrieve", 3),
        ("W1", "retrieve", 0),
        ("W1", "garbage", 0),
        ("S1", "decide", 5),  # a plan
        ("S1", "feedback", 0),  # downvotes of recent decisions: two in a row evict a plan
        ("S1", "feedback", 0),
        ("S1", "feedback", 0),
        ("S1", "feedback", 8),  # an upvote
        ("Y1", "feedback", 1),  # on an observation
        ("W1", "feedback", 7),  # on a summary
        ("Y1", "fact", 0),
        ("Y1", "search_facts", 1),  # two of its current facts
        ("Y1", "search_facts", 3),  # one, twice, and one superseded
        ("W2", "reuse", 1),  # its latest id, still held: refused
        ("W2", "reuse", 0),  # its first id, forgotten after the first day: recorded again
    ]
    records, worker = build_stream(day * 12)
    assert set(worker.refused) == {"duplicate_event_id", "not_json"}
    recorded = [(e.memory_id, e.seq) for e in worker.emitted if isinstance(e, MemoryRecorded)]
    assert len({memory for memory, _ in recorded}) < len(recorded), "an id recorded again"
    derived = worker.emitted
    assert {type(e) for e in derived} == {
        MemoryRecorded,
        MemoryPromoted,
        MemorySummarised,
        MemoryForgotten,
        ConsolidationCompleted,
        ProcedureChanged,
        PlanChanged,
        FactStated,
        MemoryRated,
        FactAccessed,
    }
    assert {e.change for e in derived if isinstance(e, ProcedureChanged)} == {
        "created",
        "invoked",
        "outcome",
    }
    assert {e.change for e in derived if isinstance(e, PlanChanged)} == {
        "cached",
        "scored",
        "evicted",
    }
    assert {e.origin for e in derived if isinstance(e, FactStated) and e.supersedes} == {
        "stated",
        "derived",
    }
    assert {e.level for e in derived if isinstance(e, MemoryRated)} >= {0, 1}
    assert {(e.level, e.trigger) for e in derived if isinstance(e, MemorySummarised)} == {
        (1, "step"),
        (1, "year"),
        (1, "tick"),
        (2, "chapter"),
    }
    assert {(e.reason, e.destination) for e in derived if isinstance(e, MemoryForgotten)} == {
        ("capacity", "working"),
        ("capacity", "episodic"),
        ("utility", "episodic"),
    }
    assert {e.decision.rule for e in derived if isinstance(e, MemoryPromoted)} == {
        "threshold",
        "burn",
    }
    assert {r.kind for r in records} == {"agent", "tick", "retrieval"}
    summaries = [s for state in worker.folded.states.values() for s in state.summaries]
    assert any(s.retrievals for s in summaries), "retrievals reach the state"
    counted = [e for e in derived if isinstance(e, FactAccessed)]
    assert max(e.access_count for e in counted) > 1, "a fact searched again counts on"
    assert any(
        isinstance(e, FactStated) and e.supersedes in {c.fact_id for c in counted} for e in derived
    ), "a counted fact is superseded"
    assert worker.folded.states["Y1"].learned.access_counts, "searches reach the state"


# --- The smallest crashes found before the markers: a partial batch must count for nothing. ---


def test_a_redelivered_tick_that_derived_nothing_derives_nothing_again() -> None:
    """A tick, then two memories of a wall-clock agent, logged but not committed: the marker
    says the tick is done, so the redelivered tick does not summarise the two memories it
    preceded (an L1 the uninterrupted worker never made)."""
    records, _ = build_stream([("0", "tick", 1), ("W1", "observe", 1), ("W1", "observe", 1)])
    batches = [records]
    continue_and_check(records, batches, take_over_after(batches, 1, None, 0), committed=0)


def test_a_promotion_logged_without_its_consolidation_record_is_left_out() -> None:
    """Four episodic memories, a working one of 0.75, then a record of the next year: the
    year end promotes the copy (5 of 5). The crash logs the promotion, not the consolidation
    record; folded, the promotion would make the new worker promote again and forget the copy
    for capacity."""
    fill: list[Action] = [("S1", "observe", 7)] * 4
    records, _ = build_stream(
        [*fill, ("S1", "observe", 5), ("S1", "advance", 4), ("S1", "observe", 1)]
    )
    batches = split(records, range(len(records)))
    second = take_over_after(
        batches,
        len(batches) - 1,
        lambda derived: [e for e in derived if isinstance(e, MemoryPromoted)][:1],
        0,
    )
    assert second.folded.states == run(batches[:-1]).folded.states
    continue_and_check(records, batches, second, committed=len(batches) - 1)


def test_a_batch_whose_lifecycle_events_were_logged_is_derived_again_identically() -> None:
    """One batch: two working memories at step 0, a third at step 1, whose session end
    summarises the first two. The crash logs the summary, not the recordings: folded, the
    summary would make the new worker give the memories other seqs and summarise them again
    under the same id."""
    records, _ = build_stream(
        [("S1", "observe", 1), ("S1", "observe", 1), ("S1", "advance", 1), ("S1", "observe", 1)]
    )
    batches = [records]
    second = take_over_after(
        batches, 0, lambda derived: [e for e in derived if not isinstance(e, MemoryRecorded)], 0
    )
    assert second.folded.states == {}
    continue_and_check(records, batches, second, committed=0)


def test_a_recording_logged_without_its_capacity_forgetting_changes_nothing() -> None:
    """Five working memories of 0.75 in year 0 (capacity 4), then a record of year 1. The
    crash logs the fifth recording but not the forgetting of the first: folded, the recording
    would make the new worker promote the first memory at year end, which the uninterrupted
    worker had forgotten."""
    records, _ = build_stream(
        [("S1", "observe", 5)] * 5 + [("S1", "advance", 4), ("S1", "observe", 1)]
    )
    batches = split(records, range(len(records)))

    def recording_only(derived: list[DerivedEvent]) -> list[DerivedEvent]:
        return [e for e in derived if not isinstance(e, MemoryForgotten)]

    second = take_over_after(batches, len(batches) - 2, recording_only, 0)
    continue_and_check(records, batches, second, committed=len(batches) - 2)
