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
import logging

from aiokafka.partitioner import DefaultPartitioner
from pydantic import TypeAdapter

from processors.batch_markers import Logged, logged_batches
from projections.history import (
    AgentHistory,
    LogPosition,
    PositionedEvent,
    build_timeline,
)
from schemas.codec import decode_derived_record, decode_retrieval
from schemas.envelope import AgentId
from schemas.memory_events import DerivedUpTo, SourcePosition
from schemas.topics import Topics
from streams.eventlog.agent_partition import read_agent_partition
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


async def read_agent_history(
    bootstrap: str,
    topics: Topics,
    agent_id: str,
    partitions: int,
    *,
    limit: int | None = None,
    timeout: float = 30.0,
    sealer: RecordSealer | None = None,
) -> AgentHistory:
    """The agent's timeline, read from its partition of the three topics within ``timeout``.

    An agent with no records has an empty history. Raises ``TimeoutError`` when the read does
    not finish in time, :class:`LogUnavailableError` when the broker cannot be read or the
    topics do not have ``partitions`` partitions (the agent's records would then be looked for
    on the wrong partition), and pydantic's ``ValidationError`` for an invalid agent id.
    """
    agent_id = _AGENT_ID.validate_python(agent_id)
    partition = partition_for(agent_id, partitions)
    names = (topics.items, topics.lifecycle, topics.access)
    try:
        async with asyncio.timeout(timeout):
            events = await _read_agent(
                bootstrap, topics, partition, agent_id, partitions, sealer or RecordSealer(None)
            )
    except TimeoutError:
        raise TimeoutError(
            f"reading the history of {agent_id} (partition {partition} of {', '.join(names)}) "
            f"from {bootstrap} took longer than {timeout:g} s"
        ) from None
    return build_timeline(agent_id, events, limit=limit)


async def _read_agent(
    bootstrap: str,
    topics: Topics,
    partition: int,
    agent_id: str,
    partitions: int,
    sealer: RecordSealer,
) -> list[PositionedEvent]:
    read = await read_agent_partition(
        bootstrap,
        (topics.items, topics.lifecycle, topics.access),
        partition,
        partitions,
        agent_id,
        sealer,
        poll_ms=_POLL_MS,
    )
    events: list[PositionedEvent] = []
    derived: list[Logged] = []
    for where, value, _ in read.records:
        # A forgotten agent's record does not open, and is left out: its erasure shows instead.
        if where.topic == topics.access:
            retrieval = decode_opened(where, value, decode_retrieval)
            if retrieval is not None and retrieval.agent_id == agent_id:
                events.append(PositionedEvent(retrieval, _at(where)))
            continue
        record = decode_opened(where, value, decode_derived_record)
        if record is not None:
            derived.append((where, record))
    counted = {id(e) for e in logged_batches(derived, topics.schedule).events}
    for where, record in derived:
        if isinstance(record, DerivedUpTo) or id(record) not in counted:
            continue
        if record.agent_id == agent_id:
            events.append(PositionedEvent(record, _at(where)))
    return events


def _at(where: SourcePosition) -> LogPosition:
    return LogPosition(topic=where.topic, partition=where.partition, offset=where.offset)
