"""The snapshotter makes the projections durable before it writes a snapshot: a takeover
refuses a snapshot that a projection is behind (Qdrant Edge's checkpoint may lag its applies)
and folds the partition's whole log instead."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from schemas.memory_events import DerivedUpTo, SourcePosition
from schemas.topics import Topics
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

    async def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None) -> Any:
        self.happened.append(f"send {key!r}")

        async def delivered() -> Landed:
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

    async def batch(self, *, marked: bool = True) -> None:
        upto = (SourcePosition(topic=TOPICS.observations, partition=0, offset=5),)
        marker = DerivedUpTo(event_id="m", occurred_at=AT, partition=0, upto=upto, items=None)
        markers, landed = ([marker], [Landed(7)]) if marked else ([], [])
        await self.snapshots.after_batch(self.folded, {"alice": 0}, {0}, markers, landed)


async def test_the_projections_are_synced_before_a_due_snapshot_is_sent() -> None:
    log = Log()
    worker = Worker(Snapshotter(log.send, TOPICS, every_batches=2, before_write=log.sync))

    await worker.batch()
    assert log.happened == [], "not due yet: no sync either"
    await worker.batch()

    assert log.happened[0] == "sync"
    assert log.happened.count("sync") == 1
    assert log.happened[-1] == "send b'0/manifest'"
    assert worker.snapshots.written == 1


async def test_a_failed_sync_writes_no_snapshot_and_keeps_the_partition_due() -> None:
    log = Log()
    snapshots = Snapshotter(log.send, TOPICS, every_batches=1, before_write=log.failing_sync)
    worker = Worker(snapshots)

    await worker.batch()

    assert log.happened == []
    assert snapshots.written == 0
    assert snapshots.moved == {0}
    snapshots.before_write = log.sync
    await worker.batch(marked=False)
    assert snapshots.written == 1, "the next due time writes it"
