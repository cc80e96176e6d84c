"""Takeover time against the length of the history: a worker taking over its partitions reads
their latest snapshot and the log after it, so the time must not grow with the history.

    python -m tests.benchmarks.bench_takeover [--histories 100000 1000000] [--agents 1000]
                                              [--tail-batches 10] [--batch-size 2000]

Prints, per history, the seconds and records a takeover of all partitions took (the
``takeover read`` of :func:`streams.eventlog.snapshot_log.recover_state`), the whole fold's at
the smallest history for comparison, and ``ratio: X`` (time at the largest history over time
at the smallest; target <= 1.5).

How the derived log is made (no ingest through a broker, which would take most of an hour at
1,000,000 events on two cores): the worker's own pure step (:func:`processors.worker_step.
derive_batch`, :func:`~processors.worker_step.carry`, the batch markers) derives a *warm*
stretch of the household workload (20 events per agent), so every agent's state is at its
capacities, as after any long history. The history up to the last snapshot is then filled with
copies of the warm stretch's derived records, each copy covered by a marker of its own: the
log holds as many records as the history's derivation would (a recording and about one
forgetting per event), which a takeover without snapshot must read and a takeover with one must
not. The snapshot is the worker's state after them, as :class:`streams.worker.snapshotting.
Snapshotter` writes it, and ``--tail-batches`` batches derived by the pure step follow it: the
tail a worker that snapshots every that many batches leaves at most. All of it is produced to a
fresh broker at the offsets the markers name (checked), without sealing, with the 64-dimension
hashing embedder (smaller records: the broker holds them in RAM). The takeover's state is
checked against the one the pure step ended with.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer

from processors.batch import RawRecord
from processors.batch_order import topic_rank
from processors.embedding import embedder_from_name
from processors.lifecycle import Deriving
from processors.state_fold import FoldedState
from processors.state_snapshot import (
    CoveredLog,
    chunk_records,
    manifest_record,
    partition_snapshot,
)
from processors.summarising import ExtractiveSummariser
from processors.worker_step import carry, derive_batch
from schemas.codec import encode_event
from schemas.memory_events import DerivedUpTo, LogRange, SourcePosition
from schemas.topics import Topics
from streams.eventlog import derived_log, snapshot_log
from streams.eventlog.history import partition_for
from streams.eventlog.kafka_clients import record_producer
from streams.eventlog.topic_admin import ensure_topics
from streams.settings import EngramSettings, processing_config
from tests.benchmarks.servers import fresh_servers
from tests.benchmarks.workload import make_events

PARTITIONS = 4
AT = datetime(2026, 1, 1, tzinfo=UTC)
TOPICS = Topics("bench.")


@dataclass
class Landed:
    offset: int


@dataclass
class SyntheticLog:
    """The derived log a worker would leave, by (topic, partition), in log order."""

    records: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)
    folded: FoldedState = field(default_factory=lambda: FoldedState(TOPICS.schedule))
    partition_of: dict[str, int] = field(default_factory=dict)
    covered: CoveredLog = field(default_factory=CoveredLog)
    source_offsets: dict[int, int] = field(default_factory=dict)

    def append(self, topic: str, partition: int, value: bytes) -> int:
        held = self.records.setdefault((topic, partition), [])
        held.append(value)
        return len(held) - 1

    def mark(self, markers: list[DerivedUpTo]) -> None:
        landed = [
            Landed(self.append(TOPICS.lifecycle, m.partition, encode_event(m))) for m in markers
        ]
        self.covered.note(markers, landed, TOPICS.items, TOPICS.lifecycle)

    def derive(self, events: list[Any], ctx: Deriving, batch_size: int) -> None:
        """Derive ``events`` batch by batch as the worker does, logging each batch's markers."""
        rank = topic_rank(TOPICS)
        for start in range(0, len(events), batch_size):
            raws = []
            for event in events[start : start + batch_size]:
                p = partition_for(event.agent_id, PARTITIONS)
                offset = self.source_offsets.get(p, 0)
                self.source_offsets[p] = offset + 1
                raws.append(
                    RawRecord(
                        TOPICS.observations,
                        p,
                        offset,
                        event.agent_id.encode(),
                        encode_event(event),
                        "observation",
                        "agent",
                        round(event.occurred_at.timestamp() * 1000),
                    )
                )
            batch = derive_batch(
                raws, self.folded, self.partition_of, ctx=ctx, rank=rank, failed_at=AT
            )
            landed = []
            for event in batch.result.derived:
                topic = TOPICS.derived_topic(event)
                assert event.source_position is not None
                p = event.source_position.partition
                landed.append(Landed(self.append(topic, p, encode_event(event))))
            metadata = [
                _Meta(m.offset, e) for m, e in zip(landed, batch.result.derived, strict=True)
            ]
            self.mark(batch.markers(metadata, AT))
            carry(self.folded, self.partition_of, batch)

    def copy_block(self, block: dict[tuple[str, int], tuple[int, int]]) -> None:
        """Append a copy of the records at ``block`` (per topic and partition, a range), each
        partition's copy covered by a marker."""
        ranges: dict[tuple[str, int], LogRange] = {}
        for (topic, p), (first, end) in block.items():
            held = self.records[(topic, p)]
            copy = held[first:end]
            if not copy:
                continue
            start = len(held)
            held.extend(copy)
            ranges[(topic, p)] = LogRange(first=start, last=len(held) - 1)
        markers = [
            DerivedUpTo(
                event_id=uuid.uuid4().hex,
                occurred_at=AT,
                partition=p,
                upto=tuple(
                    SourcePosition(topic=t, partition=q, offset=o)
                    for (t, q), o in sorted(self.folded.derived_upto.items())
                    if q == p
                ),
                items=ranges.get((TOPICS.items, p)),
                lifecycle=ranges.get((TOPICS.lifecycle, p)),
            )
            for p in range(PARTITIONS)
        ]
        self.mark(markers)

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.records.values())


