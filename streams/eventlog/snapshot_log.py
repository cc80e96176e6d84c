"""A takeover bounded by state: the latest snapshot of each partition, then the log after it.

:func:`recover_state` is what a worker reads when it takes partitions over. For each partition
it reads the last record of the snapshot topic's partition (the latest manifest, whatever the
broker compacted) and the chunks it names (:mod:`processors.state_snapshot`), then
``memory.items``, ``memory.lifecycle`` and ``memory.access`` from where the snapshot ends, and
folds on (:func:`processors.state_snapshot.resume`). A partition whose snapshot is missing,
undecodable, of another schema version, ahead of what the projections applied (they lost
data: the events before it must be applied again) or not matching the log (its marker is not
where it says) is folded from the beginning instead, as is one holding an agent's sealed state
that does not open (:func:`opened_snapshots`): a snapshot costs time when lost, never
correctness.

Every takeover logs one ``takeover read`` line with what it read (``records_read``,
``snapshot_records``, ``from_snapshot``), so its cost can be checked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from processors.batch_markers import Logged
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from processors.state_snapshot import (
    PartitionSnapshot,
    SnapshotChunk,
    SnapshotManifest,
    assemble,
    decode_snapshot_record,
    decode_state,
    marker_matches,
    resume,
    with_states,
)
from schemas.codec import DecodeError, decode_derived_record, decode_retrieval
from schemas.memory_events import DerivedEvent
from schemas.sealed import is_sealed
from schemas.topics import Topics
from streams.eventlog.derived_log import read_records, read_with
from streams.eventlog.kafka_clients import log_reader
from streams.privacy.sealing import FORGOTTEN, RecordSealer

log = logging.getLogger("engram.takeover")

LOOK_BACK = 32
"""Records a takeover reads back past a snapshot cut short, beyond its own chunks, for the whole
one before it."""


AppliedOffset = Callable[[str, int], Awaitable[int]]
"""The lowest applied offset of a source partition over the projections (-1: none)."""


async def read_snapshots(
    bootstrap: str, topic: str, partitions: Iterable[int], *, timeout: float = 60.0
) -> tuple[dict[int, PartitionSnapshot], int]:
    """The latest whole snapshot of each partition that has one, and the records read."""
    parts = sorted(set(partitions))
    consumer = log_reader(bootstrap)
    try:
        await consumer.start()
        if topic not in await consumer.topics():
            return {}, 0
        tps = [TopicPartition(topic, p) for p in parts]
        ends = await consumer.end_offsets(tps)
        last: dict[int, tuple[int, bytes | None]] = {}

        def keep_last(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
            last[tp.partition] = (record.offset, record.value)

        # The reported end may fall short of the last record (a broker that answers with the
        # last batch's base offset): reading on from just before it finds the last one.
        around_end = {tp: max(0, ends[tp] - 1) for tp in tps if ends[tp] > 0}
        if around_end:
            await read_with(
                consumer, list(around_end), keep_last, starts=around_end, timeout=timeout
            )
        read = len(last)
        manifests: dict[int, tuple[int, SnapshotManifest]] = {}

        def note(partition: int, offset: int, value: bytes | None) -> None:
            decoded = decode_snapshot_record(value)
            if isinstance(decoded, SnapshotManifest) and decoded.partition == partition:
                manifests[partition] = (offset, decoded)

        def keep_manifest(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
            nonlocal read
            read += 1
            note(tp.partition, record.offset, record.value)

        for partition, (offset, value) in last.items():
            note(partition, offset, value)
        # A worker killed while it wrote a snapshot leaves chunks after the last manifest: the
        # one before them still holds (the log after it is read on), a few records back.
        back = {
            TopicPartition(topic, p): _before_cut(offset, value)
            for p, (offset, value) in last.items()
            if p not in manifests and offset > 0
        }
        if back:
            await read_with(consumer, list(back), keep_manifest, starts=back, timeout=timeout)
        chunks: dict[int, list[SnapshotChunk | SnapshotManifest | None]] = {}

        def keep_chunk(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
            nonlocal read
            held = manifests.get(tp.partition)
            if held is not None and record.offset < held[0]:
                read += 1
                chunks.setdefault(tp.partition, []).append(decode_snapshot_record(record.value))

        starts = {
            TopicPartition(topic, p): manifest.first_offset
            for p, (_, manifest) in manifests.items()
            if manifest.chunks > 0 and manifest.first_offset >= 0
        }
        if starts:
            await read_with(consumer, list(starts), keep_chunk, starts=starts, timeout=timeout)
    finally:
        await consumer.stop()
    snapshots: dict[int, PartitionSnapshot] = {}
    for p, (_, manifest) in manifests.items():
        snapshot = assemble(manifest, chunks.get(p, []))
        if snapshot is not None:
            snapshots[p] = snapshot
    return snapshots, read


def _before_cut(offset: int, value: bytes | None) -> int:
    """Where to read back from for the manifest before a snapshot cut short at ``offset``: its
    chunks run back from the last one, whose index counts those before it (a partition of a
    thousand agents takes some 36 chunks, more than a fixed look-back would cover)."""
    last = decode_snapshot_record(value)
    written = last.index if isinstance(last, SnapshotChunk) else 0
    return max(0, offset - written - LOOK_BACK)


async def usable_snapshots(
    bootstrap: str, topics: Topics, partitions: Iterable[int], applied: AppliedOffset | None
) -> tuple[dict[int, PartitionSnapshot], int]:
    """The latest snapshots of ``partitions`` that the projections have applied (a
    projection behind one lost data, and must get the events before it again from a whole
    fold); a snapshot topic that cannot be read is no snapshot."""
    try:
        snapshots, read = await read_snapshots(bootstrap, topics.snapshots, partitions)
    except (KafkaError, TimeoutError) as exc:
        log.warning("could not read the snapshots; folding the whole log: %s", exc)
        return {}, 0
    if applied is None:
        return snapshots, read
    usable: dict[int, PartitionSnapshot] = {}
    for p, snapshot in snapshots.items():
        behind = [
            key for key, offset in snapshot.logged_upto.items() if await applied(*key) < offset
        ]
        if behind:
            log.warning(
                "a projection has not applied what the snapshot of partition %d covers; "
                "folding the partition's whole log",
                p,
                extra={"partition": p, "behind": [f"{t}[{q}]" for t, q in behind]},
            )
        else:
            usable[p] = snapshot
    return usable, read


async def opened_snapshots(
    snapshots: dict[int, PartitionSnapshot], sealer: RecordSealer | None
) -> dict[int, PartitionSnapshot]:
    """The snapshots with their sealed states opened. A state sealed with a forgotten key is
    left out (the agent's erasure is in the log after the snapshot, and resets it); a snapshot
    with a state that does not open otherwise (no keyring, another keyring, a damaged record)
    is no snapshot: its partition is folded from the beginning."""
    out: dict[int, PartitionSnapshot] = {}
    for p, snapshot in snapshots.items():
        if not snapshot.sealed:
            out[p] = snapshot
            continue
        raws = list(snapshot.sealed.values())
        if sealer is not None:
            await sealer.prepare_open(raws)
        opened: dict[str, AgentMemoryState] = {}
        try:
            for agent, raw in snapshot.sealed.items():
                if sealer is None:
                    raise DecodeError("key_missing", "no keyring is configured")
                if not is_sealed(raw):  # opened as it is, it would read as an empty state
                    raise DecodeError("invalid", f"the sealed state of {agent} is not sealed")
                try:
                    opened[agent] = decode_state(sealer.open(raw))
                except DecodeError as exc:
                    if exc.kind != FORGOTTEN:
                        raise
        except (DecodeError, ValueError) as exc:
            log.warning(
                "the snapshot of partition %d holds a state that does not open; folding the "
                "partition's whole log: %s",
                p,
                exc,
                extra={"partition": p},
            )
            continue
        out[p] = with_states(snapshot, opened)
    return out


async def _read_derived(
    bootstrap: str,
    topics: Topics,
    parts: list[int],
    snapshots: dict[int, PartitionSnapshot],
    sealer: RecordSealer | None,
) -> list[Logged]:
    """``memory.items`` and ``memory.lifecycle`` of ``parts`` from where their snapshots end
    (from the beginning without one)."""
    starts: dict[TopicPartition, int] = {}
    for p, snapshot in snapshots.items():
        for topic, offset in snapshot.tail_starts(
            topics.items, topics.lifecycle, topics.access
        ).items():
            if topic != topics.access:
                starts[TopicPartition(topic, p)] = offset
    return await read_records(
        bootstrap,
        (topics.items, topics.lifecycle),
        parts,
        decode_derived_record,
        sealer=sealer,
        starts=starts,
    )


def _unmatched(
    snapshots: dict[int, PartitionSnapshot], records: list[Logged], lifecycle: str
) -> set[int]:
    """Partitions whose snapshot's marker is not the first record read at its lifecycle end."""
    first: dict[int, Logged] = {}
    for where, record in records:
        if where.topic == lifecycle and where.partition in snapshots:
            first.setdefault(where.partition, (where, record))
    return {p for p, snapshot in snapshots.items() if not marker_matches(snapshot, first.get(p))}


async def recover_state(
    bootstrap: str,
    topics: Topics,
    partitions: Iterable[int],
    sealer: RecordSealer | None = None,
    *,
    applied: AppliedOffset | None = None,
) -> tuple[FoldedState, list[DerivedEvent]]:
    """The folded processor state of these partitions, and the derived events read after
    their snapshots (of wholly logged batches only), in causal order.

    Retrievals are folded after the derived events: they only count uses of summaries that
    exist, and their counts are order-free (see :func:`processors.lifecycle.on_retrieval`).
    Where markers rule, only those the markers name: the rest are derived in the batches that
    follow (:meth:`processors.state_fold.FoldedState.apply_retrieval`).
    """
    began = time.monotonic()
    parts = sorted(set(partitions))
    snapshots, snapshot_records = await usable_snapshots(bootstrap, topics, parts, applied)
    snapshots = await opened_snapshots(snapshots, sealer)
    logged = await _read_derived(bootstrap, topics, parts, snapshots, sealer)
    unmatched = _unmatched(snapshots, logged, topics.lifecycle)
    if unmatched:
        log.warning(
            "the snapshots of partitions %s do not match the log; folding their whole log",
            sorted(unmatched),
        )
        for p in unmatched:
            del snapshots[p]
        logged = [(w, r) for w, r in logged if w.partition not in unmatched]
        logged += await _read_derived(bootstrap, topics, sorted(unmatched), {}, sealer)
    folded, events = resume(snapshots, logged, topics.schedule)
    access_starts = {
        TopicPartition(topics.access, p): snapshot.tail_starts(
            topics.items, topics.lifecycle, topics.access
        )[topics.access]
        for p, snapshot in snapshots.items()
    }
    retrievals = await read_records(
        bootstrap, (topics.access,), parts, decode_retrieval, sealer=sealer, starts=access_starts
    )
    for position, retrieval in retrievals:
        folded.apply_retrieval(retrieval, position)
    log.info(
        "takeover read",
        extra={
            "partitions": parts,
            "from_snapshot": sorted(snapshots),
            "snapshot_records": snapshot_records,
            "records_read": len(logged) + len(retrievals),
            "agents": len(folded.states),
            "seconds": round(time.monotonic() - began, 3),
        },
    )
    return folded, events
