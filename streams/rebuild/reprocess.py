"""Reprocess: re-derive every memory from the raw agent events with a new configuration.

A replay (:mod:`streams.rebuild.replay`) rebuilds the projections from the *derived* log, so it
keeps the importance, routing, lifecycle decisions and embeddings the live run made. A
reprocess goes one step further back: it reads the *raw* input topics (the agent topics,
``memory.schedule`` and ``memory.access``) of every partition number from the beginning and
runs the same pure pipeline (:func:`processors.batch.process_batch`, through
:class:`streams.worker.pipeline.IngestPipeline`) with the configuration the operator sets now
(``ENGRAM_*``: importance profiles, thresholds, capacities, lifecycle rules, embedder,
summariser). Every derived event carries the new configuration version. Its output goes

- to a derived log of its own, ``{prefix}{version}.memory.items``, ``….memory.lifecycle`` and
  ``….memory.deadletter`` (same partition count; each derived event keeps its raw record's
  position as its source), so the new version stays auditable and can be rebuilt from the log;
- into a *new* projection version (``versions.create``), never the active one: a changed
  embedder changes the vector space, and two spaces must never meet in one collection.

It does not switch: the live workers keep deriving with the old configuration into the active
version and the old derived log. So that the new version can be served, the reprocess records
in the registry of versions (:class:`projections.versions.DerivedLog`) its derived topics, the
consumer group that continues them (``{prefix}{app_id}.{version}``) and the configuration
version, and commits for that group the offsets of the raw records it derived (the next one of
each raw partition it read). ``engram versions activate`` then moves the pointer; the running
workers, which write another derived log, exit and ask to be restarted with this configuration
(:mod:`streams.rebuild.projection_switch`), and a worker started with it writes this version's
derived log under that group, from the committed offsets on: every raw record is derived into
it once, either here or by the workers. Folding the state back from this log on takeover also
marks what was derived here, so a worker would skip it even without the commits.

Order. The live worker saw one partition number's raw topics interleaved in arrival order, which
the log does not keep. Per partition number a reprocess merges the topics by each record's Kafka
timestamp; records with equal timestamps go in topic order (agent topics, then the schedule,
then retrievals), and each topic's own records keep their offset order whatever their
timestamps (:func:`merge_in_time_order`). Producer clocks and batching can make this order
differ from the live one, so a tick or a retrieval may fall on the other side of an agent event
than it did live (processors/README.md, "The order of the input topics").

Memory: a reprocess holds one partition number's raw records at a time (and reads the next one
while the current one is processed).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from processors.batch import RawRecord, RecordKind
from processors.config import ProcessingConfig
from processors.embedding import Embedder
from processors.summarising import Summariser
from projections.versions import DerivedLog, OpenStores, ProjectionVersion, ProjectionVersions
from schemas.errors import EngramError
from schemas.topics import Topics
from streams.eventlog.derived_log import read_to_end
from streams.eventlog.kafka_clients import group_offsets_client, log_reader, record_producer
from streams.eventlog.topic_admin import ensure_topics
from streams.privacy.sealing import RecordSealer
from streams.worker.pipeline import IngestPipeline

log = logging.getLogger("engram.reprocess")

__all__ = [
    "DerivedLogTopics",
    "Reprocess",
    "ReprocessError",
    "ReprocessReport",
    "TimedRecord",
    "commit_offsets",
    "derived_topics_of",
    "group_of",
    "merge_in_time_order",
    "read_raw_partition",
]

TimedRecord = tuple[int, RawRecord]
"""A raw record with its Kafka timestamp (ms)."""

Advance = Callable[[int], None]
"""Called with the number of raw records just processed (drives a progress bar)."""

READ_TIMEOUT_S = 600.0


class ReprocessError(EngramError, RuntimeError):
    """A reprocess cannot start or finish; the message says why and what is left behind."""


@dataclass(frozen=True)
class DerivedLogTopics(Topics):
    """The live raw topics with the derived topics of one reprocessed version. Only the three
    derived ones are created here: the raw topics a reprocess reads are the live ones."""

    def all(self) -> tuple[str, ...]:
        return (self.items, self.lifecycle, self.deadletter)


def derived_topics_of(topics: Topics, version: str) -> DerivedLogTopics:
    """``{prefix}{version}.memory.items`` and so on, beside the live topics of ``prefix``."""
    return DerivedLogTopics(topics.prefix, f"{topics.prefix}{version}.")


def group_of(topics: Topics, app_id: str, version: str) -> str:
    """The consumer group (Faust app id) of the workers that continue ``version``'s log: the
    live group's name, ``{prefix}{app_id}``, with the version."""
    return f"{topics.prefix}{app_id}.{version}"


