"""A snapshot plus the log after it folds to the state the whole log folds to.

The worker model of :mod:`tests.agent_streams` logs batches with their markers; after one of
them it writes each partition's snapshot (as :class:`streams.worker.snapshotting.Snapshotter`
does, through the snapshot records and back), goes on, and may crash with a batch half logged.
A takeover that resumes from the snapshots and reads only the log after them must hold the
state, the marks and the agents' partitions of a takeover that folds the whole log, and go on
to write what an uninterrupted worker writes.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.batch import RawRecord
from processors.batch_markers import Logged
from processors.recording import AgentMemoryState, SummaryEntry, WorkingEntry
from processors.state_fold import FoldedState
from processors.state_snapshot import (
    CoveredLog,
    PartitionSnapshot,
    SnapshotChunk,
    SnapshotManifest,
    assemble,
    chunk_records,
    decode_snapshot_record,
    decode_state,
    manifest_record,
    marker_matches,
    partition_snapshot,
    resume,
    with_states,
)
from schemas.codec import decode_retrieval
from schemas.learned_events import FactAccessed
from schemas.memory_events import DerivedEvent, DerivedUpTo, SourcePosition
from schemas.sealed import new_agent_key, seal, unseal
from tests.agent_streams import TOPICS, Action, Worker, action, build_stream, partition_of, split
from tests.unit.processors.test_replay_properties import continue_and_check

actions = st.lists(action, min_size=30, max_size=120)
cuts = st.lists(st.integers(1, 150), max_size=30)
AT = datetime(2026, 1, 1, tzinfo=UTC)


def log_batch(worker: Worker, covered: CoveredLog, batch: list[RawRecord]) -> None:
    """What the pipeline does per batch: derive, log, mark, and note the markers' positions."""
    derived = worker.derive(batch)
    markers = derived.markers(worker.write(derived.result.derived), AT)
    landed: list[SourcePosition] = []
    for marker in markers:
        logged = worker.log.setdefault((TOPICS.lifecycle, marker.partition), [])
        logged.append(marker)
        landed.append(
            SourcePosition(
                topic=TOPICS.lifecycle, partition=marker.partition, offset=len(logged) - 1
            )
        )
    covered.note(markers, landed, TOPICS.items, TOPICS.lifecycle)


def through_records(snapshot: PartitionSnapshot) -> PartitionSnapshot:
    """The snapshot written as records (small chunks, so several) and read back."""
    chunks = chunk_records(snapshot, "snap-1", chunk_bytes=600)
    manifest = decode_snapshot_record(manifest_record(snapshot, "snap-1", len(chunks), 0, AT))
    assert isinstance(manifest, SnapshotManifest)
    read = assemble(manifest, [decode_snapshot_record(c) for c in chunks])
    assert read is not None
    return read


def tail_after(
    log: list[Logged], snapshots: dict[int, PartitionSnapshot]
) -> tuple[list[Logged], dict[int, bool]]:
    """The records a takeover reads after the snapshots (everything of other partitions), and
    per snapshot whether its marker is where it says."""
    tail: list[Logged] = []
    first: dict[int, Logged] = {}
    for where, record in log:
        snapshot = snapshots.get(where.partition)
        if snapshot is None:
            tail.append((where, record))
            continue
        start = snapshot.tail_starts(TOPICS.items, TOPICS.lifecycle, TOPICS.access)[where.topic]
        if where.offset >= start:
            tail.append((where, record))
            if where.offset == start and where.topic == TOPICS.lifecycle:
                first[where.partition] = (where, record)
    return tail, {p: marker_matches(s, first.get(p)) for p, s in snapshots.items()}


