"""The hot path: one Faust hop from the agent topics to the log of derived events and the
projections.

Per batch (:func:`streams.worker.faust_batches.take_batches`): skip what the log says was
derived, put the rest in the canonical order (:mod:`processors.batch_order`), decode and record
(pure: :func:`processors.worker_step.derive_batch`), hand the derived events and dead letters
to the producer and wait until the broker took them all, then log one "logged up to" marker
(:class:`DerivedUpTo`, see :mod:`processors.batch_markers`) per partition number of the batch,
naming where its events landed, and wait for it: two round trips per batch, whatever it holds. Then
apply the derived events to both projections and keep the per-agent states (in memory: they
are folded back from the derived log when a worker takes a partition over, see
:mod:`processors.state_fold`). Faust acks the batch only after this returns and flushes the
producer before it commits offsets, so the order is: log written, marker written, projections
applied, offsets committed (streams/README.md, invariants 3 and 7). A crash before the marker leaves
events that every reader of the log leaves out, and the batch is derived again whole (maybe
otherwise: a redelivery may cut the batch elsewhere), so the projections must
not have applied the first attempt. A projection that is down pauses the batch and is retried
with backoff; the batch is never acked past it. Every batch holds the process's write lock
(:class:`projections.versions.WriteLock`), so a projection switch never pauses it half done.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol, TypeVar, cast

from processors.batch import BatchResult, RawRecord
from processors.batch_markers import opening_markers
from processors.batch_order import cut_at_forgets, topic_rank
from processors.config import ProcessingConfig
from processors.embedding import Embedder
from processors.lifecycle import Deriving
from processors.state_fold import FoldedState
from processors.summarising import ExtractiveSummariser, Summariser
from processors.worker_step import DerivedBatch, carry, derive_batch
from projections.interfaces import (
    EpisodicMemoryStore,
    ProjectionError,
    WorkingMemoryStore,
    latest_positions,
)
from projections.versions import WriteLock
from projections.working.agent_index import AgentIndex, batch_entries
from schemas.codec import encode_event
from schemas.errors import BackendUnavailableError
from schemas.memory_events import AgentForgotten, DerivedEvent, DerivedUpTo, derived_topic_of
from schemas.topics import Topics
from streams.eventlog.publisher import Position
from streams.privacy.keyring import KeyringError
from streams.privacy.sealing import RecordSealer
from streams.worker.batch_send import BatchSendFn
from streams.worker.catch_up import catch_up
from streams.worker.ownership import Ownership
from streams.worker.snapshotting import Snapshotter
from streams.worker.source_gaps import FirstRecordAt, Hold, settle_gaps

log = logging.getLogger("engram.ingest")

T = TypeVar("T")


class SendFn(Protocol):
    def __call__(
        self, topic: str, key: bytes | None, value: bytes, partition: int | None
    ) -> Awaitable[Any]:
        """Hand a record to the producer (not waiting for delivery: the commit flushes)."""


Recover = Callable[[set[int]], Awaitable[tuple[FoldedState, list[DerivedEvent]]]]


@dataclass(frozen=True, slots=True)
class Sent:
    """Records handed to the producer: ``indexes`` are their places in what was sent, and
    ``delivery`` completes with a list of where each landed (``batched``) or with the
    metadata of the one record."""

    indexes: list[int]
    delivery: Awaitable[Any]
    batched: bool


class DeliveryError(BackendUnavailableError):
    """The broker did not take a derived record; the batch must not be acknowledged."""


@dataclass
class IngestStats:
    """Counters for health and logs; cheap to update per batch, never per event."""

    batches: int = 0
    events: int = 0
    skipped: int = 0
    """Redelivered records whose derived events were already in the log."""
    caught_up: int = 0
    """Derived events re-applied on takeover because a projection had not applied them."""
    memories: int = 0
    lifecycle_events: int = 0
    """Promotions, summaries, forgettings and consolidation records."""
    dead_letters: int = 0
    dead_letter_kinds: dict[str, int] = field(default_factory=dict)
    """Dead letters by ``error_kind`` (not_json, invalid, ...), for the metrics."""
    forgotten_records: int = 0
    """Records skipped because they were sealed with a forgotten agent's key."""
    held_back: int = 0
    """Records left out of a batch because records before them were not derived yet (a
    rebalance's stale fetch: :mod:`processors.source_order`); they are read again."""
    projection_retries: int = 0
    last_batch_at: float | None = None
    applied: dict[tuple[str, int], int] = field(default_factory=dict)

    def covers(self, positions: Sequence[Position]) -> bool:
        return all(self.applied.get((p.topic, p.partition), -1) >= p.offset for p in positions)

    async def wait_for(self, positions: Sequence[Position], timeout: float = 30.0) -> None:
        """Read-your-writes inside one process: until the processors passed every position."""
        deadline = time.monotonic() + timeout
        while not self.covers(positions):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the projections did not apply {len(positions)} records within {timeout}s"
                )
            await asyncio.sleep(0.02)


