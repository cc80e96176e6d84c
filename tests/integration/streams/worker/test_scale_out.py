"""Scaling out and back under load: three ``engram worker`` processes in one group (episodic
memory written by one ``engram project``), a fourth joining mid-stream, then one killed
(SIGKILL) and one stopped (SIGTERM). Every rebalance moves partitions between workers, and
each takeover must start from the partition's snapshot and read only a bounded tail of the
log; what the group leaves behind must be what one worker derives from the same records.

The reference and the checks are those of the process-fault tests: every published event is
recorded once, the derived log is the pure batch function's over each agent's events in the
order the log says they were applied, and Redis and Qdrant Edge hold exactly what it implies.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from processors.batch_markers import MarkerIndex
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import AgentEvent
from schemas.codec import decode_derived_record
from schemas.memory_events import DerivedRecord, DerivedUpTo, MemoryRecorded, SourcePosition
from schemas.topics import Topics
from streams.eventlog.derived_log import read_partitions, read_records
from streams.eventlog.publisher import AsyncPublisher
from streams.eventlog.topic_admin import ensure_topics
from tests.benchmarks.workload import make_events
from tests.integration.opt_in import opt_in
from tests.integration.streams.isolated import isolated_settings, log_sealer
from tests.integration.streams.worker.test_process_faults import (
    Stream,
    assert_exactly_once,
    memories_implied,
    rederived,
)
from tests.integration.streams.worker_process import WorkerProcess, worker_environment

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(400),
    opt_in(
        "ENGRAM_SCALE_OUT_TEST",
        "1-2 minutes on two cores: run it with ENGRAM_SCALE_OUT_TEST=1 pytest "
        "tests/integration/streams/worker/test_scale_out.py (ENGRAM_SCALE_OUT_SNAPSHOT_EVERY=1 "
        "for a snapshot due after every full batch)",
    ),
]

PARTITIONS = 8
EVENTS = 30_000
AGENTS = 600
BATCH_SIZE = 500
SNAPSHOT_EVERY = int(os.environ.get("ENGRAM_SCALE_OUT_SNAPSHOT_EVERY", "4"))
"""Full batches' worth of records between a worker's snapshots (1: after every batch, the most
snapshot writes)."""
TAIL_BATCHES = SNAPSHOT_EVERY + 2
"""A takeover's tail: the batches since the partition's last snapshot, one cut short by a
kill, and what a worker that lost its partitions logged meanwhile; generous bound."""
DERIVED_PER_EVENT = 4
"""At most: a recording, a forgetting, a promotion and a summary's share."""
WITHIN_S = 240.0
PROJECTOR_WITHIN_S = 60.0
"""After the workers: the projector has read most of the log by then."""


async def applied(working: RedisWorkingMemory, last: dict[tuple[str, int], int]) -> int:
    done = 0
    for (topic, partition), offset in last.items():
        mark = await working.applied_offset(topic, partition)
        done += 0 if mark is None else min(mark, offset) + 1
    return done


async def wait_for(
    working: RedisWorkingMemory,
    last: dict[tuple[str, int], int],
    count: int,
    processes: list[WorkerProcess],
) -> None:
    deadline = time.monotonic() + WITHIN_S
    while (done := await applied(working, last)) < count:
        for process in processes:
            process.check_alive()
        assert time.monotonic() < deadline, f"{done} of {count} records applied in {WITHIN_S}s"
        await asyncio.sleep(0.05)


def takeovers(processes: list[WorkerProcess]) -> list[dict[str, Any]]:
    return [r for p in processes for r in p.log_records() if r.get("msg") == "takeover read"]