def resumed(
    worker: Worker, snapshots: dict[int, PartitionSnapshot], records: list[RawRecord], seed: int
) -> tuple[FoldedState, list[DerivedEvent], int]:
    """A takeover from ``snapshots``: the state, the tail's events, and the records read."""
    tail, matched = tail_after(worker.read_back(seed), snapshots)
    assert all(matched.values()), "a snapshot's marker is not where it says"
    folded, events = resume(snapshots, tail, TOPICS.schedule)
    for raw in records:
        if raw.kind != "retrieval" or raw.value is None:
            continue
        snapshot = snapshots.get(raw.partition)
        if (
            snapshot is not None
            and raw.offset
            < snapshot.tail_starts(TOPICS.items, TOPICS.lifecycle, TOPICS.access)[TOPICS.access]
        ):
            continue
        position = SourcePosition(topic=raw.topic, partition=raw.partition, offset=raw.offset)
        folded.apply_retrieval(decode_retrieval(raw.value), position)
    return folded, events, len(tail)


@settings(max_examples=40, deadline=None)
@given(actions=actions, cuts=cuts, seed=st.integers(0, 2**16), data=st.data())
def test_a_snapshot_and_the_log_after_it_fold_to_what_the_whole_log_folds_to(
    actions: list[Action], cuts: list[int], seed: int, data: st.DataObject
) -> None:
    records, _ = build_stream(actions)
    batches = split(records, cuts)
    snapshot_after = data.draw(st.integers(0, len(batches) - 1), label="snapshot after batch")
    crashed = data.draw(st.integers(snapshot_after + 1, len(batches)), label="batches logged")
    worker, covered = Worker(), CoveredLog()
    snapshots: dict[int, PartitionSnapshot] = {}
    for i, batch in enumerate(batches[:crashed]):
        log_batch(worker, covered, batch)
        if i == snapshot_after:
            for partition in (0, 1):
                snapshot = partition_snapshot(
                    worker.folded, worker.partition_of, covered, partition
                )
                if snapshot is not None:
                    snapshots[partition] = through_records(snapshot)
    if crashed < len(batches) and data.draw(st.booleans(), label="a batch half logged"):
        derived = worker.derive(batches[crashed]).result.derived
        worker.write(derived[: data.draw(st.integers(0, len(derived)), label="logged of it")])

    # What memory.access can hold at the takeover: the retrievals of the batches logged (a
    # retrieval names memories the projections already had, so a later batch's cannot exist).
    accessed = [raw for batch in batches[:crashed] for raw in batch]
    whole, _, _ = resumed(worker, {}, accessed, seed)
    folded, events, read = resumed(worker, snapshots, accessed, seed)
    assert folded.states == whole.states
    assert folded.derived_upto == whole.derived_upto
    assert folded.logged_upto == whole.logged_upto
    assert folded.marked == whole.marked
    if snapshots:
        assert read < sum(len(held) for held in worker.log.values())

    # The new worker goes on from there as an uninterrupted one would.
    second = Worker(folded=folded, log={k: list(v) for k, v in worker.log.items()})
    second.partition_of.update(folded.partition_of)
    for event in events:
        second.partition_of[event.agent_id] = partition_of(event)
    committed = data.draw(st.integers(snapshot_after + 1, crashed), label="batches committed")
    continue_and_check(records, batches, second, committed, seed)


@settings(max_examples=20, deadline=None)
@given(actions=actions, seed=st.integers(0, 2**16))
def test_without_snapshots_resuming_is_the_whole_fold(actions: list[Action], seed: int) -> None:
    _, worker = build_stream(actions)
    log = worker.read_back(seed)
    assert resume({}, log, TOPICS.schedule)[0] == FoldedState.from_log(log, TOPICS.schedule)[0]


def test_a_snapshot_that_kept_a_pruned_l1_pending_resumes_as_the_whole_log_folds() -> None:
    """Before a pruned L1 left its pending chapter, snapshots kept it pending: resumed as
    written, the next L2 would summarise it, and the state would differ from the whole fold."""
    l1s = [
        SummaryEntry(f"l1-{i}", 1, i, f"summary {i}", 0.5, (), i + 1, None, AT) for i in range(3)
    ]
    old = AgentMemoryState(next_seq=3, pending_l1=tuple(l1s), summaries=(l1s[0], l1s[2]))
    snapshot = replace(snapshot_of_one_agent(), states={"A": old})
    folded, _ = resume({0: snapshot}, [], TOPICS.schedule)
    assert [p.memory_id for p in folded.states["A"].pending_l1] == ["l1-0", "l1-2"]
    assert folded.states["A"].summaries == old.summaries


