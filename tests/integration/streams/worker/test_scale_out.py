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
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import AgentEvent
from schemas.topics import Topics
from streams.eventlog.publisher import AsyncPublisher
from streams.eventlog.topic_admin import ensure_topics
from tests.benchmarks.workload import make_events
from tests.integration.streams.isolated import isolated_settings
from tests.integration.streams.worker.test_process_faults import Stream, assert_exactly_once
from tests.integration.streams.worker_process import WorkerProcess, worker_environment

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

PARTITIONS = 8
EVENTS = 30_000
AGENTS = 600
BATCH_SIZE = 500
TAIL_BATCHES = 3
"""A takeover's tail: the batch after the partition's last snapshot, one cut short by a kill,
and what a worker that lost its partitions logged meanwhile; generous bound."""
DERIVED_PER_EVENT = 4
"""At most: a recording, a forgetting, a promotion and a summary's share."""
WITHIN_S = 240.0
PROJECTOR_S = 5.0


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
        snapshot_every_batches=1,
    )
    env = worker_environment(settings, kafka_bootstrap, redis_server_url) | {
        "ENGRAM_EPISODIC_WRITER": "projector",
        "ENGRAM_BATCH_SIZE": str(BATCH_SIZE),
        "ENGRAM_SNAPSHOT_EVERY_BATCHES": "1",
    }
    workers = [WorkerProcess(env, tmp_path / f"worker-{i}.log") for i in range(4)]
    projector = WorkerProcess(env, tmp_path / "projector.log", command="project")
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
        await stop_projector_when_done(stream, projector)
        counts = await assert_exactly_once(kafka_bootstrap, stream)
        print(counts)
        assert_bounded_takeovers(workers)
    finally:
        for process in processes:
            process.stop()
        await working.clear()
        await working.close()
        for process in processes:
            print(f"===== {process.output.name} (last lines) =====")
            print(process.tail(40))
        shutil.rmtree(settings.qdrant_path or "", ignore_errors=True)


async def stop_projector_when_done(stream: Stream, projector: WorkerProcess) -> None:
    """Stop the projector once it has applied every record (it holds the Edge shard while it
    runs, so it is stopped to look, and started again if it was not done)."""
    deadline = time.monotonic() + WITHIN_S
    while True:
        # Long enough for a (re)started projector to be up, with its signal handlers set.
        await asyncio.sleep(PROJECTOR_S)
        projector.check_alive()
        assert await asyncio.to_thread(projector.terminate, 60) == 0, projector.tail()
        store = stream.open_edge()
        try:
            marks = {tp: await store.applied_offset(*tp) for tp in stream.last_offsets}
        finally:
            await store.close()
        if all(m is not None and m >= stream.last_offsets[tp] for tp, m in marks.items()):
            return
        assert time.monotonic() < deadline, f"the projector did not apply everything: {marks}"
        projector.start()


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
