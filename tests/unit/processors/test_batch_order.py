"""The canonical order of a batch, and cutting a raw log into the batches its markers name.

The properties at the end are the reprocess's promise on the worker model of
:mod:`tests.agent_streams`: a live worker fetches each source (topic, partition) in chunks of
its own, so its batches hold the topics in any proportions and any arrival order; cutting the
raw records where its derived log's markers say and deriving them afresh gives its derived log
again, event by event, also when a worker took over after a crash.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.batch import RawRecord
from processors.batch_markers import logged_batches
from processors.batch_order import (
    batches_at_markers,
    canonical_order,
    cut_at_forgets,
    topic_rank,
)
from processors.state_fold import FoldedState
from schemas.memory_events import DerivedEvent, DerivedUpTo, MemoryRetrieved, SourcePosition
from schemas.topics import Topics
from tests.agent_streams import RANK, TOPICS, Action, Worker, action, build_stream

RANKS = {"obs": 0, "dec": 1, "tick": 2, "access": 3}


def raw(topic: str, offset: int, timestamp: int | None, partition: int = 0) -> RawRecord:
    return RawRecord(
        topic=topic,
        partition=partition,
        offset=offset,
        key=None,
        value=b"{}",
        timestamp_ms=timestamp,
    )


def positions(records: Sequence[RawRecord]) -> list[tuple[str, int]]:
    return [(r.topic, r.offset) for r in records]


def test_the_rank_is_the_agent_topics_then_ticks_then_retrievals() -> None:
    topics = Topics("t.")
    assert sorted(topic_rank(topics), key=topic_rank(topics).__getitem__) == [
        "t.agent.observations",
        "t.agent.decisions",
        "t.agent.feedback",
        "t.memory.schedule",
        "t.memory.access",
    ]


def test_topics_interleave_by_timestamp_and_ties_follow_the_rank() -> None:
    records = [
        raw("tick", 1, 30),
        raw("obs", 1, 30),
        raw("access", 0, 5),
        raw("tick", 0, 20),
        raw("obs", 0, 10),
    ]
    assert positions(canonical_order(records, RANKS)) == [
        ("access", 0),
        ("obs", 0),
        ("tick", 0),
        ("obs", 1),  # same timestamp as tick 1: the agent topic first
        ("tick", 1),
    ]


def test_a_topic_keeps_its_offset_order_when_its_timestamps_go_backwards() -> None:
    """Another producer's clock may stamp a later record earlier; sorting by timestamp would
    derive an agent's events out of log order."""
    skewed = [raw("obs", 0, 50), raw("obs", 1, 10), raw("obs", 2, 60)]
    merged = canonical_order([*skewed, raw("dec", 0, 20)], RANKS)
    assert positions(merged) == [("dec", 0), ("obs", 0), ("obs", 1), ("obs", 2)]


def test_records_without_a_timestamp_come_first_in_rank_and_offset_order() -> None:
    records = [raw("dec", 0, None), raw("obs", 1, 0), raw("obs", 0, None), raw("tick", 0, None)]
    assert positions(canonical_order(records, RANKS)) == [
        ("obs", 0),
        ("dec", 0),
        ("tick", 0),
        ("obs", 1),
    ]


def keyed(topic: str, offset: int, timestamp: int, key: bytes | None) -> RawRecord:
    return RawRecord(
        topic=topic, partition=0, offset=offset, key=key, value=b"{}", timestamp_ms=timestamp
    )


def test_a_batch_is_cut_after_an_erasure_its_agent_has_later_records_of() -> None:
    """An erasure of A (a keyed record on the schedule topic), then A's next life: cut between
    them, in canonical order. B's records, and A's before it, stay where they are."""
    records = [
        keyed("obs", 0, 10, b"A"),
        keyed("tick", 0, 20, b"A"),  # the erasure
        keyed("obs", 1, 30, b"B"),
        keyed("dec", 0, 40, b"A"),  # A's next life
        keyed("tick", 1, 50, None),  # a tick
        keyed("obs", 2, 60, b"A"),
    ]
    parts = cut_at_forgets(reversed(records), RANKS, "tick")
    assert [positions(part) for part in parts] == [
        [("obs", 0), ("tick", 0), ("obs", 1)],
        [("dec", 0), ("tick", 1), ("obs", 2)],
    ]
    merged = [r for part in parts for r in part]
    assert positions(merged) == positions(canonical_order(records, RANKS))
    # Each part derives in the order it has within the whole.
    assert all(positions(canonical_order(part, RANKS)) == positions(part) for part in parts)


