"""Writing the snapshots a takeover starts from (:mod:`processors.state_snapshot`).

After a batch is logged, marked and applied, the worker takes note of where its markers landed
(no per-event cost) and, every ``every_records`` records or ``every_seconds`` seconds, takes the
state of each partition it owns that moved since its last snapshot, as it stands after that
batch. Writing them happens beside the batches that follow, in a task of its own: the chunks,
then, once the broker has them all, the manifest. A snapshot's encoding and delivery grow with
the partition's state (~200 ms for 1,000 agents of the benchmarks), and written inside the batch
they held every event behind it that long: at a steady rate that was the tail of the
publish-to-queryable latency. Taking the state costs a dict of references: states are never
changed in place (:class:`processors.learned_state.LearnedState`), so the one taken stays what
the batch left, whatever the next batches do.

Where the log is sealed, each agent's state is sealed with the agent's key of the moment the
state was taken (fetched then, in one keyring call for what is not cached): sealed with a key
fetched later, the state of an agent forgotten meanwhile would be readable with the key of its
next life. Without the keys (the keyring is down) no snapshot is taken this time.

So a snapshot never claims what the log does not hold (its marker is logged before it) nor what
the projections have not applied (it is taken after the batch is applied, and the projections
are made durable before it is written). A snapshot that cannot be written is skipped with a
warning: the next one or a longer takeover read makes up for it, the batch itself is done. One
is written at a time: a snapshot that falls due while one is being written is taken as soon as
that one is done, between batches (or by the batch in flight then, as it ends), not left for a
batch that may be a tick away.

A snapshot gives way to the batches: the projections' sync and each chunk wait until no batch
is in flight, for at most :data:`GIVE_WAY` seconds (so a backlog, whose batches follow each
other, still gets its snapshots). Without it a chunk ran at every await of a batch, which
spread a snapshot's work into the batches: at a steady 1,000 events/s the batches beside one
took up to ~280 ms (see ``tests/benchmarks/README.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from processors.state_fold import FoldedState
from processors.state_snapshot import (
    CoveredLog,
    PartitionSnapshot,
    holds_nothing,
    iter_chunk_records,
    manifest_record,
    partition_snapshot,
)
from schemas.memory_events import DerivedUpTo
from schemas.sealed import AgentKey, seal
from schemas.topics import Topics
from streams.privacy.keyring import KeyringError
from streams.privacy.sealing import RecordSealer

log = logging.getLogger("engram.snapshots")

Send = Callable[[str, bytes | None, bytes, int | None], Awaitable[Any]]
"""Hand a record to the producer; awaiting what it returns waits for its delivery."""

GIVE_WAY = 0.1
"""Longest a snapshot's next step waits for the batch in flight to end (seconds)."""


