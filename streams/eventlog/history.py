"""Reading one agent's history back from the log: its records on ``memory.items``,
``memory.lifecycle`` and ``memory.access``.

Every record of an agent is keyed by its id, and all topics share one partition count, so the
agent's records are on one partition number in every topic (the one the default partitioner
gives its key). Only that partition is read, from the beginning to the end; the timeline is
then built by :func:`projections.history.build_timeline`.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner
from pydantic import TypeAdapter

from projections.history import (
    AgentHistory,
    LoggedEvent,
    LogPosition,
    LogUnavailableError,
    PositionedEvent,
    build_timeline,
)
from schemas.codec import DecodeError, decode_derived_record, decode_retrieval
from schemas.envelope import AgentId
from schemas.memory_events import DerivedUpTo
from schemas.topics import Topics
from streams.eventlog.derived_log import at_end, log_reader
from streams.privacy.sealing import FORGOTTEN, RecordSealer

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
    consumer = log_reader(bootstrap)
    try:
        await consumer.start()
        existing = await consumer.topics()
        tps = []
        for name in (topics.items, topics.lifecycle, topics.access):
            if name not in existing:
                continue  # nothing was ever written there: an empty history, not an error
            count = len(consumer.partitions_for_topic(name) or ())
            if count != partitions:
                raise LogUnavailableError(
                    f"{name} has {count} partitions, not {partitions} as configured "
                    "(ENGRAM_PARTITIONS): the agent's records cannot be located"
                )
            tps.append(TopicPartition(name, partition))
        if not tps:
            return []
        return await _read_to_end(consumer, tps, agent_id, topics.access, sealer)
    except KafkaError as exc:
        raise LogUnavailableError(f"cannot read the event log at {bootstrap}: {exc}") from exc
    finally:
        await consumer.stop()


async def _read_to_end(
    consumer: AIOKafkaConsumer,
    tps: list[TopicPartition],
    agent_id: str,
    access: str,
    sealer: RecordSealer,
) -> list[PositionedEvent]:
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    ends = await consumer.end_offsets(tps)
    key = agent_id.encode("utf-8")
    events: list[PositionedEvent] = []
    found: list[tuple[TopicPartition, int, bytes]] = []
    remaining = {tp for tp in tps if ends[tp] > 0}  # an end of 0 is exact: empty
    while remaining:
        batch = await consumer.getmany(*remaining, timeout_ms=_POLL_MS, max_records=50_000)
        for tp, records in batch.items():
            for record in records:
                # Other agents share the partition; their key tells without decoding.
                if record.value is None or (record.key is not None and record.key != key):
                    continue
                found.append((tp, record.offset, record.value))
        for tp in list(remaining):
            if at_end(await consumer.position(tp), ends[tp], bool(batch.get(tp))):
                remaining.discard(tp)
    opened = await sealer.open_all([value for _, _, value in found])
    for (tp, offset, _), value in zip(found, opened, strict=True):
        if value is None or (isinstance(value, DecodeError) and value.kind == FORGOTTEN):
            continue  # a forgotten agent's: its erasure shows instead
        event = _decode(tp, offset, value, access=tp.topic == access)
        if event is not None and event.agent_id == agent_id:
            position = LogPosition(topic=tp.topic, partition=tp.partition, offset=offset)
            events.append(PositionedEvent(event, position))
    return events


def _decode(
    tp: TopicPartition, offset: int, raw: bytes | DecodeError, *, access: bool
) -> LoggedEvent | None:
    """A record that cannot be read is logged and left out: one bad record must not hide the
    rest of an agent's history."""
    try:
        if isinstance(raw, DecodeError):
            raise raw
        if access:
            return decode_retrieval(raw)
        record = decode_derived_record(raw)
        # A batch's "logged up to" marker is no agent's: not part of any history.
        return None if isinstance(record, DerivedUpTo) else record
    except DecodeError as exc:
        log.error("unreadable record %s[%d]@%d: %s", tp.topic, tp.partition, offset, exc)
        return None
