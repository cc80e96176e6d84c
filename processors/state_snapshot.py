"""Snapshots of a partition's folded state, so a takeover reads a bounded tail of the log.

A worker that takes a partition over folds its state from the derived log
(:mod:`processors.state_fold`). Without more, that read grows with the whole history. A
snapshot is that fold written down at the end of a batch, with the log positions it covers:
the worker's per-agent states of one partition number, the source offsets derived and marked
(``derived_upto``, ``logged_upto``), and the derived-log offsets it includes (``memory.items``
and ``memory.lifecycle``, the latter being the offset of the batch's own marker, named by its
event id). A takeover starts from the latest snapshot and folds only the log after it
(:func:`resume`), which gives the state the whole fold gives (a property test checks it).

A snapshot is derived data, never the truth: one that is missing, does not decode, has an
unknown ``schema_version`` or does not match the log (its marker is not where it says) is
ignored, and the partition is folded from the beginning. Losing snapshots costs time, never
correctness.

Records: a snapshot of one partition is zero or more *chunks* (agents' states, each record kept
well under the broker's message size: one agent's state past a chunk goes in pieces, a chunk
each) and then one *manifest* naming the chunks (their
snapshot id, count and first offset) and the positions. Everything is keyed by partition
number and written to that partition of the snapshot topic, so the partition's last record is
the latest manifest whatever the broker compacts (a reader never depends on compaction).

A state holds what the agent's memories say (working memory's content, summaries, facts), so
where the log is sealed the snapshot is too: each agent's state is sealed with the agent's key
(``sealed`` of a chunk, beside the plain ``agents``), and forgetting the agent, which deletes
its keys, leaves it unreadable in every snapshot, as in the log. A reader opens the sealed
states before it resumes (:func:`with_states`); a state sealed with a forgotten key is left
out, since the erasure that forgot the agent follows in the log after the snapshot. A state
with nothing in it (an agent just forgotten, its ``seq`` aside) stays plain: sealing it would
make the agent a key again. A reader from before ``sealed`` refuses such a chunk, and folds
the log instead.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from processors.batch_markers import Logged, SourceKey, logged_batches, marker_upto
from processors.emission_order import causal_order
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from schemas.memory_events import DerivedEvent, DerivedUpTo, SourcePosition
from schemas.sealed import is_sealed

SNAPSHOT_SCHEMA_VERSION = 1
"""Readers ignore a snapshot of any other version (and fold the log from the start)."""

CHUNK_BYTES = 256 * 1024
"""Agents' states are packed into chunk records of about this size: well under the broker's
default message size (1 MB), whatever the number of agents in a partition."""

_STATE: TypeAdapter[AgentMemoryState] = TypeAdapter(AgentMemoryState)


class StatePiece(BaseModel):
    """Piece ``at`` of the ``of`` pieces of one agent's encoded state (base64 ``data``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: int = Field(ge=0)
    of: int = Field(ge=1)
    data: str


class SnapshotChunk(BaseModel):
    """Some agents' states of one snapshot."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["chunk"] = "chunk"
    schema_version: int
    snapshot_id: str
    partition: int
    index: int
    agents: dict[str, AgentMemoryState]
    sealed: dict[str, dict[str, str | int]] = {}
    """States sealed with their agent's key, by agent: the sealed records, opened by the
    reader (:func:`with_states`)."""
    pieces: dict[str, StatePiece] = {}
    """Part of a state too large for one chunk (plain or sealed), by agent."""


class SnapshotManifest(BaseModel):
    """The last record of a snapshot: which chunks it is made of and what log it covers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["manifest"] = "manifest"
    schema_version: int
    snapshot_id: str
    partition: int
    chunks: int
    first_offset: int
    """Offset of chunk 0 in the snapshot topic's partition (-1 without chunks)."""
    derived_upto: tuple[SourcePosition, ...]
    logged_upto: tuple[SourcePosition, ...]
    log_ends: tuple[SourcePosition, ...]
    """The highest offset of ``memory.items`` and ``memory.lifecycle`` the state includes."""
    marker: str
    """Event id of the marker at the ``memory.lifecycle`` end: the reader checks it is there."""
    written_at: datetime


_RECORD: TypeAdapter[SnapshotChunk | SnapshotManifest] = TypeAdapter(
    SnapshotChunk | SnapshotManifest
)


