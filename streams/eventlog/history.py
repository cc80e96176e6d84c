"""Reading one agent's history back from the log: its records on ``memory.items``,
``memory.lifecycle`` and ``memory.access``.

Every record of an agent is keyed by its id, and all topics share one partition count, so the
agent's records are on one partition number in every topic (the one the default partitioner
gives its key). Only that partition is read, from the beginning to the end
(:mod:`streams.eventlog.agent_partition`); the timeline is then built by
:func:`projections.history.build_timeline`. Of the derived events, only those of wholly logged
batches are the agent's history (:mod:`processors.batch_markers`): what an attempt
cut short by a crash logged never reached a projection, and was derived again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka.partitioner import DefaultPartitioner
from pydantic import TypeAdapter

from processors.batch_markers import Logged, logged_batches
from projections.history import (
    AgentHistory,
    LogPosition,
    PositionedEvent,
    build_timeline,
)
from projections.interfaces import ProjectionError
from projections.working.agent_index import AgentIndex, IndexedRecords
from schemas.codec import decode_derived_record, decode_retrieval
from schemas.envelope import AgentId
from schemas.memory_events import DerivedUpTo, SourcePosition
from schemas.topics import Topics
from streams.eventlog.agent_partition import (
    AgentRecord,
    IndexBeyondLogError,
    IndexedRead,
    read_agent_partition,
    read_before,
    read_indexed,
)
from streams.eventlog.derived_log import decode_opened
from streams.privacy.sealing import RecordSealer

log = logging.getLogger("engram.history")

_AGENT_ID: TypeAdapter[str] = TypeAdapter(AgentId)
_POLL_MS = 200


def partition_for(agent_id: str, partitions: int) -> int:
    """The partition the default Kafka partitioner (murmur2 of the key) gives an agent's
    records: the producers key by agent id and leave the choice to it."""
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    chosen: int = DefaultPartitioner()(agent_id.encode("utf-8"), list(range(partitions)), None)
    return chosen


def placement(partitions: int) -> Callable[[str], int]:
    """:func:`partition_for` of each agent id, remembered (a worker asks it for every event)."""
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    return functools.lru_cache(maxsize=65_536)(lambda agent_id: partition_for(agent_id, partitions))


async def read_agent_history(
    bootstrap: str,
    topics: Topics,
    agent_id: str,
    partitions: int,
    *,
    limit: int | None = None,
    timeout: float = 30.0,
    sealer: RecordSealer | None = None,
    index: AgentIndex | None = None,
) -> AgentHistory:
    """The agent's timeline, read from its partition of the three topics within ``timeout``.

    An agent with no records has an empty history. Raises ``TimeoutError`` when the read does
    not finish in time, :class:`LogUnavailableError` when the broker cannot be read or the
    topics do not have ``partitions`` partitions (the agent's records would then be looked for
    on the wrong partition), and pydantic's ``ValidationError`` for an invalid agent id.
    With ``index``, only the agent's own records are read where the index can say where they
    are (:mod:`projections.working.agent_index`), and for an agent whose index the cap
    trimmed the log before what it covers too (its counts cover the whole history); the whole
    partition otherwise.
    """
    agent_id = _AGENT_ID.validate_python(agent_id)
    partition = partition_for(agent_id, partitions)
    names = (topics.items, topics.lifecycle, topics.access)
    try:
        async with asyncio.timeout(timeout):
            read = await read_agent_events(
                bootstrap, topics, agent_id, partitions, sealer or RecordSealer(None), index
            )
    except TimeoutError:
        raise TimeoutError(
            f"reading the history of {agent_id} (partition {partition} of {', '.join(names)}) "
            f"from {bootstrap} took longer than {timeout:g} s"
        ) from None
    log.info(
        "history read",
        extra={"agent_id": agent_id, "records_read": read.read, "indexed": read.indexed},
    )
    return build_timeline(agent_id, read.events, limit=limit)


@dataclass(frozen=True)
class AgentEvents:
    """One agent's events read back from the log, and what reading them cost."""

    events: list[PositionedEvent]
    read: int
    """Records fetched, every agent's."""
    indexed: bool
    """Whether the agent index said where they were (else the partition was scanned)."""