@dataclass
class _Meta:
    """What the producer says of a record: its partition and offset."""

    offset: int
    event: Any

    @property
    def partition(self) -> int:
        position = self.event.source_position
        assert position is not None
        return int(position.partition)


def synthesise(history: int, agents: int, tail_batches: int, batch_size: int) -> SyntheticLog:
    settings = EngramSettings(embedder="hashing-64")
    embedder = embedder_from_name(
        settings.embedder,
        minilm_precision=settings.minilm_precision,
        minilm_runtime=settings.minilm_runtime,
    )
    summariser = ExtractiveSummariser()
    config = processing_config(settings)
    ctx = Deriving(config, embedder, summariser, config.version(embedder.id, summariser.id))
    tail = tail_batches * batch_size
    warm = min(agents * 20, history - tail)
    events = make_events(warm + tail, agents=agents, seed=3)
    log = SyntheticLog()
    log.derive(events[:warm], ctx, batch_size)
    block = {key: (0, len(held)) for key, held in log.records.items()}
    copies = (history - tail - warm) // warm
    for _ in range(copies):
        log.copy_block(block)
    snapshots = {
        p: partition_snapshot(log.folded, log.partition_of, log.covered, p)
        for p in range(PARTITIONS)
    }
    for p, snapshot in snapshots.items():
        assert snapshot is not None
        chunks = chunk_records(snapshot, f"s{p}")
        for chunk in chunks:
            log.append(TOPICS.snapshots, p, chunk)
        log.append(TOPICS.snapshots, p, manifest_record(snapshot, f"s{p}", len(chunks), 0, AT))
    log.derive(events[warm:], ctx, batch_size)
    return log


async def produce(bootstrap: str, log: SyntheticLog) -> None:
    """Every record at the offset the markers name (checked on the producer's metadata)."""
    producer: AIOKafkaProducer = record_producer(bootstrap, linger=0.02)
    await producer.start()
    try:
        for (topic, p), values in log.records.items():
            for start in range(0, len(values), 20_000):
                futures = [
                    await producer.send(topic, value, partition=p)
                    for value in values[start : start + 20_000]
                ]
                metadata = await asyncio.gather(*futures)
                offsets = [m.offset for m in metadata]
                want = list(range(start, start + len(values[start : start + 20_000])))
                assert offsets == want, f"{topic}[{p}] landed elsewhere than the markers say"
    finally:
        await producer.stop()


class TakeoverLine(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.last: dict[str, Any] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "takeover read":
            self.last = dict(record.__dict__)


async def one(history: int, agents: int, tail_batches: int, batch_size: int, whole: bool) -> float:
    started = time.perf_counter()
    log = synthesise(history, agents, tail_batches, batch_size)
    made = time.perf_counter() - started
    with fresh_servers() as (bootstrap, _):
        await ensure_topics(bootstrap, TOPICS, PARTITIONS)
        started = time.perf_counter()
        await produce(bootstrap, log)
        produced = time.perf_counter() - started
        line = TakeoverLine()
        logging.getLogger("engram.takeover").addHandler(line)
        logging.getLogger("engram.takeover").setLevel(logging.INFO)
        started = time.perf_counter()
        folded, _ = await snapshot_log.recover_state(bootstrap, TOPICS, range(PARTITIONS))
        took = time.perf_counter() - started
        assert folded.states == log.folded.states, "the takeover's state is not the worker's"
        assert line.last["from_snapshot"] == list(range(PARTITIONS)), line.last
        derived = log.size - sum(
            len(v) for (t, _), v in log.records.items() if t == TOPICS.snapshots
        )
        print(
            f"history {history:>9,} events ({derived:,} derived records; made in {made:.0f} s, "
            f"produced in {produced:.0f} s): takeover {took:.2f} s, "
            f"{line.last['records_read']:,} records read after the snapshots, "
            f"{line.last['snapshot_records']} snapshot records, {len(folded.states)} agents"
        )
        if whole:
            started = time.perf_counter()
            full, _ = await derived_log.recover_state(bootstrap, TOPICS, range(PARTITIONS))
            print(
                f"  the whole fold of the same log: {time.perf_counter() - started:.2f} s "
                f"({derived:,} records)"
            )
            assert full.states == folded.states
    return took


async def main(histories: list[int], agents: int, tail_batches: int, batch_size: int) -> None:
    print(
        f"{PARTITIONS} partitions, {agents} agents, a tail of {tail_batches} batches of "
        f"{batch_size} events after the snapshots"
    )
    times = [
        await one(h, agents, tail_batches, batch_size, whole=i == 0)
        for i, h in enumerate(histories)
    ]
    print(f"ratio: {times[-1] / times[0]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--tail-batches", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.histories, args.agents, args.tail_batches, args.batch_size))
