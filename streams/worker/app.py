"""The Faust application: a thin shell that feeds batches of raw records to the pipeline.

Built by ``create_processor_app`` (no global app at import time). One agent reads all three
agent topics as raw bytes, so each event costs one Faust hop (~200 us of CPU per hop on the dev
machines).
Per-agent state is not a Faust table: before the first record of a partition is processed, the
pipeline folds that partition's state back from the derived topics, which also lets it skip
records it had already derived. Revocation (Faust's signal) makes it fold again on return.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence, Set
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, NoReturn

import faust
from faust.types import TP, EventT, Message, StreamT

from processors.batch import RawRecord, RecordKind
from processors.batch_markers import SourceKey
from processors.state_fold import FoldedState
from schemas.memory_events import DerivedEvent
from schemas.topics import Topics
from streams.eventlog.first_record import first_record_at
from streams.eventlog.kafka_security import KafkaSecurity, faust_credentials
from streams.eventlog.snapshot_log import recover_state
from streams.eventlog.topic_admin import TopicReplication
from streams.settings import EngramSettings
from streams.worker.batch_send import aiokafka_batch_sender
from streams.worker.faust_batches import take_batches
from streams.worker.faust_tuning import TunedFaustApp
from streams.worker.ownership import RebalanceTimeoutError
from streams.worker.pipeline import IngestPipeline, SendFn
from streams.worker.scheduler import publish_ticks, ticks_for
from streams.worker.snapshotting import Snapshotter
from streams.worker.source_gaps import RememberedAnswers
from streams.worker.timings import WorkerTimings

log = logging.getLogger("engram.processors")

PipelineFactory = Callable[..., IngestPipeline]
RecordHeaders = Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None
BatchTrace = Callable[[Iterable[RecordHeaders]], AbstractContextManager[None]]
"""Around a batch, given its records' headers (:meth:`streams.runtime.tracing.Tracing.batch`)."""


@dataclass
class ProcessorApp:
    app: faust.App
    topics: Topics
    bind: Callable[[PipelineFactory], IngestPipeline]
    """Give the app its pipeline (built with the shell's ``send`` and ``should_stop``)."""
    timings: WorkerTimings
    """Batch and takeover durations, for the metrics."""


def create_processor_app(
    settings: EngramSettings,
    bootstrap: str,
    *,
    topics: Topics | None = None,
    app_id: str | None = None,
    trace_batch: BatchTrace | None = None,
) -> ProcessorApp:
    """``topics`` and ``app_id`` (the consumer group) default to the live derived log's; a
    reprocessed projection version has its own (:class:`projections.versions.DerivedLog`).
    ``trace_batch``: a span around each batch (None: no tracing, nothing per batch)."""
    topics = topics or Topics(settings.topic_prefix)
    app_id = app_id or f"{settings.topic_prefix}{settings.app_id}"
    app = _faust_app(settings, bootstrap, app_id)
    holder: dict[str, IngestPipeline] = {}
    timings = WorkerTimings()
    _add_ingest_agent(app, settings, topics, holder, timings, trace_batch)
    send = _sender(app)
    if settings.schedule_interval > 0:
        _add_schedule_timer(app, settings, topics, send)
    _release_on_revocation(app, settings, topics, holder)

    def bind(make_pipeline: PipelineFactory) -> IngestPipeline:

        async def applied(topic: str, partition: int) -> int:
            marks = [await store.applied_offset(topic, partition) for store in pipeline.stores]
            return min(-1 if m is None else m for m in marks)

        async def recover(partitions: set[int]) -> tuple[FoldedState, list[DerivedEvent]]:
            started = time.perf_counter()
            recovered = await recover_state(
                bootstrap, topics, partitions, pipeline.sealer, applied=applied
            )
            timings.takeover(time.perf_counter() - started, len(recovered[1]))
            return recovered

        snapshots = (
            Snapshotter(
                send,
                topics,
                every_records=settings.snapshot_every_records,
                every_seconds=settings.snapshot_every_seconds,
            )
            if settings.snapshots
            else None
        )
        pipeline = make_pipeline(
            send=send,
            send_batch=aiokafka_batch_sender(_producer_of(app)),
            recover=recover,
            should_stop=lambda: app.should_stop,
            snapshots=snapshots,
            first_record_at=RememberedAnswers(partial(first_record_at, bootstrap)),
            # A rebalance: every member's revocation (each waits for its batch in flight, at
            # most a session timeout), the join (Tansu waits half a session), the sync.
            settle_within=4 * settings.session_timeout,
        )
        if snapshots is not None:
            snapshots.before_write = pipeline.sync_projections
            snapshots.sealer = pipeline.sealer
        holder["pipeline"] = pipeline
        app.commit_ceiling = partial(commit_ceiling, pipeline, frozenset(_inputs(topics)))
        return pipeline

    return ProcessorApp(app=app, topics=topics, bind=bind, timings=timings)