async def read_agent_events(
    bootstrap: str,
    topics: Topics,
    agent_id: str,
    partitions: int,
    sealer: RecordSealer,
    index: AgentIndex | None = None,
) -> AgentEvents:
    """The agent's events of wholly logged batches and its retrievals, with their positions;
    the caller bounds the time."""
    partition = partition_for(agent_id, partitions)
    names = (topics.items, topics.lifecycle, topics.access)
    found = None if index is None else await _lookup(index, agent_id, partition, names)
    if found is None:
        scan = await read_agent_partition(
            bootstrap, names, partition, partitions, agent_id, sealer, poll_ms=_POLL_MS
        )
        return AgentEvents(_events(topics, agent_id, scan.records, set(), set()), scan.total, False)
    try:
        got = await read_indexed(
            bootstrap, partition, agent_id, sealer, found.offsets, found.ends, poll_ms=_POLL_MS
        )
    except IndexBeyondLogError as exc:
        log.warning(
            "the agent index names records the log does not hold; scanning the partition",
            extra={"agent_id": agent_id, "error": str(exc)},
        )
        scan = await read_agent_partition(
            bootstrap, names, partition, partitions, agent_id, sealer, poll_ms=_POLL_MS
        )
        return AgentEvents(_events(topics, agent_id, scan.records, set(), set()), scan.total, False)
    # Indexed records are of logged batches; what came after the index's end is checked.
    counted = {
        (r.where.topic, r.where.offset)
        for r in got.records
        if r.where.offset <= found.ends.get(r.where.topic, -1)
    }
    records, read = got.records, got.read
    if found.trimmed:
        before = await _before_index(bootstrap, topics, agent_id, partition, sealer, found)
        # Below a watermark only dropped places lie; a record read both ways counts once.
        earlier = [r for r in before.records if (r.where.topic, r.where.offset) not in counted]
        records, read = earlier + records, before.read + read
    return AgentEvents(_events(topics, agent_id, records, counted, {partition}), read, True)


async def _before_index(
    bootstrap: str,
    topics: Topics,
    agent_id: str,
    partition: int,
    sealer: RecordSealer,
    found: IndexedRecords,
) -> IndexedRead:
    """What the cap dropped from the agent's index, read from the log: its records below
    each topic's watermark, and the markers up to its oldest batch kept, which judge them
    (a history counts everything, so the part the index no longer covers is read too)."""
    log.info(
        "agent index trimmed, reading the log before it",
        extra={"agent_id": agent_id, "covers_from": found.covers_from},
    )
    names = (topics.items, topics.lifecycle, topics.access)
    stops = {topic: found.covers_from.get(topic, 0) for topic in names}
    stops[topics.lifecycle] = max(stops[topics.lifecycle], found.oldest_batch + 1)
    return await read_before(
        bootstrap, partition, agent_id, sealer, stops, found.covers_from, poll_ms=_POLL_MS
    )


async def _lookup(
    index: AgentIndex, agent_id: str, partition: int, names: tuple[str, ...]
) -> IndexedRecords | None:
    """The index's answer, or None (scan the partition) when it cannot be read: it only
    makes the read cheaper, the log answers without it."""
    try:
        return await index.lookup(agent_id, partition, names)
    except ProjectionError as exc:
        log.warning("agent index unavailable, scanning the partition: %s", exc)
        return None


def _events(
    topics: Topics,
    agent_id: str,
    records: list[AgentRecord],
    indexed: set[tuple[str, int]],
    marked: set[int],
) -> list[PositionedEvent]:
    """The agent's events of ``records``: those at ``indexed`` places count as they are, the
    rest as the batch markers among them say."""
    events: list[PositionedEvent] = []
    derived: list[Logged] = []
    known: list[Logged] = []
    for where, value, _ in records:
        # A forgotten agent's record does not open, and is left out: its erasure shows instead.
        if where.topic == topics.access:
            retrieval = decode_opened(where, value, decode_retrieval)
            if retrieval is not None and retrieval.agent_id == agent_id:
                events.append(PositionedEvent(retrieval, _at(where)))
            continue
        record = decode_opened(where, value, decode_derived_record)
        if record is not None:
            into = known if (where.topic, where.offset) in indexed else derived
            into.append((where, record))
    counted = {id(e) for e in logged_batches(derived, topics.schedule, marked).events}
    counted |= {id(record) for _, record in known}
    for where, record in sorted(known + derived, key=lambda logged: _place(logged[0])):
        if isinstance(record, DerivedUpTo) or id(record) not in counted:
            continue
        if record.agent_id == agent_id:
            events.append(PositionedEvent(record, _at(where)))
    return events


def _place(where: SourcePosition) -> tuple[str, int]:
    return (where.topic, where.offset)


def _at(where: SourcePosition) -> LogPosition:
    return LogPosition(topic=where.topic, partition=where.partition, offset=where.offset)