def snapshot_of_one_agent() -> PartitionSnapshot:
    return PartitionSnapshot(
        partition=0,
        states={"A": AgentMemoryState(next_seq=4)},
        derived_upto={(TOPICS.observations, 0): 9},
        logged_upto={(TOPICS.observations, 0): 9},
        log_ends={(TOPICS.items, 0): 3, (TOPICS.lifecycle, 0): 7},
        marker="m-1",
    )


def test_a_snapshot_record_that_does_not_decode_or_has_another_version_is_no_snapshot() -> None:
    snapshot = snapshot_of_one_agent()
    manifest = manifest_record(snapshot, "s", 1, 0, AT)
    assert isinstance(decode_snapshot_record(manifest), SnapshotManifest)
    assert (
        decode_snapshot_record(manifest.replace(b'"schema_version":1', b'"schema_version":9'))
        is None
    )
    assert decode_snapshot_record(manifest[:-5]) is None
    assert decode_snapshot_record(b"") is None
    assert decode_snapshot_record(None) is None
    chunk = decode_snapshot_record(chunk_records(snapshot, "s")[0])
    assert isinstance(chunk, SnapshotChunk)


def test_a_snapshot_with_a_chunk_missing_or_of_another_snapshot_is_no_snapshot() -> None:
    snapshot = snapshot_of_one_agent()
    manifest = decode_snapshot_record(manifest_record(snapshot, "s", 1, 0, AT))
    assert isinstance(manifest, SnapshotManifest)
    ours = decode_snapshot_record(chunk_records(snapshot, "s")[0])
    theirs = decode_snapshot_record(chunk_records(snapshot, "other")[0])
    assert assemble(manifest, [ours]) == snapshot
    assert assemble(manifest, []) is None
    assert assemble(manifest, [theirs, None]) is None


def test_a_snapshot_whose_marker_is_not_where_it_says_describes_another_log() -> None:
    _, worker = build_stream([("S1", "observe", 7)] * 3)
    where, marker = next(
        (where, record)
        for where, record in reversed(worker.read_back())
        if isinstance(record, DerivedUpTo)
    )
    snapshot = snapshot_of_one_agent()
    snapshot.log_ends[(where.topic, where.partition)] = where.offset
    assert not marker_matches(snapshot, (where, marker))
    snapshot.marker = marker.event_id
    assert marker_matches(snapshot, (where, marker))
    assert not marker_matches(snapshot, None)
    snapshot.log_ends[(where.topic, where.partition)] = where.offset + 1
    assert not marker_matches(snapshot, (where, marker))


def test_a_retrieval_redelivered_after_a_snapshot_takeover_is_counted() -> None:
    """A case the property above found: the snapshot after the first batch (the last logged
    and committed), on a partition no batch had touched, and a retrieval of a summary the
    redelivered batch makes. The takeover folds only what ``memory.access`` can hold then: the
    logged batch's retrievals (a retrieval names memories the projections already had)."""
    actions: list[Action] = (
        [("Y1", "observe", 0)]
        + [("S1", "observe", 0)] * 13
        + [("W1", "observe", 1)] * 2
        + [("S1", "garbage", 0)]
        + [("0", "tick", 1)]
        + [("S1", "garbage", 0)] * 2
        + [("S1", "observe", 0)]
        + [("S1", "garbage", 0)]
        + [("S1", "observe", 0)]
        + [("W1", "retrieve", 0)]
        + [("S1", "garbage", 0)] * 5
        + [("S1", "observe", 0)]
    )
    records, _ = build_stream(actions)
    batches = split(records, [1])
    worker, covered = Worker(), CoveredLog()
    log_batch(worker, covered, batches[0])
    snapshots: dict[int, PartitionSnapshot] = {}
    for partition in (0, 1):
        snapshot = partition_snapshot(worker.folded, worker.partition_of, covered, partition)
        if snapshot is not None:
            snapshots[partition] = through_records(snapshot)
    folded, events, _ = resumed(worker, snapshots, batches[0], 0)
    second = Worker(folded=folded, log={k: list(v) for k, v in worker.log.items()})
    second.partition_of.update(folded.partition_of)
    for event in events:
        second.partition_of[event.agent_id] = partition_of(event)
    continue_and_check(records, batches, second, 1, 0)