def commit_ceiling(
    pipeline: IngestPipeline, inputs: frozenset[str], topic: str, partition: int
) -> int | None:
    """The highest offset the consumer may commit for an input partition: the one after the
    last record the pipeline derived there (-1, none, for a partition it holds no mark of:
    not taken over yet, or released). Other topics are not capped."""
    if topic not in inputs:
        return None
    upto = pipeline.folded.derived_upto.get((topic, partition))
    return -1 if upto is None else upto + 1


def _faust_app(settings: EngramSettings, bootstrap: str, app_id: str) -> TunedFaustApp:
    (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
    replication = TopicReplication.from_settings(settings)
    return TunedFaustApp(
        app_id,
        fetch_max_wait=settings.fetch_max_wait,
        broker=f"kafka://{bootstrap}",
        broker_credentials=faust_credentials(KafkaSecurity.from_settings(settings)),
        store="memory://",
        topic_partitions=settings.partitions,
        topic_replication_factor=replication.factor,
        topic_configs=replication.configs(),
        producer_linger=settings.producer_linger,
        producer_max_batch_size=1 << 20,
        producer_request_timeout=settings.delivery_timeout,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=max(settings.session_timeout / 6, 0.5),
        broker_rebalance_timeout=max(settings.session_timeout * 2, 10.0),
        consumer_auto_offset_reset="earliest",
        # Static membership when an id is given: a restart within the session timeout keeps
        # its partitions without a rebalance of the group.
        consumer_group_instance_id=settings.instance_id,
        stream_wait_empty=False,
        web_enabled=False,
        datadir=str(settings.data_dir / "faust" / app_id),
    )


def _inputs(topics: Topics) -> tuple[str, ...]:
    """Every topic the worker consumes: the agent topics, the schedule and the retrievals."""
    return (*topics.agent_inputs, topics.schedule, topics.access)


def _add_ingest_agent(
    app: faust.App,
    settings: EngramSettings,
    topics: Topics,
    holder: dict[str, IngestPipeline],
    timings: WorkerTimings,
    trace_batch: BatchTrace | None,
) -> None:
    """The one agent: batches of raw records from every input, handed to the pipeline."""
    # One channel for every input, so Faust assigns the same partition numbers of all of them
    # to one worker: an agent's events, its retrievals and its partition's ticks meet there.
    source = app.topic(*_inputs(topics), key_serializer="raw", value_serializer="raw")
    type_of = topics.event_type_of
    kind_of: dict[str, RecordKind] = {topics.schedule: "tick", topics.access: "retrieval"}

    async def handle(records: list[RawRecord], events: list[EventT[bytes]]) -> None:
        try:
            started = time.perf_counter()
            await holder["pipeline"].handle(
                records,
                leave=partial(uncommitted, events),
                hold=partial(read_again, app, events),
            )
            timings.batch(time.perf_counter() - started)
        except Exception:
            exit_without_committing("a batch could not be processed")

    async def ingest(stream: StreamT[bytes]) -> None:
        events: list[EventT[bytes]]
        batches = take_batches(stream, settings.batch_size, settings.batch_within)
        try:
            # Closed in this task, not whenever it is collected: its finally acks the last
            # batch, which must happen before the consumer commits at stop.
            async with contextlib.aclosing(batches):
                async for events in batches:
                    try:
                        owned = app.consumer.assignment()
                        records = owned_records(events, owned, type_of, kind_of)
                        if trace_batch is None:
                            await drain_on_stop(handle(records, events), len(records))
                            continue
                        owned_headers = (e.message.headers for e in events if e.message.tp in owned)
                        with trace_batch(owned_headers):
                            await drain_on_stop(handle(records, events), len(records))
                    except Exception:
                        # Around the batch too: Faust would restart the agent, and the batch
                        # would be acknowledged unprocessed as the generator closes.
                        exit_without_committing("a batch could not be prepared")
        finally:
            # A snapshot still being written is given up: the one before it still holds.
            pipeline = holder.get("pipeline")
            if pipeline is not None and pipeline.snapshots is not None:
                await pipeline.snapshots.stop()

    app.agent(source, name=f"{settings.topic_prefix}ingest")(ingest)


LAST_WORDS: list[Callable[[], None]] = []
"""Run in order just before a crash exit, each bounding its own time. The embedded stack, whose
processors run in its own process, archives its in-memory log and stops its broker and Redis
here: they would otherwise outlive it, and the log of the run be lost."""


@contextlib.contextmanager
def before_a_crash_exit(step: Callable[[], None]) -> Iterator[None]:
    """``step`` is one of the :data:`LAST_WORDS` while the block runs."""
    LAST_WORDS.append(step)
    try:
        yield
    finally:
        LAST_WORDS.remove(step)


def exit_without_committing(what: str, *, error: bool = True, **extra: Any) -> NoReturn:
    """Crash-only: the batch is not acknowledged, and a restarted worker folds its state from
    the log and skips what was already derived. Letting Faust restart the agent instead would
    ack the batch and lose it (``take_batches`` acks what it yielded as it moves on or closes),
    and a half-failed batch cannot be retried in place. ``error``: log the exception being
    handled."""
    log.critical(f"{what}; exiting without committing it", exc_info=error, extra=extra or None)
    for last in LAST_WORDS:
        try:
            last()
        except Exception:
            log.exception("a last step before the exit failed")
    logging.shutdown()
    os._exit(70)


def owned_records(
    events: Sequence[EventT[bytes]],
    owned: Set[TP],
    type_of: Callable[[str], str | None],
    kind_of: Mapping[str, RecordKind],
) -> list[RawRecord]:
    """The batch's records of the partitions this worker still owns. Records of partitions
    revoked while they waited in the batch belong to the new owner now (it gets them
    redelivered); deriving them here would fork the state."""
    records = []
    for event in events:
        message = event.message
        if message.tp not in owned:
            uncommitted([event], {message.partition})
            continue
        records.append(
            RawRecord(
                topic=message.topic,
                partition=message.partition,
                offset=message.offset,
                key=message.key,
                value=message.value,
                expected_type=type_of(message.topic),
                kind=kind_of.get(message.topic, "agent"),
                timestamp_ms=timestamp_ms(message.timestamp),
            )
        )
    return records


def uncommitted(events: Sequence[EventT[bytes]], partitions: set[int]) -> None:
    """Keep the records of ``partitions`` out of the offsets Faust commits: the batch left them
    to the partitions' new owner, and ``take_batches`` acks every event it yielded, so Faust
    would otherwise commit past them while it still counts the partitions as its own (until the
    new assignment, or at its final commit when it stops)."""
    _out_of_commit(events, lambda message: message.partition in partitions)


def _out_of_commit(events: Sequence[EventT[bytes]], left_out: Callable[[Message], bool]) -> None:
    """Mark the messages ``left_out`` says as acked already: such a message is never added to
    the consumer's acked offsets (Faust's ``Message.ack``), so no commit passes it."""
    for event in events:
        if left_out(event.message):
            event.message.acked = True


async def read_again(
    app: faust.App,
    events: Sequence[EventT[bytes]],
    first_held: Mapping[SourceKey, int],
    rewind_to: Mapping[SourceKey, int],
) -> None:
    """The batch held back records of some partitions (:mod:`processors.source_order`): keep
    them out of the commit, as :func:`uncommitted` does, and have the consumer read those
    partitions again from where their records stop continuing the derived ones. A partition
    revoked meanwhile is its new owner's to read."""
    _out_of_commit(
        events,
        lambda m: m.offset >= first_held.get((m.topic, m.partition), m.offset + 1),
    )
    seeks = {TP(topic, partition): offset for (topic, partition), offset in rewind_to.items()}
    try:
        await app.consumer.seek_wait(seeks)
    except Exception:
        log.warning("could not rewind held partitions; a rebalance moved them", exc_info=True)


def _sender(app: faust.App) -> SendFn:
    """Sends through the app's producer (Faust flushes it before committing offsets)."""

    async def send(topic: str, key: bytes | None, value: bytes, partition: int | None) -> Any:
        return await app.producer.send(
            topic, key, value, partition=partition, timestamp=None, headers=None
        )

    return send


def _producer_of(app: faust.App) -> Callable[[], Any]:
    """The aiokafka producer under Faust's (its driver's ``_ensure_producer``: Faust has no
    public call for whole record batches). Faust flushes that same producer before it commits
    offsets, so batches queued there keep the commit order of single sends."""
    return lambda: app.producer._ensure_producer()  # type: ignore[attr-defined]


def _add_schedule_timer(
    app: faust.App, settings: EngramSettings, topics: Topics, send: SendFn
) -> None:
    async def tick(*_: Any) -> None:
        """Runs on the group leader only (Faust's ``on_leader``), so one tick per interval
        reaches each partition however many workers run."""
        ticks = ticks_for(settings.partitions, datetime.now(UTC), settings.schedule_interval)
        try:
            await publish_ticks(send, topics, ticks)
        except Exception:
            log.warning("could not publish a schedule tick; the next one will", exc_info=True)

    app.timer(settings.schedule_interval, on_leader=True, name="engram-schedule")(tick)


def _release_on_revocation(
    app: faust.App, settings: EngramSettings, topics: Topics, holder: dict[str, IngestPipeline]
) -> None:
    """Partitions revoked are forgotten by the pipeline once its batch in flight is done (the
    consumer rejoins the group only after this handler returns, so no new owner reads the log
    before that batch's marker); if they come back, it folds them from the log again. A batch
    that does not end in time makes the worker exit (crash-only) instead of rejoining while it
    still writes (:mod:`streams.worker.ownership`)."""
    inputs = set(_inputs(topics))

    @app.on_partitions_revoked.connect
    async def release(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        revoked: set[TP] = args[0]
        pipeline = holder.get("pipeline")
        if pipeline is None:
            return
        partitions = {tp.partition for tp in revoked if tp.topic in inputs}
        try:
            await pipeline.revoke(partitions, within=settings.session_timeout)
        except RebalanceTimeoutError:
            exit_without_committing(
                "partitions were revoked during a batch that did not end in time",
                error=False,
                partitions=sorted(partitions),
            )

    @app.on_partitions_assigned.connect
    async def assign(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        assigned: set[TP] = args[0]
        pipeline = holder.get("pipeline")
        if pipeline is not None:
            pipeline.assign({tp.partition for tp in assigned if tp.topic in inputs})


def timestamp_ms(seconds: float | None) -> int | None:
    """Faust hands the record's timestamp over in seconds (the log's milliseconds / 1000);
    rounding gives the log's value back exactly, so a live worker and a reprocess date an
    event without ``occurred_at``, and order a batch (:mod:`processors.batch_order`), alike."""
    return None if seconds is None else round(seconds * 1000)


async def drain_on_stop(batch: Awaitable[None], size: int) -> None:
    """Run one batch to its end even if the agent is cancelled meanwhile, then let the
    cancellation through.

    Faust stops an agent by cancelling it, and ``take_batches`` acks the batch it yielded
    whatever happened to it, so the consumer would commit at stop a batch cut short with
    derived records unsent or a projection half written (SIGTERM would lose or skip records).
    Finished first, the batch is applied, delivered and then committed, like any other.
    """
    task = asyncio.ensure_future(batch)
    stopping: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.done():
                break
            if stopping is None:
                log.info("stopping: draining the batch in flight (%d records)", size)
            stopping = exc
    if task.cancelled():
        # Only the loop's own teardown cancels it: a batch cut short must never be acked.
        exit_without_committing("a batch was cancelled half done", error=False)
    task.result()
    if stopping is not None:
        log.info("drained the batch in flight (%d records); committing its offsets", size)
        raise stopping
