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

Batches and order. The rules depend on the order of an agent's records across its topics and on
where batches end, so a reprocess derives in the live worker's batches: per partition number it
reads the live derived log's markers (``memory.lifecycle`` of the live topics, whatever version
is active) and cuts the raw records where they say, each marker's batch being the records above
what earlier markers named (:func:`processors.batch_order.batches_at_markers`). Inside a batch
the pipeline derives in the canonical order, as the live worker did
(:func:`processors.batch_order.canonical_order`). With the live configuration it so derives the
live derived log again, event by event; with another, what that configuration would have
derived from the same batches. Records no live marker names (not derived live yet, or a log
written before markers) follow in batches of ``batch_size``. Partition numbers are independent:
an agent's records are all on its partition number.

Memory: a reprocess holds one partition number's raw records at a time (and reads the next one
while the current one is processed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from processors.batch import RawRecord, RecordKind
from processors.batch_order import LiveBatches, batches_at_markers, topic_rank
from processors.config import ProcessingConfig
from processors.embedding import Embedder
from processors.summarising import Summariser
from projections.versions import (
    DerivedLog,
    OpenStores,
    ProjectionVersion,
    ProjectionVersions,
    building,
)
from projections.working.agent_index import AgentIndex
from schemas.errors import EngramError
from schemas.topics import Topics
from streams.eventlog.derived_log import read_markers, read_to_end
from streams.eventlog.history import placement
from streams.eventlog.kafka_clients import group_offsets_client, log_reader, record_producer
from streams.eventlog.log_starts import log_starts
from streams.eventlog.topic_admin import TopicReplication, ensure_topics
from streams.privacy.sealing import RecordSealer
from streams.rebuild.projection_switch import member_id
from streams.worker.batch_send import aiokafka_batch_sender
from streams.worker.pipeline import IngestPipeline

log = logging.getLogger("engram.reprocess")

__all__ = [
    "DerivedLogTopics",
    "Reprocess",
    "ReprocessError",
    "ReprocessReport",
    "commit_offsets",
    "derived_topics_of",
    "group_of",
    "read_live_batches",
    "read_raw_partition",
]

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
    try:
        await consumer.start()
        consumer.assign(list(offsets))
        await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
    finally:
        await consumer.stop()


def _sources(topics: Topics) -> list[tuple[str, RecordKind]]:
    """The raw topics, with the kind of record each carries."""
    return [
        *((topic, "agent") for topic in topics.agent_inputs),
        (topics.schedule, "tick"),
        (topics.access, "retrieval"),
    ]


async def read_raw_partition(
    bootstrap: str, topics: Topics, partition: int, *, timeout: float = READ_TIMEOUT_S
) -> list[RawRecord]:
    """Every raw record of one partition number, from the beginning to the end it had when
    reading started: topic by topic, each in offset order."""
    sources = _sources(topics)
    per_topic: dict[str, list[RawRecord]] = {topic: [] for topic, _ in sources}
    kind_of = dict(sources)

    def keep(tp: TopicPartition, r: ConsumerRecord[Any, Any]) -> None:
        per_topic[tp.topic].append(
            RawRecord(
                topic=tp.topic,
                partition=tp.partition,
                offset=r.offset,
                key=r.key,
                value=r.value,
                expected_type=topics.event_type_of(tp.topic),
                kind=kind_of[tp.topic],
                timestamp_ms=r.timestamp,
            )
        )

    tps = [TopicPartition(topic, partition) for topic, _ in sources]
    await read_to_end(bootstrap, tps, keep, timeout=timeout)
    return [raw for topic, _ in sources for raw in per_topic[topic]]


async def read_live_batches(
    bootstrap: str,
    topics: Topics,
    partition: int,
    tail_size: int,
    *,
    timeout: float = READ_TIMEOUT_S,
) -> LiveBatches:
    """The raw records of one partition number in the live worker's batches (see the module
    docstring). The markers are read first: read after the records, they could name records
    written meanwhile and cut a batch short."""
    markers = (await read_markers(bootstrap, topics.lifecycle, [partition], timeout=timeout))[
        partition
    ]
    records = await read_raw_partition(bootstrap, topics, partition, timeout=timeout)
    return batches_at_markers(records, markers, topic_rank(topics), tail_size)