@dataclass
class IngestPipeline:
    config: ProcessingConfig
    embedder: Embedder
    topics: Topics
    working: WorkingMemoryStore
    episodic: EpisodicMemoryStore | None
    """None when an episodic projector applies the log instead (Qdrant Edge in another process)."""
    send: SendFn
    send_batch: BatchSendFn | None = None
    """Whole record batches per partition (the Faust shell gives the producer's); None sends
    record by record through ``send``."""
    summariser: Summariser = field(default_factory=ExtractiveSummariser)
    recover: Recover | None = None
    """Reads the derived log of partitions back; None for a pipeline that starts empty."""
    should_stop: Callable[[], bool] = lambda: False
    max_backoff: float = 5.0
    stats: IngestStats = field(default_factory=IngestStats)
    write_lock: WriteLock = field(default_factory=WriteLock)
    """Held by every batch; a fence takes it to pause the worker
    (:func:`projections.versions.obey_fence`)."""
    sealer: RecordSealer = field(default_factory=lambda: RecordSealer(None))
    """Opens sealed input and seals the derived events with their agent's key (none: plain)."""
    snapshots: Snapshotter | None = None
    """Writes the partitions' state now and then, for a takeover to start from (none: never)."""
    agent_index: AgentIndex | None = None
    """Where each agent's records lie, for its history (none: history scans partitions)."""
    ownership: Ownership = field(default_factory=Ownership)
    """Which partitions a batch may derive while the group rebalances."""
    settle_within: float = 30.0
    """Longest a batch waits for the group's assignment after a revocation."""
    placement: Callable[[str], int] | None = None
    """The partition an agent's records belong on (:func:`streams.eventlog.history.placement`);
    an agent event elsewhere is a dead letter. None: not checked."""
    first_record_at: FirstRecordAt | None = None
    """Where the first record at or after an offset of a source partition is, asked of the
    broker when a partition's next record is not the one its mark says comes next
    (:mod:`processors.source_order`). None: every such gap is taken as the log's own."""

    def __post_init__(self) -> None:
        self.config_version = self.config.version(self.embedder.id, self.summariser.id)
        self.ctx = Deriving(
            self.config, self.embedder, self.summariser, self.config_version, self.placement
        )
        self.rank = topic_rank(self.topics)
        self.folded = FoldedState(schedule_topic=self.topics.schedule)
        self._recovered: set[int] = set()
        self._partition_of: dict[str, int] = {}

    @property
    def stores(self) -> list[WorkingMemoryStore | EpisodicMemoryStore]:
        return [self.working] if self.episodic is None else [self.working, self.episodic]

    async def take_over(self, folded: FoldedState, logged: Sequence[DerivedEvent]) -> None:
        """Adopt the state folded from the derived log of newly assigned partitions, and bring
        the projections up to what that log holds (a crash may have cut in between)."""
        self.folded.states.update(folded.states)
        self.folded.derived_upto.update(folded.derived_upto)
        self.folded.logged_upto.update(folded.logged_upto)
        self.folded.marked |= folded.marked
        self.folded.log_ends.update(folded.log_ends)
        self._partition_of.update(folded.partition_of)
        for event in logged:
            if event.source_position is not None:
                self._partition_of[event.agent_id] = event.source_position.partition
        applied: dict[tuple[str, int], int] = {}
        indexed: dict[tuple[str, int], int] = {}
        for topic, partition in folded.derived_upto:
            marks = [await store.applied_offset(topic, partition) for store in self.stores]
            applied[(topic, partition)] = min(-1 if m is None else m for m in marks)
            # A batch's index entries are written before either store applies it.
            indexed[(topic, partition)] = max(-1 if m is None else m for m in marks)
        tail = catch_up(logged, applied)
        await self.apply(tail)
        self.stats.caught_up += len(tail)
        await self._distrust_index(tail, indexed)
        if folded.logged_upto:
            # A crash between a batch's marker and its advance: the marks move now.
            logged_upto = dict(folded.logged_upto)
            await self._on_every_store(lambda store: store.advance(logged_upto))

    async def _distrust_index(
        self, tail: Sequence[DerivedEvent], applied: dict[tuple[str, int], int]
    ) -> None:
        """A batch logged but applied by no store (``applied``: the furthest store): a crash
        may have cut between its marker and its index entry, so the index of its partition no
        longer says where everything is. A store whose checkpoint lags (Qdrant Edge's group
        commit) does not count: the other one applied the batch, after its index entry."""
        index = self.agent_index
        cut = {
            p.partition
            for p in (e.source_position for e in tail)
            if p is not None and p.offset > applied.get((p.topic, p.partition), -1)
        }
        if index is not None and cut:
            await self._retrying("agent index", lambda: index.set_whole(cut, False))

    def release(self, partitions: set[int]) -> None:
        """Forget partitions this worker no longer owns: if they come back, their state is
        folded from the log again, since another worker may have moved it on meanwhile."""
        self._recovered -= partitions
        for key in [k for k in self.folded.derived_upto if k[1] in partitions]:
            del self.folded.derived_upto[key]
        for key in [k for k in self.folded.logged_upto if k[1] in partitions]:
            del self.folded.logged_upto[key]
        self.folded.marked -= partitions
        for key in [k for k in self.folded.log_ends if k[1] in partitions]:
            del self.folded.log_ends[key]
        for agent in [a for a, p in self._partition_of.items() if p in partitions]:
            del self._partition_of[agent]
            self.folded.states.pop(agent, None)
        if self.snapshots is not None:
            self.snapshots.release(partitions)

    async def revoke(self, partitions: set[int], within: float) -> None:
        """The group revoked ``partitions``: once the batch in flight is done (its marker
        logged, within ``within`` seconds, else :class:`RebalanceTimeoutError`), forget them, and
        derive none of their records until the group assigns them again."""
        began = time.monotonic()
        if self.snapshots is not None:
            # A snapshot being written would be valid whoever owns the partitions next, but
            # the new owner's takeover reads the snapshot topic: let it find this one whole.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.snapshots.settled(owed=False), within / 2)
        await self.ownership.between_batches(within - (time.monotonic() - began))
        self.release(partitions)
        self.ownership.revoke(partitions)
        log.info(
            "released revoked partitions",
            extra={"partitions": sorted(partitions), "waited": round(time.monotonic() - began, 3)},
        )

    def assign(self, partitions: set[int]) -> None:
        self.ownership.assign(partitions)

    async def _ensure_recovered(self, records: Sequence[RawRecord]) -> None:
        """Fold the state of partitions seen for the first time before deriving from them.

        Done here, on the processing path, rather than in Faust's assignment signal: Faust's
        consumer runs in its own thread and can deliver records before that signal's handler
        has finished.
        """
        missing = {r.partition for r in records} - self._recovered
        if not missing:
            return
        if self.recover is not None:
            recover = self.recover
            # A backend down pauses a takeover as it pauses a batch: every rebalance takes
            # partitions over, and a worker that exited on a Redis blip there restarted into
            # another rebalance, the whole group crash-looping for as long as the outage.
            # Both steps read or write idempotently, so doing them again is safe.
            folded, logged = await self._retrying("taking over", lambda: recover(missing))
            await self._retrying("taking over", lambda: self.take_over(folded, logged))
            log.info(
                "took over partitions %s: %d agents, %d derived events, %d re-applied",
                sorted(missing),
                len(folded.states),
                len(logged),
                self.stats.caught_up,
            )
        await self._open_to_markers(missing)
        self._recovered |= missing
        if self.snapshots is not None:
            self.snapshots.took_over(self.folded, missing)

    async def _open_to_markers(self, partitions: set[int]) -> None:
        """Log a first marker for each partition number that has none, naming what the log
        holds (the older rule's marks, or nothing): from then on markers rule it, so a crash in
        this worker's first batch there leaves nothing that counts. Once per partition number
        in the life of a log."""
        unmarked = partitions - self.folded.marked
        if not unmarked:
            return
        folded = self.folded
        markers = opening_markers(
            unmarked, folded.derived_upto, folded.log_ends, self.topics, datetime.now(UTC)
        )
        await self._log_markers(markers)
        folded.marked |= unmarked
        empty = {p for p in unmarked if not any(k[1] == p for k in folded.log_ends)}
        if (index := self.agent_index) is not None and empty:
            # An empty log: every batch of it is indexed from its first.
            await self._retrying("agent index", lambda: index.set_whole(empty, True))

    async def _log_markers(self, markers: Sequence[DerivedUpTo]) -> list[Any]:
        """Send markers to their partition of ``memory.lifecycle`` and wait until logged;
        returns where each landed (the producer's metadata)."""
        lifecycle, send_batch = self.topics.lifecycle, self.send_batch
        sent: list[Sent] = []
        for i, marker in enumerate(markers):
            value = encode_event(marker)
            if send_batch is None:
                sent.append(
                    Sent([i], await self.send(lifecycle, None, value, marker.partition), False)
                )
                continue
            # A closed record batch leaves at once; a single send would wait out the
            # producer's linger, and the batch waits for its markers.
            delivery = await send_batch(lifecycle, marker.partition, [(None, value)])
            sent.append(Sent([i], delivery, True))
        return await self._await_deliveries(sent, len(sent))

    def derive(self, records: Sequence[RawRecord]) -> DerivedBatch:
        return derive_batch(
            records,
            self.folded,
            self._partition_of,
            ctx=self.ctx,
            rank=self.rank,
            failed_at=datetime.now(UTC),
            opener=self.sealer,
        )

    async def handle(
        self,
        records: Sequence[RawRecord],
        leave: Callable[[set[int]], None] | None = None,
        hold: Hold | None = None,
    ) -> BatchResult:
        """One batch, under the write lock, so a projection switch (which takes the lock to
        pause this worker) never falls in the middle of a batch. A batch where an agent's
        erasure is followed by its next life is handled as two (:func:`cut_at_forgets`); the
        result returned is the last one's. Records of partitions the
        group revoked and did not assign again are left to their new owner, and ``leave`` is
        told which, so that their offsets are not committed. Records that do not continue
        their source partition from its mark are held back (:mod:`processors.source_order`),
        and ``hold`` is told which, and where to read again from."""
        async with self.write_lock.batch():
            partitions = {r.partition for r in records}
            owned = await self.ownership.owned(partitions, self.settle_within, self.should_stop)
            if owned != partitions:
                log.info(
                    "left records of revoked partitions to their new owner",
                    extra={"partitions": sorted(partitions - owned)},
                )
                records = [r for r in records if r.partition in owned]
                if leave is not None:
                    leave(partitions - owned)
            with self.ownership.in_flight(), self._snapshots_give_way():
                await self._ensure_recovered(records)
                records = await self._in_source_order(records, hold)
                *before, last = cut_at_forgets(records, self.rank, self.topics.schedule)
                for part in before:  # an agent's erasure, then its next life: two batches
                    await self._handle(part)
                return await self._handle(last)

    async def _in_source_order(
        self, records: Sequence[RawRecord], hold: Hold | None
    ) -> Sequence[RawRecord]:
        """The records that continue their source partitions from the marks
        (:mod:`streams.worker.source_gaps`); the shell is told which it held back."""
        settled = await settle_gaps(records, self.folded, self.first_record_at)
        if settled.rewind_to:
            self.stats.held_back += settled.held_back
            log.warning(
                "held back records that do not continue their partitions; reading again",
                extra={
                    "held": {f"{t}:{p}": o for (t, p), o in settled.first_held.items()},
                    "rewind_to": {f"{t}:{p}": o for (t, p), o in settled.rewind_to.items()},
                },
            )
            if hold is not None:
                await hold(settled.first_held, settled.rewind_to)
        return settled.records

    def _snapshots_give_way(self) -> contextlib.AbstractContextManager[None]:
        return self.snapshots.batch() if self.snapshots is not None else contextlib.nullcontext()

    async def _handle(self, records: Sequence[RawRecord]) -> BatchResult:
        await self._ensure_recovered(records)
        await self._with_keyring(self._prepare_keys, records)
        if self.summariser.blocking or getattr(self.embedder, "batches_misses", False):
            # A summariser that waits on a network, or a model that computes for seconds a
            # batch, must not stall the loop: the stores' replies, queries, health checks.
            batch = await asyncio.to_thread(self.derive, records)
        else:
            batch = self.derive(records)
        result = batch.result
        sent = await self._send(result.derived)
        for n, letter in enumerate(result.dead_letters):
            log.warning(
                "dead letter",
                extra={
                    "topic": letter.topic,
                    "partition": letter.partition,
                    "offset": letter.offset,
                    "reason": letter.reason,
                },
            )
            key = base64.b64decode(letter.key_b64) if letter.key_b64 else None
            delivery = await self.send(self.topics.deadletter, key, encode_event(letter), None)
            sent.append(Sent([len(result.derived) + n], delivery, False))
        # The log is the truth: the batch is done only once the broker has every derived record,
        # and readers count it only once its markers follow them. Only then do the projections
        # apply it: a batch cut short is derived again, maybe otherwise (a redelivery may cut
        # the batch elsewhere), and they must not hold the first try.
        delivered = await self._await_deliveries(
            sent, len(result.derived) + len(result.dead_letters)
        )
        markers = batch.markers(delivered, datetime.now(UTC))
        landed = await self._log_markers(markers)
        if (index := self.agent_index) is not None:
            # A forgotten agent's index loses its old life before the batch is indexed, so it
            # keeps the erasure itself: deleted after, the index a new life starts left it out
            # of the agent's history.
            for agent in result.forgotten_agents:
                await self._retrying("agent index", partial(index.forget, agent))
            entries = batch_entries(records, result.derived, delivered, landed)
            await self._retrying("agent index", lambda: index.add_batch(entries))
        await self.apply(result.derived)
        await self.advance_past(records, result.derived)
        carry(self.folded, self._partition_of, batch)
        await self._forget_agents(result)
        if self.snapshots is not None:
            # Logged, marked and applied: what a snapshot now says, the log and stores hold.
            folded, owned = self.folded, self._recovered
            await self.snapshots.after_batch(
                folded, self._partition_of, owned, markers, landed, len(records)
            )
        self.stats.skipped += batch.skipped
        self._count(records, result)
        return result

    async def _prepare_keys(self, records: Sequence[RawRecord]) -> None:
        await self.sealer.refresh()
        await self.sealer.prepare_open(r.value for r in records)

    async def _with_keyring(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """A keyring that is down (by default it lives in the projections' Redis) pauses the
        batch like a projection that is down: retried with backoff, never skipped."""
        return await self._retrying("keyring", lambda: call(*args))

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call`` until a backend that is down is back (backoff up to ``max_backoff``),
        instead of losing the batch, unless the worker is stopping."""
        delay = 0.1
        while True:
            try:
                return await call()
            except (ProjectionError, KeyringError) as exc:
                if self.should_stop():
                    raise
                self.stats.projection_retries += 1
                log.warning("%s unavailable, retrying in %.1fs: %s", what, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)

    async def _forget_agents(self, result: BatchResult) -> None:
        """Delete the keys of the agents the batch forgot, once their erasure is logged and
        applied (what this worker held of them was dropped by :func:`carry`). A crash before
        this redelivers the command, which does it again (deleting keys is idempotent)."""
        for agent, key_ids in result.forgotten_agents.items():
            keyring = self.sealer.keyring
            if keyring is not None and key_ids:
                deleted = await self._with_keyring(keyring.forget, agent, key_ids)
                log.info("forgot agent", extra={"agent_id": agent, "keys_deleted": deleted})
            self.sealer.forget(agent, key_ids)
        self.stats.forgotten_records += result.forgotten_records

    async def _send(self, events: Sequence[DerivedEvent]) -> list[Sent]:
        """Hand derived events to the producer, each to its source's partition number: a
        partition's events as whole record batches when the shell can (``send_batch``)."""
        topics, sealer = self.topics, self.sealer
        agents = {e.agent_id for e in events if not isinstance(e, AgentForgotten)}
        await self._with_keyring(sealer.prepare_seal, agents)
        groups: dict[tuple[str, int | None], list[int]] = {}
        records: list[tuple[bytes, bytes]] = []
        for index, event in enumerate(events):
            position = event.source_position
            partition = position.partition if position is not None else None
            groups.setdefault((topics.derived_topic(event), partition), []).append(index)
            records.append(
                (
                    event.agent_id.encode("utf-8"),
                    # What erases an agent must stay readable once its keys are gone.
                    encode_event(event)
                    if isinstance(event, AgentForgotten)
                    else sealer.seal(event.agent_id, encode_event(event)),
                )
            )
        sent: list[Sent] = []
        for (topic, partition), indexes in groups.items():
            if partition is not None and self.send_batch is not None:
                batch = [records[i] for i in indexes]
                sent.append(Sent(indexes, await self.send_batch(topic, partition, batch), True))
                continue
            # Sequential awaits: each only enqueues, and no Task is made per record.
            for i in indexes:
                key, value = records[i]
                sent.append(Sent([i], await self.send(topic, key, value, partition), False))
        return sent

    @staticmethod
    async def _await_deliveries(sent: Sequence[Sent], count: int) -> list[Any]:
        """The producer's metadata of each of ``count`` records; raise unless the broker took
        them all (a producer flush never raises, so a failed delivery would otherwise go
        unnoticed)."""
        results = await asyncio.gather(*(s.delivery for s in sent), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise DeliveryError(f"{len(failed)} derived records were not delivered: {failed[0]!r}")
        landed: list[Any] = [None] * count
        for s, result in zip(sent, cast(list[Any], results), strict=True):
            if s.batched:
                for index, metadata in zip(s.indexes, result, strict=True):
                    landed[index] = metadata
            else:
                landed[s.indexes[0]] = result
        return landed

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        """Apply to both projections; retry while a backend is down instead of losing the batch."""
        if not events:
            return
        await self._on_every_store(lambda store: store.apply(events))

    async def sync_projections(self) -> None:
        """Make what the projections applied durable (the episodic store may let its
        checkpoint lag: :mod:`projections.episodic.edge`), retried while a backend is down."""
        if (episodic := self.episodic) is not None:
            await self._retrying("projection", episodic.sync)

    async def _on_every_store(
        self, write: Callable[[WorkingMemoryStore | EpisodicMemoryStore], Awaitable[None]]
    ) -> None:
        """Run ``write`` on both projections, retried while a backend is down."""

        async def on_both() -> None:
            await asyncio.gather(*(write(store) for store in self.stores))

        await self._retrying("projection", on_both)

    async def advance_past(
        self, records: Sequence[RawRecord], derived: Sequence[DerivedEvent]
    ) -> None:
        """Move every store's applied offsets past the batch's records that left it nothing to
        apply (dead letters, retrievals, most ticks, records already derived), so that a
        read-your-writes wait on them completes. Called once the batch is applied and logged:
        a store then skips any older event as the replay it is. Partitions whose last record
        derived something were moved by ``apply`` already and cost nothing here."""
        moved = latest_positions(derived)
        behind: dict[tuple[str, int], int] = {}
        for raw in records:
            key = (raw.topic, raw.partition)
            if raw.offset > max(moved.get(key, -1), behind.get(key, -1)):
                behind[key] = raw.offset
        if not behind:
            return
        await self._on_every_store(lambda store: store.advance(behind))

    def _count(self, records: Sequence[RawRecord], result: BatchResult) -> None:
        stats = self.stats
        stats.batches += 1
        stats.events += len(records)
        recorded = sum(1 for e in result.derived if derived_topic_of(e) == "items")
        stats.memories += recorded
        stats.lifecycle_events += len(result.derived) - recorded
        stats.dead_letters += len(result.dead_letters)
        for letter in result.dead_letters:
            stats.dead_letter_kinds[letter.error_kind] = 1 + stats.dead_letter_kinds.get(
                letter.error_kind, 0
            )
        stats.last_batch_at = time.time()
        for raw in records:
            key = (raw.topic, raw.partition)
            if stats.applied.get(key, -1) < raw.offset:
                stats.applied[key] = raw.offset
