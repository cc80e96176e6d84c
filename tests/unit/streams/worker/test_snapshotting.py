"""The snapshotter makes the projections durable before it writes a snapshot: a takeover
refuses a snapshot that a projection is behind (Qdrant Edge's checkpoint may lag its applies)
and folds the partition's whole log instead. It writes beside the batches, the state as the
batch that made it due left it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from schemas.memory_events import DerivedUpTo, SourcePosition
from schemas.topics import Topics
from streams.worker import snapshotting
from streams.worker.snapshotting import Snapshotter

TOPICS = Topics()
AT = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Landed:
    offset: int


class Log:
    """The snapshot topic as the producer sees it, and the order of what happened."""

    def __init__(self) -> None:
        self.happened: list[str] = []
        self.values: list[bytes] = []
        self.hold: asyncio.Event | None = None
        """While set and not yet released, the broker does not answer."""

    async def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None) -> Any:
        self.happened.append(f"send {key!r}")
        self.values.append(value)
        hold = self.hold

        async def delivered() -> Landed:
            if hold is not None:
                await hold.wait()
            return Landed(len(self.happened))

        return delivered()

    async def sync(self) -> None:
        self.happened.append("sync")

    async def failing_sync(self) -> None:
        raise ConnectionError("the projection is down")


class Worker:
    """One agent on partition 0, and a batch of it whose marker landed: what after_batch sees."""

    def __init__(self, snapshots: Snapshotter) -> None:
        self.snapshots = snapshots
        self.folded = FoldedState(schedule_topic=TOPICS.schedule)
        self.folded.states["alice"] = AgentMemoryState()

    async def batch(self, *, marked: bool = True, records: int = 1) -> None:
        upto = (SourcePosition(topic=TOPICS.observations, partition=0, offset=5),)
        marker = DerivedUpTo(event_id="m", occurred_at=AT, partition=0, upto=upto, items=None)
        markers, landed = ([marker], [Landed(7)]) if marked else ([], [])
        await self.snapshots.after_batch(self.folded, {"alice": 0}, {0}, markers, landed, records)


async def test_the_projections_are_synced_before_a_due_snapshot_is_sent() -> None:
    log = Log()
    worker = Worker(Snapshotter(log.send, TOPICS, every_records=2, before_write=log.sync))

    await worker.batch()
    assert log.happened == [], "not due yet: no sync either"
    await worker.batch()
    await worker.snapshots.settled()

    assert log.happened[0] == "sync"
    assert log.happened.count("sync") == 1
    assert log.happened[-1] == "send b'0/manifest'"
    assert worker.snapshots.written == 1


async def test_a_failed_sync_writes_no_snapshot_and_keeps_the_partition_due() -> None:
    log = Log()
    snapshots = Snapshotter(log.send, TOPICS, every_records=1, before_write=log.failing_sync)
    worker = Worker(snapshots)

    await worker.batch()
    await snapshots.settled()

    assert log.happened == []
    assert snapshots.written == 0
    assert snapshots.moved == {0}
    snapshots.before_write = log.sync
    await worker.batch(marked=False)
    await snapshots.settled()
    assert snapshots.written == 1, "the next due time writes it"


async def test_a_snapshot_holds_the_state_of_the_batch_that_made_it_due() -> None:
    """The batches after it go on while it is written, and change the states it was taken
    from: what it writes is still the state of its own batch."""
    log = Log()
    log.hold = asyncio.Event()
    snapshots = Snapshotter(log.send, TOPICS, every_records=1, before_write=log.sync)
    worker = Worker(snapshots)
    worker.folded.states["alice"] = AgentMemoryState(next_seq=1)

    await worker.batch()
    await asyncio.sleep(0.01)
    assert snapshots.written == 0, "the broker has not answered: the manifest waits"
    worker.folded.states["alice"] = replace(worker.folded.states["alice"], next_seq=2)
    await worker.batch()
    log.hold.set()
    await snapshots.settled()

    chunk = json.loads(log.values[0])
    assert chunk["agents"]["alice"]["next_seq"] == 1
    assert snapshots.written == 2, "the second batch's snapshot followed, with no third batch"
    assert json.loads(log.values[2])["agents"]["alice"]["next_seq"] == 2
    assert snapshots.moved == set()


async def test_a_snapshot_due_while_one_is_written_is_taken_by_the_batch_in_flight() -> None:
    """The write ends while a batch runs: the state is not taken then (mid-batch), but by
    that batch as it ends."""
    log = Log()
    log.hold = asyncio.Event()
    snapshots = Snapshotter(log.send, TOPICS, every_records=1, before_write=log.sync)
    worker = Worker(snapshots)
    worker.folded.states["alice"] = AgentMemoryState(next_seq=1)
    await worker.batch()
    worker.folded.states["alice"] = AgentMemoryState(next_seq=2)
    await worker.batch()  # due while the first is written
    with snapshots.batch():
        log.hold.set()
        await snapshots.settled()
        assert snapshots.written == 1, "nothing taken while a batch is in flight"
        worker.folded.states["alice"] = AgentMemoryState(next_seq=3)
        await worker.batch()
    await snapshots.settled()

    assert snapshots.written == 2
    assert json.loads(log.values[2])["agents"]["alice"]["next_seq"] == 3


async def test_a_snapshot_falls_due_by_records_and_counts_afresh_after_it() -> None:
    log = Log()
    snapshots = Snapshotter(log.send, TOPICS, every_records=10)
    worker = Worker(snapshots)

    for records, written in [(4, 0), (4, 0), (4, 1), (9, 1), (1, 2)]:
        await worker.batch(records=records)
        await snapshots.settled()
        assert snapshots.written == written, (records, written)


async def test_the_state_is_taken_when_the_batch_ends_not_once_the_sync_is_done() -> None:
    """A slow sync (Edge's flush) lets the next batch move the state on meanwhile: the
    snapshot must still hold what the log held at its own marker."""
    log = Log()
    synced = asyncio.Event()

    async def slow_sync() -> None:
        await synced.wait()

    snapshots = Snapshotter(log.send, TOPICS, every_records=1, before_write=slow_sync)
    worker = Worker(snapshots)
    worker.folded.states["alice"] = AgentMemoryState(next_seq=1)
    await worker.batch()
    await asyncio.sleep(0.01)
    worker.folded.states["alice"] = AgentMemoryState(next_seq=2)
    synced.set()
    await snapshots.settled()

    assert snapshots.written == 1
    assert json.loads(log.values[0])["agents"]["alice"]["next_seq"] == 1


async def test_a_stopped_snapshotter_gives_up_its_snapshot_and_keeps_it_due() -> None:
    log = Log()
    log.hold = asyncio.Event()
    snapshots = Snapshotter(log.send, TOPICS, every_records=1)
    worker = Worker(snapshots)

    await worker.batch()
    await asyncio.sleep(0.01)
    await snapshots.stop()

    assert snapshots.written == 0
    assert "send b'0/manifest'" not in log.happened
    assert snapshots.moved == {0}
    await snapshots.settled()  # nothing left to wait for


async def test_waiting_for_a_snapshot_that_is_given_up_ends_quietly() -> None:
    """A revocation waits for the snapshot being written while the worker stops and gives it
    up: the wait ends, and the revocation goes on."""
    log = Log()
    log.hold = asyncio.Event()
    snapshots = Snapshotter(log.send, TOPICS, every_records=1)
    await Worker(snapshots).batch()
    waiting = asyncio.ensure_future(snapshots.settled())
    await asyncio.sleep(0.01)

    await snapshots.stop()

    await asyncio.wait_for(waiting, 1)
    assert snapshots.written == 0


async def test_a_snapshot_given_up_during_the_sync_lets_the_sync_end_and_stays_due() -> None:
    """Edge's sync runs a flush in a thread under the store's lock: cut short, the store
    could be closed beneath it."""
    log = Log()
    release, ended = asyncio.Event(), asyncio.Event()

    async def slow_sync() -> None:
        await release.wait()
        ended.set()

    snapshots = Snapshotter(log.send, TOPICS, every_records=1, before_write=slow_sync)
    await Worker(snapshots).batch()
    await asyncio.sleep(0.01)
    await snapshots.stop()
    release.set()
    await asyncio.wait_for(ended.wait(), 1)

    assert snapshots.moved == {0}
    assert log.happened == []


async def test_a_released_partition_is_not_due_again_after_a_failed_snapshot() -> None:
    log = Log()
    snapshots = Snapshotter(log.send, TOPICS, every_records=1, before_write=log.failing_sync)
    worker = Worker(snapshots)

    await worker.batch()
    snapshots.release({0})
    await snapshots.settled()

    assert snapshots.moved == set()


async def test_a_snapshot_waits_for_the_batch_in_flight_to_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(snapshotting, "GIVE_WAY", 30.0)  # however slow this machine
    log = Log()
    worker = Worker(Snapshotter(log.send, TOPICS, every_records=1, before_write=log.sync))
    with worker.snapshots.batch():
        await worker.batch()  # due at its end, while it is still in flight
        for _ in range(20):
            await asyncio.sleep(0)
        assert log.happened == [], "neither the sync nor a chunk ran inside the batch"
    await worker.snapshots.settled()
    assert log.happened[0] == "sync"
    assert log.happened[-1] == "send b'0/manifest'"


async def test_a_snapshot_waits_for_batches_at_most_give_way_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(snapshotting, "GIVE_WAY", 0.01)
    log = Log()
    worker = Worker(Snapshotter(log.send, TOPICS, every_records=1, before_write=log.sync))
    with worker.snapshots.batch():  # a backlog: batches without end
        await worker.batch()
        await asyncio.wait_for(worker.snapshots.settled(), 5)
    assert log.happened[0] == "sync"
    assert log.happened[-1] == "send b'0/manifest'"


async def test_a_batch_that_fails_lets_the_snapshot_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshotting, "GIVE_WAY", 30.0)
    log = Log()
    worker = Worker(Snapshotter(log.send, TOPICS, every_records=1, before_write=log.sync))

    async def failing_batch() -> None:
        with worker.snapshots.batch():
            await worker.batch()
            raise RuntimeError("the batch failed")

    with pytest.raises(RuntimeError):
        await failing_batch()
    await asyncio.wait_for(worker.snapshots.settled(), 5)
    assert log.happened[-1] == "send b'0/manifest'"


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
async def test_a_stop_as_the_batch_ends_gives_up_the_snapshot_waiting_for_it(turns: int) -> None:
    """The agent stops its snapshotter right after its last batch: no chunk is sent after."""
    log = Log()
    worker = Worker(Snapshotter(log.send, TOPICS, every_records=1, before_write=log.sync))
    with worker.snapshots.batch():
        await worker.batch()
        await asyncio.sleep(0)  # the snapshot now waits for the batch to end
    for _ in range(turns):
        await asyncio.sleep(0)
    before = len(log.happened)
    await worker.snapshots.stop()
    await asyncio.sleep(0.01)  # a sync already started is shielded and ends; nothing else runs
    assert [step for step in log.happened[before:] if step.startswith("send")] == []
    assert "send b'0/manifest'" not in log.happened


async def test_a_revocation_waiting_for_the_snapshot_waits_for_that_one_only() -> None:
    """What falls due while it waits is the next batch's: a revocation's budget is spent on
    one write, not on a chain of them."""
    log = Log()
    log.hold = asyncio.Event()
    snapshots = Snapshotter(log.send, TOPICS, every_records=1, before_write=log.sync)
    worker = Worker(snapshots)
    await worker.batch()
    await worker.batch()  # due while the first is written
    waiting = asyncio.create_task(snapshots.settled(owed=False))
    await asyncio.sleep(0)
    log.hold.set()
    await waiting
    await asyncio.sleep(0.01)

    assert snapshots.written == 1
    assert snapshots.moved == {0}, "left to the next batch"
    await worker.batch()
    await snapshots.settled()
    assert snapshots.written == 2


async def test_a_snapshot_owed_that_cannot_be_taken_is_said_and_stays_due(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log = Log()
    log.hold = asyncio.Event()
    snapshots = Snapshotter(log.send, TOPICS, every_records=1, before_write=log.sync)
    worker = Worker(snapshots)
    await worker.batch()
    await worker.batch()

    def broken(*args: Any) -> None:
        raise RuntimeError("a state that cannot be taken")

    monkeypatch.setattr(snapshotting, "partition_snapshot", broken)
    log.hold.set()
    await snapshots.settled()

    assert snapshots.written == 1
    assert snapshots.moved == {0}
    assert "could not take a snapshot; the next one will" in caplog.messages
