"""Writing the snapshots a takeover starts from (:mod:`processors.state_snapshot`).

After a batch is logged, marked and applied, the worker takes note of where its markers landed
(no per-event cost) and, every ``every_batches`` batches or ``every_seconds`` seconds, writes
the state of each partition it owns that moved since its last snapshot: the chunks, then, once
the broker has them all, the manifest. So a snapshot never claims what the log does not hold
(its marker is logged before it) nor what the projections have not applied (it is written after
the batch is applied). A snapshot that cannot be written is skipped with a warning: the next one
or a longer takeover read makes up for it, the batch itself is done.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from processors.state_fold import FoldedState
from processors.state_snapshot import (
    CoveredLog,
    chunk_records,
    manifest_record,
    partition_snapshot,
)
from schemas.memory_events import DerivedUpTo
from schemas.topics import Topics

log = logging.getLogger("engram.snapshots")

Send = Callable[[str, bytes | None, bytes, int | None], Awaitable[Any]]
"""Hand a record to the producer; awaiting what it returns waits for its delivery."""


@dataclass
class Snapshotter:
    send: Send
    topics: Topics
    every_batches: int = 100
    every_seconds: float = 30.0
    covered: CoveredLog = field(default_factory=CoveredLog)
    moved: set[int] = field(default_factory=set)
    """Partition numbers with a batch since their last snapshot."""
    batches: int = 0
    last: float = field(default_factory=time.monotonic)
    written: int = 0
    before_write: Callable[[], Awaitable[None]] | None = None
    """Makes what the projections applied durable (a store may let its checkpoint lag), run
    before the due snapshots are written: a takeover refuses a snapshot that a projection is
    behind and folds the partition's whole log instead."""

    def took_over(self, folded: FoldedState, partitions: set[int]) -> None:
        self.covered.took_over(folded, partitions)

    def release(self, partitions: set[int]) -> None:
        """Between batches only, so no batch in flight notes or writes them afterwards."""
        self.covered.release(partitions)
        self.moved -= partitions

    async def after_batch(
        self,
        folded: FoldedState,
        partition_of: Mapping[str, int],
        owned: set[int],
        markers: Sequence[DerivedUpTo],
        landed: Sequence[object],
    ) -> None:
        """Take note of a batch's markers (``landed``: the producer's metadata of each), and
        write the snapshots that are due."""
        topics = self.topics
        self.moved |= self.covered.note(markers, landed, topics.items, topics.lifecycle)
        self.batches += 1
        if self.batches < self.every_batches and time.monotonic() - self.last < self.every_seconds:
            return
        self.batches, self.last = 0, time.monotonic()
        if self.before_write is not None and self.moved & owned:
            try:
                await self.before_write()
            except Exception as exc:
                log.warning(
                    "could not make the projections durable; no snapshot this time",
                    extra={"error": repr(exc)},
                )
                return
        for partition in sorted(self.moved):
            if partition not in owned:
                # Released (between batches only: :mod:`streams.worker.ownership`); its new
                # owner writes its snapshots.
                self.moved.discard(partition)
                continue
            try:
                await self._write(folded, partition_of, partition)
            except Exception as exc:
                log.warning(
                    "could not write a snapshot; the next one will",
                    extra={"partition": partition, "error": repr(exc)},
                )
                continue
            self.moved.discard(partition)

    async def _write(
        self, folded: FoldedState, partition_of: Mapping[str, int], partition: int
    ) -> None:
        snapshot = partition_snapshot(folded, partition_of, self.covered, partition)
        if snapshot is None:
            return
        snapshot_id = uuid.uuid4().hex
        topic = self.topics.snapshots
        chunks = chunk_records(snapshot, snapshot_id)
        pending = [
            await self.send(topic, f"{partition}/chunk/{i}".encode(), chunk, partition)
            for i, chunk in enumerate(chunks)
        ]
        landed = [await delivery for delivery in pending]
        first = landed[0].offset if landed else -1
        manifest = manifest_record(snapshot, snapshot_id, len(chunks), first, datetime.now(UTC))
        await (await self.send(topic, f"{partition}/manifest".encode(), manifest, partition))
        self.written += 1
        log.info(
            "wrote snapshot",
            extra={
                "partition": partition,
                "agents": len(snapshot.states),
                "chunks": len(chunks),
                "bytes": sum(map(len, chunks)) + len(manifest),
            },
        )