async def commit_offsets(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Commit ``offsets`` (the next record to process) for ``group``, which has no members yet:
    a worker that joins it starts there."""
    if not offsets:
        return
    consumer = group_offsets_client(bootstrap, group)
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
    finally:
        await consumer.stop()


def merge_in_time_order(streams: Sequence[Sequence[TimedRecord]]) -> list[RawRecord]:
    """One sequence from several topics' records of one partition number.

    By timestamp; on equal timestamps the earlier stream in ``streams`` first. A k-way merge,
    not a sort: each stream's records stay in their own (offset) order even where timestamps go
    backwards, because an agent's events on one topic must be derived in log order and a
    store's applied position only moves forward.
    """
    return [record for _, record in heapq.merge(*streams, key=lambda timed: timed[0])]


def _sources(topics: Topics) -> list[tuple[str, RecordKind]]:
    """The raw topics in tie-break order: agent events, then ticks, then retrievals."""
    return [
        *((topic, "agent") for topic in topics.agent_inputs),
        (topics.schedule, "tick"),
        (topics.access, "retrieval"),
    ]


async def read_raw_partition(
    bootstrap: str, topics: Topics, partition: int, *, timeout: float = READ_TIMEOUT_S
) -> list[RawRecord]:
    """Every raw record of one partition number, from the beginning to the end it had when
    reading started, merged by :func:`merge_in_time_order`."""
    sources = _sources(topics)
    per_topic: dict[str, list[TimedRecord]] = {topic: [] for topic, _ in sources}
    kind_of = dict(sources)

    def keep(tp: TopicPartition, r: ConsumerRecord[Any, Any]) -> None:
        raw = RawRecord(
            topic=tp.topic,
            partition=tp.partition,
            offset=r.offset,
            key=r.key,
            value=r.value,
            expected_type=topics.event_type_of(tp.topic),
            kind=kind_of[tp.topic],
            timestamp_ms=r.timestamp,
        )
        per_topic[tp.topic].append((r.timestamp, raw))

    tps = [TopicPartition(topic, partition) for topic, _ in sources]
    await read_to_end(bootstrap, tps, keep, timeout=timeout)
    return merge_in_time_order([per_topic[topic] for topic, _ in sources])


async def _record_counts(bootstrap: str, names: Sequence[str], partitions: int) -> int:
    """How many records these topics hold (a lower bound on Tansu, see :func:`at_end`)."""
    consumer = log_reader(bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(name, p) for name in names for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        return sum(max(0, ends[tp] - starts[tp]) for tp in tps)
    finally:
        await consumer.stop()


@dataclass
class ReprocessReport:
    version: ProjectionVersion
    config_version: str
    derived_topics: DerivedLogTopics
    group: str
    """The consumer group that continues the version's derived log."""
    records: int = 0
    """Raw records read and processed."""
    memories: int = 0
    lifecycle_events: int = 0
    dead_letters: int = 0
    seconds: float = 0.0

    @property
    def derived(self) -> int:
        return self.memories + self.lifecycle_events


@dataclass
class Reprocess:
    """One reprocess into a new version; see the module docstring."""

    bootstrap: str
    topics: Topics
    """The live topics: the raw ones are read, the derived ones are never written."""
    partitions: int
    versions: ProjectionVersions
    open_stores: OpenStores
    config: ProcessingConfig
    embedder: Embedder
    summariser: Summariser
    sealer: RecordSealer = field(default_factory=lambda: RecordSealer(None))
    """Opens the sealed raw records and seals the new derived log, with the agents' keys."""
    batch_size: int = 5_000
    producer_linger: float = 0.005
    app_id: str = "engram"
    """The live workers' app id (``ENGRAM_APP_ID``): the version's group is named after it."""

    @property
    def config_version(self) -> str:
        return self.config.version(self.embedder.id, self.summariser.id)

    async def run(
        self,
        *,
        name: str | None = None,
        total: Callable[[int], None] | None = None,
        advance: Advance | None = None,
    ) -> ReprocessReport:
        started = time.perf_counter()
        # The raw topics first: an unreachable broker or a wrong partition count fails here,
        # before a version is registered.
        try:
            await ensure_topics(self.bootstrap, self.topics, self.partitions)
        except KafkaError as exc:
            raise ReprocessError(f"cannot reach the broker at {self.bootstrap}: {exc}") from exc
        version = await self.versions.create(
            name, note=f"engram reprocess, configuration {self.config_version}"
        )
        assert version.name is not None
        derived_topics = derived_topics_of(self.topics, version.name)
        group = group_of(self.topics, self.app_id, version.name)
        try:
            await self._fresh_derived_log(derived_topics)
        except BaseException:
            await self.versions.forget(version.name)
            raise
        assert derived_topics.derived_prefix is not None
        await self.versions.set_derived_log(
            version.name,
            DerivedLog(derived_topics.derived_prefix, group, self.config_version, self.embedder.id),
        )
        report = ReprocessReport(version, self.config_version, derived_topics, group)
        sources = [topic for topic, _ in _sources(self.topics)]
        if total is not None:
            total(await _record_counts(self.bootstrap, sources, self.partitions))
        derived_upto = await self._derive_into(report, advance)
        # Only now: a version is "ready" once its group starts after everything derived here.
        await commit_offsets(self.bootstrap, group, derived_upto)
        await self.versions.set_state(version.name, "ready")
        report.seconds = time.perf_counter() - started
        return report

    async def _fresh_derived_log(self, derived_topics: DerivedLogTopics) -> None:
        """Create the version's derived topics; refuse ones that hold records already (a
        version name used before): appending would mix two configurations in one log."""
        await ensure_topics(self.bootstrap, derived_topics, self.partitions)
        held = await _record_counts(self.bootstrap, derived_topics.all(), self.partitions)
        if held:
            raise ReprocessError(
                f"the topics {derived_topics.items}, {derived_topics.lifecycle} and "
                f"{derived_topics.deadletter} hold {held:,} records already; "
                "reprocess into a version name not used before"
            )

    async def _derive_into(
        self, report: ReprocessReport, advance: Advance | None
    ) -> dict[TopicPartition, int]:
        """Derive every raw partition; returns the next offset of each raw partition read."""
        derived_upto: dict[TopicPartition, int] = {}
        working, episodic = await self.open_stores(report.version)
        producer = record_producer(self.bootstrap, linger=self.producer_linger)
        try:
            await producer.start()

            async def send(
                topic: str, key: bytes | None, value: bytes, partition: int | None
            ) -> Any:
                return await producer.send(topic, value, key=key, partition=partition)

            pipeline = IngestPipeline(
                config=self.config,
                embedder=self.embedder,
                topics=report.derived_topics,
                working=working,
                episodic=episodic,
                send=send,
                summariser=self.summariser,
                # A batch job: a store that is down ends the run instead of retrying forever.
                should_stop=lambda: True,
                sealer=self.sealer,
            )
            parts = list(range(self.partitions))
            reading = asyncio.ensure_future(self._read(parts[0]))
            try:
                for i in parts:
                    records = await reading
                    if i + 1 < len(parts):
                        reading = asyncio.ensure_future(self._read(parts[i + 1]))
                    for r in records:
                        tp = TopicPartition(r.topic, r.partition)
                        derived_upto[tp] = max(derived_upto.get(tp, 0), r.offset + 1)
                    for start in range(0, len(records), self.batch_size):
                        chunk = records[start : start + self.batch_size]
                        await pipeline.handle(chunk)
                        if advance is not None:
                            advance(len(chunk))
                    report.records += len(records)
                    log.info("reprocessed partition %d: %d raw records", i, len(records))
            finally:
                if not reading.done():
                    reading.cancel()
                elif not reading.cancelled():
                    reading.exception()  # retrieved: a failed prefetch is not logged again
            await producer.flush()
            stats = pipeline.stats
            report.memories = stats.memories
            report.lifecycle_events = stats.lifecycle_events
            report.dead_letters = stats.dead_letters
        finally:
            await producer.stop()
            await working.close()
            if episodic is not None:
                await episodic.close()
        return derived_upto

    async def _read(self, partition: int) -> list[RawRecord]:
        return await read_raw_partition(self.bootstrap, self.topics, partition)