async def _record_counts(bootstrap: str, names: Sequence[str], partitions: int) -> int:
    """How many records these topics hold (a lower bound on Tansu, see :func:`at_end`)."""
    consumer = log_reader(bootstrap)
    try:
        await consumer.start()
        tps = [TopicPartition(name, p) for name in names for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        starts = await log_starts(consumer, tps)
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
    live_batches: int = 0
    """Batches cut where the live derived log's markers say."""
    unmarked: int = 0
    """Raw records no live marker names, processed in batches of ``batch_size``."""
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
    """Raw records per batch past the live derived log's last marker (before it, the live
    batches)."""
    producer_linger: float = 0.005
    app_id: str = "engram"
    """The live workers' app id (``ENGRAM_APP_ID``): the version's group is named after it."""
    replication: TopicReplication = field(default_factory=TopicReplication)
    """Of the version's derived topics (and of raw topics still missing)."""
    open_index: Callable[[ProjectionVersion], AgentIndex] | None = None
    """The agent index of the version, written as the live workers write it (none: its
    histories scan partitions)."""

    @property
    def config_version(self) -> str:
        return self.config.version(self.embedder.id, self.summariser.id)

    async def run(
        self,
        *,
        name: str | None = None,
        total: Callable[[int], None] | None = None,
        advance: Advance | None = None,
        begun: Callable[[ReprocessReport], None] | None = None,
    ) -> ReprocessReport:
        """``begun`` is given the report once the version and its derived log exist, so a
        run stopped half way can still say which version it left."""
        started = time.perf_counter()
        # The raw topics first: an unreachable broker or a wrong partition count fails here,
        # before a version is registered.
        try:
            await ensure_topics(
                self.bootstrap, self.topics, self.partitions, replication=self.replication
            )
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
        if begun is not None:
            begun(report)
        async with building(self.versions, "reprocess", version, member_id("reprocess")):
            sources = [topic for topic, _ in _sources(self.topics)]
            if total is not None:
                total(await _record_counts(self.bootstrap, sources, self.partitions))
            derived_upto = await self._derive_into(report, advance)
            # Only now: a version is "ready" once its group starts after everything derived.
            await commit_offsets(self.bootstrap, group, derived_upto)
            await self.versions.set_state(version.name, "ready")
        report.seconds = time.perf_counter() - started
        return report

    async def _fresh_derived_log(self, derived_topics: DerivedLogTopics) -> None:
        """Create the version's derived topics; refuse ones that hold records already (a
        version name used before): appending would mix two configurations in one log."""
        await ensure_topics(
            self.bootstrap, derived_topics, self.partitions, replication=self.replication
        )
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
        index = None if self.open_index is None else self.open_index(report.version)
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
                send_batch=aiokafka_batch_sender(lambda: producer),
                summariser=self.summariser,
                # A batch job: a store that is down ends the run instead of retrying forever.
                should_stop=lambda: True,
                sealer=self.sealer,
                # The version's derived log is new: the pipeline trusts its index from the
                # opening markers on, as a live worker does a log it opens empty.
                agent_index=index,
                placement=placement(self.partitions),
            )
            parts = list(range(self.partitions))
            reading = asyncio.ensure_future(self._read(parts[0]))
            try:
                for i in parts:
                    cut = await reading
                    if i + 1 < len(parts):
                        reading = asyncio.ensure_future(self._read(parts[i + 1]))
                    for batch in cut.batches:
                        for r in batch:
                            tp = TopicPartition(r.topic, r.partition)
                            derived_upto[tp] = max(derived_upto.get(tp, 0), r.offset + 1)
                        await pipeline.handle(batch)
                        if advance is not None:
                            advance(len(batch))
                    report.records += cut.records
                    report.live_batches += len(cut.marked)
                    report.unmarked += sum(len(batch) for batch in cut.unmarked)
                    log.info(
                        "reprocessed partition %d: %d raw records, %d live batches, "
                        "%d batches past the last marker",
                        i,
                        cut.records,
                        len(cut.marked),
                        len(cut.unmarked),
                    )
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
            if index is not None:
                await index.close()
        return derived_upto

    async def _read(self, partition: int) -> LiveBatches:
        return await read_live_batches(self.bootstrap, self.topics, partition, self.batch_size)