@dataclass
class Snapshotter:
    send: Send
    topics: Topics
    every_records: int = 100_000
    every_seconds: float = 30.0
    covered: CoveredLog = field(default_factory=CoveredLog)
    moved: set[int] = field(default_factory=set)
    """Partition numbers with a batch since their last snapshot."""
    records: int = 0
    """Records processed since the last snapshot was taken."""
    last: float = field(default_factory=time.monotonic)
    written: int = 0
    before_write: Callable[[], Awaitable[None]] | None = None
    """Makes what the projections applied durable (a store may let its checkpoint lag), run
    before the due snapshots are written: a takeover refuses a snapshot that a projection is
    behind and folds the partition's whole log instead."""
    sealer: RecordSealer | None = None
    """Seals each agent's state with its key, as the log's records are (None, or one without
    a keyring: states stay plain)."""
    _writing: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _owed: tuple[FoldedState, Mapping[str, int], set[int]] | None = field(
        default=None, init=False, repr=False
    )
    """What a batch that ended while a snapshot was being written made due: taken next."""
    _batches_begun: int = field(default=0, init=False, repr=False)
    """Batches begun and releases made: a key fetch beside either is not trusted."""
    _settling: int = field(default=0, init=False, repr=False)
    """Callers of :meth:`settled` waiting with ``owed`` False: the write in progress is the
    last one then."""
    _between_batches: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def __post_init__(self) -> None:
        self._between_batches.set()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Around each batch: the snapshot being written waits for it to end (up to
        :data:`GIVE_WAY`)."""
        self._between_batches.clear()
        self._batches_begun += 1
        try:
            yield
        finally:
            self._between_batches.set()

    async def _give_way(self) -> None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns, rather than raise, when
        # it is cancelled just as the batch ends, and stop() would then wait for the whole write.
        if not self._between_batches.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(GIVE_WAY):
                    await self._between_batches.wait()

    def took_over(self, folded: FoldedState, partitions: set[int]) -> None:
        self.covered.took_over(folded, partitions)

    def release(self, partitions: set[int]) -> None:
        """Between batches only, so no batch in flight notes them afterwards. A snapshot of
        them being written goes on: it holds the log up to its marker, whoever owns them next
        (the pipeline lets it end before a revocation, for a while)."""
        self.covered.release(partitions)
        self.moved -= partitions
        # Their next owner may forget an agent of theirs: keys being fetched for an owed
        # snapshot now are not to be trusted (_write_while_owed), as after a batch.
        self._batches_begun += 1

    async def after_batch(
        self,
        folded: FoldedState,
        partition_of: Mapping[str, int],
        owned: set[int],
        markers: Sequence[DerivedUpTo],
        landed: Sequence[object],
        records: int,
    ) -> None:
        """Take note of a batch of ``records`` records and of its markers (``landed``: the
        producer's metadata of each), and start writing the snapshots that are due, as the
        state stands now."""
        topics = self.topics
        self.moved |= self.covered.note(markers, landed, topics.items, topics.lifecycle)
        self.records += records
        if self.records < self.every_records and time.monotonic() - self.last < self.every_seconds:
            return
        if self._writing is not None and not self._writing.done():
            # Taken once the one being written is done (_write_while_owed), between batches.
            self._owed = (folded, partition_of, owned)
            return
        taken = self._take(folded, partition_of, owned)
        if not taken:
            return
        keys = await self._keys_of(taken)
        if keys is None:
            self._due_again(taken)
            return
        self._writing = asyncio.get_running_loop().create_task(self._write_while_owed(taken, keys))

    def _take(
        self, folded: FoldedState, partition_of: Mapping[str, int], owned: set[int]
    ) -> list[PartitionSnapshot]:
        """The snapshots of the partitions that moved, as the state stands now (between
        batches); the count towards the next due time starts again."""
        self.records, self.last = 0, time.monotonic()
        # Released partitions (between batches only: :mod:`streams.worker.ownership`) are
        # their new owner's to write.
        self.moved &= owned
        taken = [
            snapshot
            for partition in sorted(self.moved)
            if (snapshot := partition_snapshot(folded, partition_of, self.covered, partition))
            is not None
        ]
        self.moved.clear()
        return taken

    async def _write_while_owed(
        self, taken: Sequence[PartitionSnapshot], keys: Mapping[str, AgentKey]
    ) -> None:
        """Write ``taken``, then what a batch that ended meanwhile made due. Left for the next
        batch, that state waited for one: on a quiet stream, the next tick, a minute on. When a
        batch is in flight as the write ends, that batch takes it as it ends."""
        while True:
            await self._write_all(taken, keys)
            owed, self._owed = self._owed, None
            if owed is None or not self._between_batches.is_set() or self._settling:
                return
            taken, begun = [], self._batches_begun
            try:
                taken = self._take(*owed)
                found = await self._keys_of(taken) if taken else None
            except Exception as exc:  # in a task of its own: said here, or said nowhere
                log.warning(
                    "could not take a snapshot; the next one will", extra={"error": repr(exc)}
                )
                found = None
            if found is not None and self._batches_begun != begun:
                # A batch ran during the fetch: one that forgot an agent of this state would
                # have had its key deleted, and the key fetched be its next life's, which the
                # state would then open to. Inside a batch (after_batch) none can.
                found = None
            if found is None:
                if taken:
                    self._due_again(taken)
                    self.records = max(self.records, self.every_records)  # the next batch's
                return
            keys = found

    async def _keys_of(self, taken: Sequence[PartitionSnapshot]) -> dict[str, AgentKey] | None:
        """The current key of every agent with something in its state (None: the keyring
        could not say; no snapshot then)."""
        sealer = self.sealer
        if sealer is None or not sealer.enabled:
            return {}
        agents = {a for s in taken for a, state in s.states.items() if not holds_nothing(state)}
        try:
            await sealer.prepare_seal(agents)
        except KeyringError as exc:
            log.warning("the keyring is unavailable; no snapshot this time: %s", exc)
            return None
        keys = sealer.current_keys(agents)
        if missing := agents - keys.keys():
            # A batch ran during the fetch (a snapshot owed is taken beside the batches) and
            # dropped keys from the sealer's cache: a keyring that moved on, an agent forgotten.
            log.warning(
                "the keys of some agents changed while a snapshot was taken; due again",
                extra={"agents": len(missing)},
            )
            return None
        return keys

    async def settled(self, *, owed: bool = True) -> None:
        """Until the snapshots being written are written or given up, whatever became of them
        (a waiter that gives up waiting leaves them be). ``owed`` False: what falls due
        meanwhile is left to the next batch rather than written too, for a revocation, whose
        budget the wait comes out of."""
        if self._writing is None:
            return
        self._settling += 0 if owed else 1
        try:
            await asyncio.wait({self._writing})
        finally:
            self._settling -= 0 if owed else 1

    async def stop(self) -> None:
        """Give up the snapshots being written (a takeover reads the one before, and a longer
        tail): a worker that stops must not wait on them."""
        task, self._writing = self._writing, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})

    async def _write_all(
        self, taken: Sequence[PartitionSnapshot], keys: Mapping[str, AgentKey]
    ) -> None:
        if self.before_write is not None:
            try:
                await self._give_way()
                # Shielded: a store's sync given up halfway (a flush in a thread, under the
                # store's lock) would let the store be closed beneath it.
                await asyncio.shield(self.before_write())
            except asyncio.CancelledError:
                self._due_again(taken)
                raise
            except Exception as exc:
                log.warning(
                    "could not make the projections durable; no snapshot this time",
                    extra={"error": repr(exc)},
                )
                self._due_again(taken)
                return
        for index, snapshot in enumerate(taken):
            try:
                await self._write(snapshot, keys)
            except asyncio.CancelledError:
                self._due_again(taken[index:])
                raise
            except Exception as exc:
                log.warning(
                    "could not write a snapshot; the next one will",
                    extra={"partition": snapshot.partition, "error": repr(exc)},
                )
                self._due_again([snapshot])

    def _due_again(self, snapshots: Sequence[PartitionSnapshot]) -> None:
        """Partitions whose snapshot was not written, still this worker's: due next time."""
        self.moved |= {s.partition for s in snapshots if s.partition in self.covered.marker}

    async def _write(self, snapshot: PartitionSnapshot, keys: Mapping[str, AgentKey]) -> None:
        snapshot_id = uuid.uuid4().hex
        topic, partition = self.topics.snapshots, snapshot.partition
        pending: list[Any] = []
        size = 0

        def sealed(agent: str, state: bytes) -> bytes:
            key = keys.get(agent)
            if key is None:  # never in plain text on a sealed log (see _keys_of)
                raise KeyError(f"no key to seal the state of agent {agent!r} with")
            return seal(key, state)

        # Each chunk encoded when it is next.
        chunks = iter_chunk_records(snapshot, snapshot_id, seal=sealed if keys else None)
        while True:
            await self._give_way()
            if (chunk := next(chunks, None)) is None:
                break
            key = f"{partition}/chunk/{len(pending)}".encode()
            pending.append(await self.send(topic, key, chunk, partition))
            size += len(chunk)
        landed = [await delivery for delivery in pending]
        first = landed[0].offset if landed else -1
        manifest = manifest_record(snapshot, snapshot_id, len(pending), first, datetime.now(UTC))
        await (await self.send(topic, f"{partition}/manifest".encode(), manifest, partition))
        self.written += 1
        log.info(
            "wrote snapshot",
            extra={
                "partition": partition,
                "agents": len(snapshot.states),
                "chunks": len(pending),
                "bytes": size + len(manifest),
            },
        )