def test_a_batch_without_an_erasure_followed_by_its_agent_is_not_cut() -> None:
    plain = [keyed("obs", 0, 10, b"A"), keyed("tick", 0, 20, None), keyed("obs", 1, 30, b"A")]
    assert cut_at_forgets(plain, RANKS, "tick") == [plain]
    last = [keyed("obs", 0, 10, b"A"), keyed("tick", 0, 20, b"A"), keyed("obs", 1, 30, b"B")]
    assert [positions(p) for p in cut_at_forgets(last, RANKS, "tick")] == [positions(last)]
    assert cut_at_forgets([], RANKS, "tick") == [[]]


timestamps = st.lists(st.integers(min_value=0, max_value=50), max_size=15)


@given(
    columns=st.lists(st.tuples(st.sampled_from(sorted(RANKS)), st.integers(0, 2), timestamps)),
    seed=st.integers(0, 2**16),
)
def test_the_order_depends_on_the_records_alone_and_each_partition_on_its_own(
    columns: list[tuple[str, int, list[int]]], seed: int
) -> None:
    """Every record once, each source in offset order; the same whatever order the records
    came in, and a partition's records in the same order with or without the others'."""
    sources = {(topic, partition): stamps for topic, partition, stamps in columns}
    records = [
        raw(topic, offset, stamp, partition)
        for (topic, partition), stamps in sources.items()
        for offset, stamp in enumerate(stamps)
    ]
    ordered = canonical_order(records, RANKS)
    assert sorted(map(id, ordered)) == sorted(map(id, records))
    for topic, partition in sources:
        mine = [r.offset for r in ordered if (r.topic, r.partition) == (topic, partition)]
        assert mine == sorted(mine)
    shuffled = list(records)
    random.Random(seed).shuffle(shuffled)
    assert canonical_order(shuffled, RANKS) == ordered
    for partition in {p for _, p in sources}:
        alone = canonical_order([r for r in records if r.partition == partition], RANKS)
        assert alone == [r for r in ordered if r.partition == partition]


def marker(*upto: tuple[str, int], partition: int = 0) -> DerivedUpTo:
    return DerivedUpTo(
        event_id=f"m-{upto}",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        partition=partition,
        upto=tuple(
            SourcePosition(topic=topic, partition=partition, offset=offset)
            for topic, offset in upto
        ),
    )


def test_the_raw_log_is_cut_where_the_markers_say() -> None:
    records = [raw("obs", o, 10 * o) for o in range(6)] + [
        raw("dec", o, 10 * o + 5) for o in range(3)
    ]
    markers = [
        marker(),  # the first marker of a fresh log names nothing
        marker(("obs", 2)),
        marker(("obs", 1), ("dec", 1)),  # obs 1 was derived already (a takeover): skipped
        marker(("obs", 2), ("dec", 1)),  # repeated after a takeover: no batch
        marker(("obs", 3), ("dec", 2)),
    ]
    cut = batches_at_markers(records, markers, RANKS, tail_size=1)
    assert [positions(batch) for batch in cut.marked] == [
        [("obs", 0), ("obs", 1), ("obs", 2)],
        [("dec", 0), ("dec", 1)],
        [("dec", 2), ("obs", 3)],  # by timestamp: 25, then 30
    ]
    # What no marker names yet: in batches of the tail size, in canonical order.
    assert [positions(batch) for batch in cut.unmarked] == [[("obs", 4)], [("obs", 5)]]
    assert cut.records == len(records)


def test_without_markers_the_raw_log_is_cut_in_batches_of_the_tail_size() -> None:
    records = [raw("dec", 0, 15), raw("obs", 0, 10), raw("obs", 1, 20), raw("tick", 0, 20)]
    cut = batches_at_markers(records, [], RANKS, tail_size=3)
    assert cut.marked == []
    assert [positions(batch) for batch in cut.unmarked] == [
        [("obs", 0), ("dec", 0), ("obs", 1)],
        [("tick", 0)],
    ]


def test_a_marker_naming_records_not_read_cuts_what_was_read() -> None:
    """Records a retention policy removed, or a marker of another partition number's topic."""
    cut = batches_at_markers([raw("obs", 3, 1)], [marker(("obs", 5), ("dec", 9))], RANKS, 10)
    assert [positions(batch) for batch in cut.marked] == [[("obs", 3)]]


def test_a_takeover_folds_only_the_retrievals_the_markers_name() -> None:
    """One past them is derived by the batches that follow, where a reprocess derives it."""
    access = (TOPICS.access, 0)
    folded = FoldedState(TOPICS.schedule, logged_upto={access: 3}, marked={0})
    retrieval = MemoryRetrieved(
        agent_id="A",
        event_id="r",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        mode="two_phase",
        parameters={},
        results=(),
        took_ms=1.0,
    )
    folded.apply_retrieval(retrieval, SourcePosition(topic=access[0], partition=0, offset=5))
    assert folded.derived_upto[access] == 3
    # Without markers (a log written before them), every retrieval read is taken as counted.
    legacy = FoldedState(TOPICS.schedule)
    legacy.apply_retrieval(retrieval, SourcePosition(topic=access[0], partition=0, offset=5))
    assert legacy.derived_upto[access] == 5