async def test_three_workers_a_fourth_joining_and_two_stopping_remember_everything_once(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"scale{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    settings = isolated_settings(
        prefix,
        tmp_path,
        partitions=PARTITIONS,
        schedule_interval=0,
        episodic_writer="projector",
        batch_size=BATCH_SIZE,
        snapshot_every_records=SNAPSHOT_EVERY * BATCH_SIZE,
    )
    env = worker_environment(settings, kafka_bootstrap, redis_server_url) | {
        "ENGRAM_EPISODIC_WRITER": "projector",
        "ENGRAM_BATCH_SIZE": str(BATCH_SIZE),
        "ENGRAM_SNAPSHOT_EVERY_RECORDS": str(SNAPSHOT_EVERY * BATCH_SIZE),
        "ENGRAM_SNAPSHOTS": "true",
    }
    workers = [WorkerProcess(env, tmp_path / f"worker-{i}.log") for i in range(4)]
    projector = WorkerProcess(env, tmp_path / "projector.log", role="project")
    processes = [*workers, projector]
    working = RedisWorkingMemory.from_url(redis_server_url, settings.redis_namespace)
    try:
        await ensure_topics(kafka_bootstrap, topics, PARTITIONS)
        events: list[AgentEvent] = make_events(EVENTS, agents=AGENTS, seed=5)
        async with AsyncPublisher(kafka_bootstrap, topics=topics, linger=0.05) as publisher:
            positions = await publisher.publish_many(events)
        last: dict[tuple[str, int], int] = {}
        for p in positions:
            last[(p.topic, p.partition)] = max(last.get((p.topic, p.partition), -1), p.offset)
        assert len(positions) == EVENTS

        projector.start()
        for worker in workers[:3]:
            worker.start()
        await wait_for(working, last, EVENTS // 4, processes)
        workers[3].start()
        await wait_for(working, last, EVENTS // 2, processes)
        workers[0].kill()
        assert await asyncio.to_thread(workers[1].terminate, 60) == 0, workers[1].tail()
        at_stop = await applied(working, last)
        assert at_stop < EVENTS, "the stream ended before the workers stopped: nothing tested"
        await wait_for(working, last, EVENTS, [workers[2], workers[3], projector])
        for process in (workers[2], workers[3]):
            assert await asyncio.to_thread(process.terminate, 60) == 0, process.tail()
        # Every worker has stopped: the checks of the process-fault tests apply to the group.
        stream = Stream(settings, topics, workers[0], working, redis_server_url, events, positions)
        assert_bounded_takeovers(workers)
        await assert_log_and_redis_once(kafka_bootstrap, stream)
        await wait_for_projector(kafka_bootstrap, stream, projector)
        print(await assert_exactly_once(kafka_bootstrap, stream))
    finally:
        for process in processes:
            process.stop()
        await working.clear()
        await working.close()
        for process in processes:
            print(f"===== {process.output.name} (last lines) =====")
            print(process.tail(40))
        shutil.rmtree(settings.qdrant_path or "", ignore_errors=True)


async def wait_for_projector(bootstrap: str, stream: Stream, projector: WorkerProcess) -> None:
    """Until the projector has committed the whole derived log (it commits only what it
    applied), then stop it: it holds the Edge shard while it runs."""
    group = f"{stream.group}-episodic"
    tps = [
        TopicPartition(topic, p)
        for topic in (stream.topics.items, stream.topics.lifecycle)
        for p in range(PARTITIONS)
    ]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + PROJECTOR_WITHIN_S
        while True:
            projector.check_alive()
            committed = {tp: await consumer.committed(tp) or 0 for tp in tps}
            if all(committed[tp] >= ends[tp] for tp in tps):
                break
            if time.monotonic() > deadline:
                print(await stuck_report(bootstrap, stream, committed))
            assert time.monotonic() < deadline, f"the projector is behind: {committed}, {ends}"
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()
    assert await asyncio.to_thread(projector.terminate, 60) == 0, projector.tail()


async def derived_records(
    bootstrap: str, stream: Stream
) -> list[tuple[SourcePosition, DerivedRecord]]:
    """Every record of the derived topics, opened with the stream's keys, for a report."""
    async with log_sealer(stream.redis_url, stream.settings.redis_namespace) as sealer:
        return await read_records(
            bootstrap,
            [stream.topics.items, stream.topics.lifecycle],
            range(PARTITIONS),
            decode_derived_record,
            sealer=sealer,
        )


async def stuck_report(bootstrap: str, stream: Stream, committed: dict[TopicPartition, int]) -> str:
    """The records the projector's commit stopped at, and the markers that judge them."""
    records = await derived_records(bootstrap, stream)
    index = MarkerIndex()
    for where, record in records:
        if isinstance(record, DerivedUpTo):
            index.add(record, where.offset)
    last = Counter[tuple[str, int]]()
    for where, _ in records:
        last[(where.topic, where.partition)] = max(
            last[(where.topic, where.partition)], where.offset
        )
    lines = [f"last offsets: {dict(last)}"]
    for where, record in records:
        at = committed.get(TopicPartition(where.topic, where.partition), 0)
        if not at <= where.offset < at + 4:
            continue
        if isinstance(record, DerivedUpTo):
            what = f"marker items={record.items} lifecycle={record.lifecycle} upto={record.upto}"
        else:
            covering = index.covering(where, record)
            what = (
                f"{record.event_type} source={record.source_position} "
                f"verdict={index.verdict(where, record)} covering="
                + (
                    "none"
                    if covering is None
                    else f"items={covering.items} lifecycle={covering.lifecycle} "
                    f"upto={covering.upto}"
                )
            )
        lines.append(f"{where.topic}[{where.partition}]@{where.offset} {what}")
    return "\n".join(lines)


async def assert_log_and_redis_once(bootstrap: str, stream: Stream) -> None:
    """What :func:`assert_exactly_once` checks but Qdrant Edge (the projector's): every
    published event recorded once, the derived log the pure function's, Redis what it implies."""
    async with log_sealer(stream.redis_url, stream.settings.redis_namespace) as sealer:
        logged = await read_partitions(
            bootstrap,
            [stream.topics.items, stream.topics.lifecycle],
            range(PARTITIONS),
            sealer=sealer,
        )
    twice = [i for i, n in Counter(e.event_id for e in logged).items() if n > 1]
    if twice:
        print(await copies_of(bootstrap, stream, set(twice[:10])))
    assert not twice, f"{len(twice)} derived events twice"
    sources = Counter(e.source_event_id for e in logged if isinstance(e, MemoryRecorded))
    assert set(sources) == {e.event_id for e in stream.events}, "memories lost or made up"
    assert max(sources.values()) == 1, "an agent event was recorded twice"
    expected = {e.event_id: e for e in rederived(stream, logged)}
    assert {e.event_id: e for e in logged} == expected, "not the derived log of one worker"
    implied = memories_implied(list(expected.values()))["working"]
    for agent in sorted({e.agent_id for e in stream.events}):
        assert await stream.working.memories(agent) == implied.get(agent, []), agent


async def copies_of(bootstrap: str, stream: Stream, event_ids: set[str]) -> str:
    """Where each copy of ``event_ids`` lies and which marker covers it (its offset, time and
    sources), to set against the workers' logs."""
    records = await derived_records(bootstrap, stream)
    markers = [(w, r) for w, r in records if isinstance(r, DerivedUpTo)]
    lines = []
    for where, record in records:
        if isinstance(record, DerivedUpTo) or record.event_id not in event_ids:
            continue
        ranges = {stream.topics.items: "items", stream.topics.lifecycle: "lifecycle"}
        covering = [
            f"marker@{w.offset} {m.occurred_at.isoformat()} "
            + ",".join(f"{u.topic.rsplit('.', 1)[-1]}:{u.offset}" for u in m.upto)
            for w, m in markers
            if w.partition == where.partition
            and (rng := getattr(m, ranges[where.topic])) is not None
            and where.offset in rng
        ]
        source = record.source_position
        lines.append(
            f"{record.event_id} {type(record).__name__} {where.topic}[{where.partition}]"
            f"@{where.offset} source={source} covered_by={covering}"
        )
    return "\n".join(sorted(lines))


def assert_bounded_takeovers(workers: list[WorkerProcess]) -> None:
    """Every takeover of partitions that had been processed started from their snapshots and
    read at most a few batches' worth of the log after them."""
    taken = takeovers(workers)
    assert taken, "no takeover was logged"
    later = [t for t in taken if t["records_read"] or t["snapshot_records"]]
    assert later, f"no takeover after the first batches: {taken}"
    bound = TAIL_BATCHES * BATCH_SIZE * DERIVED_PER_EVENT
    for takeover in later:
        assert takeover["from_snapshot"] == takeover["partitions"], takeover
        assert takeover["records_read"] <= bound * len(takeover["partitions"]), takeover
    print(Counter(len(t["partitions"]) for t in later), [t["records_read"] for t in later])