@dataclass
class PartitionSnapshot:
    """One partition number's folded state and the positions it covers."""

    partition: int
    states: dict[str, AgentMemoryState]
    derived_upto: dict[SourceKey, int]
    logged_upto: dict[SourceKey, int]
    log_ends: dict[SourceKey, int]
    """Per derived topic of this partition number, the highest offset the state includes."""
    marker: str
    """Event id of the marker at the ``memory.lifecycle`` end."""
    sealed: dict[str, bytes] = field(default_factory=dict)
    """Read back: the agents' states still sealed, to be opened before resuming."""

    def tail_starts(self, items: str, lifecycle: str, access: str) -> dict[str, int]:
        """Per topic, the offset of this partition the fold goes on reading from: just after
        what the snapshot includes of ``memory.items`` and ``memory.access``, and at the
        snapshot's own marker on ``memory.lifecycle``, which the reader checks is the one
        named (:func:`marker_matches`)."""
        p = self.partition
        return {
            items: self.log_ends.get((items, p), -1) + 1,
            lifecycle: self.log_ends.get((lifecycle, p), 0),
            access: self.logged_upto.get((access, p), -1) + 1,
        }


@dataclass
class CoveredLog:
    """Per partition number, what the derived log holds of a worker's batches so far: kept
    from the batches' markers alone (no per-event cost), for the next snapshot."""

    log_ends: dict[SourceKey, int] = field(default_factory=dict)
    logged_upto: dict[SourceKey, int] = field(default_factory=dict)
    marker: dict[int, str] = field(default_factory=dict)
    """Per partition number, the event id of its last marker since the takeover: only a
    partition with one can be snapshot (a reader checks it)."""

    def took_over(self, folded: FoldedState, partitions: Iterable[int]) -> None:
        """Start from what the takeover read (positions of ``folded`` of ``partitions``)."""
        wanted = set(partitions)
        self.release(wanted)
        for source, into in (
            (folded.log_ends, self.log_ends),
            (folded.logged_upto, self.logged_upto),
        ):
            into.update({k: v for k, v in source.items() if k[1] in wanted})

    def note(
        self, markers: Sequence[DerivedUpTo], landed: Sequence[object], items: str, lifecycle: str
    ) -> set[int]:
        """Take note of a batch's markers, logged where ``landed`` (producer metadata) says;
        returns their partition numbers."""
        noted: set[int] = set()
        for marker, metadata in zip(markers, landed, strict=True):
            offset = getattr(metadata, "offset", None)
            if not isinstance(offset, int) or offset < 0:
                continue
            p = marker.partition
            ends = self.log_ends
            ends[(lifecycle, p)] = max(ends.get((lifecycle, p), -1), offset)
            if marker.items is not None:
                ends[(items, p)] = max(ends.get((items, p), -1), marker.items.last)
            for key, upto in marker_upto(marker).items():
                if self.logged_upto.get(key, -1) < upto:
                    self.logged_upto[key] = upto
            self.marker[p] = marker.event_id
            noted.add(p)
        return noted

    def release(self, partitions: set[int]) -> None:
        for held in (self.log_ends, self.logged_upto):
            for key in [k for k in held if k[1] in partitions]:
                del held[key]
        for p in partitions:
            self.marker.pop(p, None)


def partition_snapshot(
    folded: FoldedState, partition_of: Mapping[str, int], covered: CoveredLog, partition: int
) -> PartitionSnapshot | None:
    """The snapshot of ``partition`` as the worker holds it after a batch (None before its
    first marker since the takeover: nothing to check a snapshot against yet)."""
    marker = covered.marker.get(partition)
    if marker is None:
        return None

    def of(held: Mapping[SourceKey, int]) -> dict[SourceKey, int]:
        return {k: v for k, v in held.items() if k[1] == partition}

    return PartitionSnapshot(
        partition=partition,
        states={
            agent: state
            for agent, state in folded.states.items()
            if partition_of.get(agent) == partition
        },
        derived_upto=of(folded.derived_upto),
        logged_upto=of(covered.logged_upto),
        log_ends=of(covered.log_ends),
        marker=marker,
    )


Seal = Callable[[str, bytes], bytes | None]
"""An agent's state sealed with its key (a sealed record, JSON), or None to keep it plain."""

EMPTY_STATE = AgentMemoryState()


def holds_nothing(state: AgentMemoryState) -> bool:
    """Whether a state says nothing of the agent's memories (a forgotten agent's: its ``seq``
    goes on, nothing else is kept)."""
    return state == EMPTY_STATE or replace(state, next_seq=0) == EMPTY_STATE


def chunk_records(
    snapshot: PartitionSnapshot,
    snapshot_id: str,
    chunk_bytes: int = CHUNK_BYTES,
    seal: Seal | None = None,
) -> list[bytes]:
    """The agents' states as chunk records of about ``chunk_bytes`` each, each sealed by
    ``seal`` unless it is empty."""
    return list(iter_chunk_records(snapshot, snapshot_id, chunk_bytes, seal))