# The worker model: a live worker that fetches each source in chunks of its own.


def fetched(records: Sequence[RawRecord], seed: int) -> list[list[RawRecord]]:
    """``records`` as a consumer may hand them over: each batch takes the next few records of
    every source (any number, in offset order), in any arrival order. A retrieval comes in a
    batch after every record made before it: it names what the projections held, so what its
    query saw was derived and logged before it was recorded."""
    rng = random.Random(seed)
    sources: dict[tuple[str, int], list[RawRecord]] = {}
    for record in sorted(records, key=lambda r: r.offset):
        sources.setdefault((record.topic, record.partition), []).append(record)
    batches: list[list[RawRecord]] = []
    while any(sources.values()):
        pending = [r for (topic, _), rs in sources.items() if topic != TOPICS.access for r in rs]
        made = min((stamp(r) for r in pending), default=None)
        batch: list[RawRecord] = []
        for (topic, _), waiting in sources.items():
            ready = len(waiting)
            if topic == TOPICS.access and made is not None:
                ready = sum(1 for r in waiting if stamp(r) < made)
            n = rng.randint(0, min(ready, 6))
            batch.extend(waiting[:n])
            del waiting[:n]
        rng.shuffle(batch)
        if batch:
            batches.append(batch)
    return batches


def stamp(record: RawRecord) -> int:
    assert record.timestamp_ms is not None, "a generated record is stamped when made"
    return record.timestamp_ms


Log = dict[tuple[str, int], list[DerivedEvent]]


def counted(worker: Worker) -> Log:
    """Per derived topic and partition, the events of the worker's log that count, in order."""
    logged = [
        (SourcePosition(topic=topic, partition=partition, offset=offset), record)
        for (topic, partition), records in sorted(worker.log.items())
        for offset, record in enumerate(records)
    ]
    kept = {id(event) for event in logged_batches(logged, TOPICS.schedule).events}
    out: Log = {}
    for where, record in logged:
        if not isinstance(record, DerivedUpTo) and id(record) in kept:
            out.setdefault((where.topic, where.partition), []).append(record)
    return out


def reprocessed(live: Worker, records: Sequence[RawRecord], tail_size: int = 5) -> Worker:
    """A fresh worker fed ``records`` cut where ``live``'s markers say, partition by partition."""
    again = Worker()
    for partition in sorted({r.partition for r in records}):
        markers = [
            m for m in live.log.get((TOPICS.lifecycle, partition), []) if isinstance(m, DerivedUpTo)
        ]
        mine = [r for r in records if r.partition == partition]
        for batch in batches_at_markers(mine, markers, RANK, tail_size).batches:
            again.handle(batch)
    return again


actions = st.lists(action, min_size=30, max_size=120)


seeds = st.integers(0, 2**32)


@settings(max_examples=100, deadline=None)
@given(actions=actions, seed=seeds)
def test_cut_at_the_live_markers_the_raw_log_derives_the_live_log(
    actions: list[Action], seed: int
) -> None:
    records, _ = build_stream(actions)
    live = Worker()
    for batch in fetched(records, seed):
        live.handle(batch)
    assert counted(reprocessed(live, records)) == counted(live)


@settings(max_examples=100, deadline=None)
@given(actions=actions, seed=seeds, data=st.data())
def test_the_live_log_is_derived_again_after_a_takeover(
    actions: list[Action], seed: int, data: st.DataObject
) -> None:
    """A worker logged some batches and crashed; the next folds its state from the log and
    from the retrievals on ``memory.access`` to its end (of the partition numbers the first
    one had marked: a retrieval names summaries of the log), and gets the uncommitted batches
    again, fetched otherwise. Retrievals past the markers count where those batches hold them,
    not at the takeover."""
    records, _ = build_stream(actions)
    batches = fetched(records, seed)
    crashed = data.draw(st.integers(0, len(batches)), label="batches logged")
    first = Worker()
    for batch in batches[:crashed]:
        first.handle(batch)
    committed = data.draw(st.integers(0, crashed), label="batches committed")
    retrievals = [r for r in records if r.kind == "retrieval" and r.partition in first.opened]
    second = Worker.take_over(first.log, retrievals)
    again = [r for batch in batches[committed:] for r in batch]
    for batch in fetched(again, seed + 1):
        second.handle(batch)
    assert counted(reprocessed(second, records)) == counted(second)