def test_counts_of_facts_searched_before_and_after_a_snapshot_resume_as_the_whole_log() -> None:
    """Searches of facts on both sides of the snapshot (one record a batch), one of them
    returning a fact superseded after it: the counts the snapshot holds and those the tail's
    ``FactAccessed`` events add give the state of the whole fold and of the live worker."""
    actions: list[Action] = [
        ("Y1", "fact", 0),  # the house's elevation
        ("Y1", "fact", 1),  # whether it is insured
        ("Y1", "search_facts", 1),  # both
        ("Y1", "search_facts", 0),  # one
        ("Y1", "fact", 0),  # a new elevation supersedes the first
        ("Y1", "search_facts", 3),  # one current (twice) and the superseded one
        ("Y1", "search_facts", 1),
    ]
    records, _ = build_stream(actions)
    batches = split(records, range(len(records)))
    worker, covered = Worker(), CoveredLog()
    snapshots: dict[int, PartitionSnapshot] = {}
    for i, batch in enumerate(batches):
        log_batch(worker, covered, batch)
        if i == 3:
            snapshot = partition_snapshot(worker.folded, worker.partition_of, covered, 1)
            assert snapshot is not None
            snapshots[1] = through_records(snapshot)
    before = snapshots[1].states["Y1"].learned.access_counts
    assert sorted(before.values()) == [1, 2]

    whole, _, _ = resumed(worker, {}, records, 0)
    folded, events, _ = resumed(worker, snapshots, records, 0)
    assert folded.states == whole.states == worker.folded.states
    after = folded.states["Y1"].learned.access_counts
    assert sorted(after.values()) == [2, 3], "the superseded fact's count left with it"
    assert any(isinstance(e, FactAccessed) for e in events), "counted in the tail"


def large_snapshot() -> PartitionSnapshot:
    """Two small agents around one whose state alone outgrows a chunk (long turns)."""
    turns = tuple(
        WorkingEntry(
            memory_id=f"m{i}",
            seq=i,
            importance=0.5,
            content="長" * 2_000,
            tags=(),
            kind=None,
            step=None,
            year=None,
            occurred_at=AT,
            source_event_id=f"e{i}",
            source_event_type="agent.observation",
            agent_type="assistant",
        )
        for i in range(20)
    )
    states = {
        "A": AgentMemoryState(next_seq=1, agent_type="assistant"),
        "B": AgentMemoryState(next_seq=20, working=turns),
        "C": AgentMemoryState(next_seq=3, agent_type="assistant"),
    }
    return replace(snapshot_of_one_agent(), states=states)


@pytest.mark.parametrize("sealed", [False, True])
def test_a_state_past_a_chunk_is_written_in_pieces_and_read_whole(sealed: bool) -> None:
    """One agent's state past the broker's message size made every snapshot of its partition
    fail; it now goes in pieces of about a chunk each."""
    snapshot = large_snapshot()
    keys = {agent: new_agent_key(agent) for agent in snapshot.states}
    chunk_bytes = 20_000
    records = chunk_records(
        snapshot, "s", chunk_bytes, seal=(lambda a, b: seal(keys[a], b)) if sealed else None
    )
    assert len(records) > 5
    assert max(len(r) for r in records) < 2 * chunk_bytes
    manifest = decode_snapshot_record(manifest_record(snapshot, "s", len(records), 0, AT))
    assert isinstance(manifest, SnapshotManifest)
    read = assemble(manifest, [decode_snapshot_record(r) for r in records])
    assert read is not None
    if sealed:
        assert set(read.sealed) == {"A", "B", "C"}
        opened = {a: decode_state(unseal(raw, keys[a])) for a, raw in read.sealed.items()}
        read = with_states(read, opened)
    assert read == snapshot
    missing_piece = [decode_snapshot_record(r) for r in records]
    del missing_piece[2]
    assert assemble(manifest.model_copy(update={"chunks": len(records) - 1}), missing_piece) is None