def iter_chunk_records(
    snapshot: PartitionSnapshot,
    snapshot_id: str,
    chunk_bytes: int = CHUNK_BYTES,
    seal: Seal | None = None,
) -> Iterator[bytes]:
    """:func:`chunk_records` one at a time, each encoded only when asked for: a writer that
    runs beside the batches hands the loop back between chunks."""
    pending: list[bytes] = []
    sealed: list[bytes] = []
    size = index = 0

    def chunk(piece: bytes = b"") -> bytes:
        head = json.dumps(
            {
                "kind": "chunk",
                "schema_version": SNAPSHOT_SCHEMA_VERSION,
                "snapshot_id": snapshot_id,
                "partition": snapshot.partition,
                "index": index,
            }
        ).encode()
        body = head[:-1] + b', "agents": {' + b",".join(pending) + b"}"
        if sealed:
            body += b', "sealed": {' + b",".join(sealed) + b"}"
        if piece:
            body += b', "pieces": {' + piece + b"}"
        return body + b"}"

    for agent, state in sorted(snapshot.states.items()):
        encoded = _STATE.dump_json(state)
        closed = None if seal is None or holds_nothing(state) else seal(agent, encoded)
        value = encoded if closed is None else closed
        name = json.dumps(agent).encode()
        if len(value) > chunk_bytes:
            # One agent's state past a chunk (an assistant's long turns): in pieces, a chunk
            # each, so no record outgrows the broker's message size.
            if pending or sealed:
                yield chunk()
                pending, sealed, size, index = [], [], 0, index + 1
            count = -(-len(value) // chunk_bytes)
            for at in range(count):
                part = base64.b64encode(value[at * chunk_bytes : (at + 1) * chunk_bytes])
                yield chunk(name + b':{"at": %d, "of": %d, "data": "%s"}' % (at, count, part))
                index += 1
            continue
        entry = name + b":" + value
        (pending if closed is None else sealed).append(entry)
        size += len(entry)
        if size >= chunk_bytes:
            yield chunk()
            pending, sealed, size, index = [], [], 0, index + 1
    if pending or sealed:
        yield chunk()


def _positions(held: Mapping[SourceKey, int]) -> tuple[SourcePosition, ...]:
    return tuple(
        SourcePosition(topic=topic, partition=partition, offset=offset)
        for (topic, partition), offset in sorted(held.items())
    )


def manifest_record(
    snapshot: PartitionSnapshot, snapshot_id: str, chunks: int, first_offset: int, at: datetime
) -> bytes:
    """The manifest, written once every chunk is logged (``first_offset``: chunk 0's)."""
    return (
        SnapshotManifest(
            schema_version=SNAPSHOT_SCHEMA_VERSION,
            snapshot_id=snapshot_id,
            partition=snapshot.partition,
            chunks=chunks,
            first_offset=first_offset,
            derived_upto=_positions(snapshot.derived_upto),
            logged_upto=_positions(snapshot.logged_upto),
            log_ends=_positions(snapshot.log_ends),
            marker=snapshot.marker,
            written_at=at,
        )
        .model_dump_json()
        .encode()
    )


def decode_snapshot_record(value: bytes | None) -> SnapshotChunk | SnapshotManifest | None:
    """A snapshot record, or None for one that does not decode or has another schema version
    (a reader then folds the log from the start)."""
    if value is None:
        return None
    try:
        record = _RECORD.validate_json(value)
    except (ValidationError, ValueError):
        return None
    return record if record.schema_version == SNAPSHOT_SCHEMA_VERSION else None


def assemble(
    manifest: SnapshotManifest, records: Iterable[SnapshotChunk | SnapshotManifest | None]
) -> PartitionSnapshot | None:
    """The snapshot a manifest names, from the records read from its ``first_offset`` on;
    None unless every chunk of it is there (exactly once each)."""
    states: dict[str, AgentMemoryState] = {}
    sealed: dict[str, bytes] = {}
    pieces: dict[str, dict[int, StatePiece]] = {}
    seen: set[int] = set()
    for record in records:
        if (
            isinstance(record, SnapshotChunk)
            and record.snapshot_id == manifest.snapshot_id
            and record.partition == manifest.partition
            and record.index not in seen
        ):
            seen.add(record.index)
            states.update(record.agents)
            # Compact, in the order read: a sealed record's bytes begin as a sealed record's.
            sealed.update((a, orjson.dumps(r)) for a, r in record.sealed.items())
            for agent, piece in record.pieces.items():
                pieces.setdefault(agent, {})[piece.at] = piece
    if seen != set(range(manifest.chunks)):
        return None
    for agent, parts in pieces.items():
        count = next(iter(parts.values())).of
        if set(parts) != set(range(count)) or any(p.of != count for p in parts.values()):
            return None
        try:
            value = b"".join(base64.b64decode(parts[at].data, validate=True) for at in range(count))
            if is_sealed(value):
                sealed[agent] = value
            else:
                states[agent] = decode_state(value)
        except ValueError:
            return None

    def held(positions: Iterable[SourcePosition]) -> dict[SourceKey, int]:
        return {(p.topic, p.partition): p.offset for p in positions}

    return PartitionSnapshot(
        partition=manifest.partition,
        states=states,
        derived_upto=held(manifest.derived_upto),
        logged_upto=held(manifest.logged_upto),
        log_ends=held(manifest.log_ends),
        marker=manifest.marker,
        sealed=sealed,
    )


def decode_state(encoded: bytes) -> AgentMemoryState:
    """An agent's state as a chunk holds it (opened, if it was sealed); ValueError if it is
    not one."""
    try:
        return _STATE.validate_json(encoded)
    except ValidationError as exc:
        raise ValueError(f"not an agent's state: {exc.error_count()} errors") from None


def with_states(
    snapshot: PartitionSnapshot, opened: Mapping[str, AgentMemoryState]
) -> PartitionSnapshot:
    """The snapshot with its sealed states replaced by ``opened`` (those the reader could
    open; one it left out was of an agent forgotten since)."""
    states = {**snapshot.states, **opened}
    return replace(snapshot, states=states, sealed={})


def marker_matches(snapshot: PartitionSnapshot, first: Logged | None) -> bool:
    """Whether the first record read at the snapshot's lifecycle end is the marker it names:
    else the snapshot describes another log (the topic outlived a log it was written from),
    and the partition is folded from the start."""
    if first is None:
        return False
    where, record = first
    return (
        isinstance(record, DerivedUpTo)
        and record.event_id == snapshot.marker
        and (snapshot.log_ends.get((where.topic, where.partition)) == where.offset)
    )


def _raise(into: dict[SourceKey, int], held: Mapping[SourceKey, int]) -> None:
    for key, offset in held.items():
        if into.get(key, -1) < offset:
            into[key] = offset


def _pending_held(state: AgentMemoryState) -> AgentMemoryState:
    """The state with only the pending L1s it still holds as summaries: a pruned L1 leaves its
    pending chapter (:func:`processors.lifecycle.prune`), so the pending ones are always among
    the summaries, except in a snapshot written before that rule, which kept them; such a
    state folds on as the whole log folds."""
    if not state.pending_l1:
        return state
    held = {s.memory_id for s in state.summaries}
    pending = tuple(p for p in state.pending_l1 if p.memory_id in held)
    return state if len(pending) == len(state.pending_l1) else replace(state, pending_l1=pending)


def resume(
    snapshots: Mapping[int, PartitionSnapshot],
    tail: Iterable[Logged],
    schedule_topic: str | None = None,
) -> tuple[FoldedState, list[DerivedEvent]]:
    """The state of the snapshots' partitions folded on with the derived log after them (and
    of other partitions, whose records ``tail`` holds from the start, folded as
    :meth:`FoldedState.from_log` does), and the events of ``tail`` that count, in causal order.

    A snapshot's partition is ruled by markers (it is only written after a marker), so what
    the tail holds beyond its last marker is a batch in flight or a leftover, and waits.
    Retrievals of ``memory.access`` after the snapshot's are folded by the caller
    (:meth:`FoldedState.apply_retrieval`), as after a whole fold.
    """
    logged = logged_batches(tail, schedule_topic, marked=snapshots.keys())
    events = causal_order(logged.events)
    folded = FoldedState(schedule_topic=schedule_topic, marked=set(logged.marked))
    for snapshot in snapshots.values():
        if snapshot.sealed:
            raise ValueError(f"the snapshot of partition {snapshot.partition} is still sealed")
        folded.states.update({a: _pending_held(s) for a, s in snapshot.states.items()})
        folded.partition_of.update(dict.fromkeys(snapshot.states, snapshot.partition))
        _raise(folded.derived_upto, snapshot.derived_upto)
        _raise(folded.logged_upto, snapshot.logged_upto)
        _raise(folded.log_ends, snapshot.log_ends)
    _raise(folded.logged_upto, logged.upto)
    _raise(folded.log_ends, logged.ends)
    _raise(folded.derived_upto, folded.logged_upto)
    return folded.apply_all(events), events
