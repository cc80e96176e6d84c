"""Backends failing under a running stream: the pipeline pauses, resumes, and the outcome is
exactly that of a run without the fault (issue 4, item 6).

Each test has a server of its own, since it takes it down: a Redis with an append-only file
that is killed and started again on the same port, or a Tansu broker (memory storage, so never
restarted) behind a TCP proxy that cuts every connection and refuses new ones for a while. The
outcome is checked against the pure processors run over everything published
(``exactly_once.py``): the derived log holds each derived event once and nothing else, every
published event is remembered once, and Redis holds what that log says.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from projections.interfaces import ProjectionError
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.topics import Topics
from streams.eventlog.publisher import AsyncPublisher, Position
from streams.eventlog.topic_admin import ensure_topics
from streams.runtime.devstack.broker import TansuBroker
from streams.runtime.devstack.ports import free_port
from streams.runtime.devstack.redis_server import RedisServer
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.exactly_once import assert_exactly_once, workload
from tests.integration.streams.isolated import isolated_settings, log_sealer
from tests.integration.streams.supervised_worker import SupervisedWorker, worker_env
from tests.integration.streams.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(150)]

AGENTS = 40
EVENTS_PER_AGENT = 75
"""3,000 events: seconds of processing, long enough to fail a backend in the middle."""

REDIS_OUTAGE_S = 3.0

ANSWERS_LOST_S = 1.0
"""Before the broker's connections reset, its answers are lost for this long: requests sent
then were done, but their clients cannot know, which is when a producer sends a record twice."""


def agent_ids() -> list[str]:
    return [f"F{a:03d}" for a in range(AGENTS)]


async def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        await asyncio.sleep(0.02)


async def publish_paced(
    publisher: AsyncPublisher, events: Sequence[Observation], chunk: int = 150, pause: float = 0.05
) -> list[Position]:
    """A stream rather than one burst, so a fault lands while records are still arriving."""
    positions: list[Position] = []
    for start in range(0, len(events), chunk):
        positions.extend(await publisher.publish_many(events[start : start + chunk]))
        await asyncio.sleep(pause)
    return positions


@pytest.mark.parametrize("kill_with", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
async def test_redis_down_mid_stream_pauses_processing_and_nothing_is_lost_or_doubled(
    kafka_bootstrap: str, tmp_path: Path, kill_with: signal.Signals
) -> None:
    """Redis dies while batches are being applied and comes back ~3 s later. The worker runs
    in this process: had a Redis error escaped as anything but a retried ProjectionError, the
    crash-only worker would have taken pytest down with it."""
    prefix = f"redisfault{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    settings = isolated_settings(prefix, tmp_path, schedule_interval=0)
    events = workload(AGENTS, EVENTS_PER_AGENT)
    await ensure_topics(kafka_bootstrap, topics, settings.partitions)
    with RedisServer(tmp_path / "redis", port=free_port(), appendfsync="always") as redis:
        first_pid = redis.pid
        node = await Node(
            settings, Endpoints(kafka_bootstrap, redis.url), run_service=False
        ).start()
        try:
            assert node.pipeline is not None
            stats = node.pipeline.stats
            async with AsyncPublisher(kafka_bootstrap, topics=topics, linger=0.005) as publisher:
                publishing = asyncio.create_task(publish_paced(publisher, events))
                await until(lambda: stats.events >= len(events) // 4, 90, "a quarter processed")
                await asyncio.to_thread(redis.kill, kill_with)
                batches_at_kill, events_at_kill = stats.batches, stats.events
                await asyncio.sleep(REDIS_OUTAGE_S)
                finished_in_outage = stats.batches - batches_at_kill
                retries_in_outage = stats.projection_retries
                await asyncio.to_thread(redis.start)
                restarted_pid = redis.pid
                positions = await publishing
                await stats.wait_for(positions, timeout=90)
            working = {agent: await node.working.memories(agent) for agent in agent_ids()}
        finally:
            await node.stop()
        # The keys are in the Redis that went down (the default keyring), so read it now.
        async with log_sealer(redis.url, settings.redis_namespace) as sealer:
            outcome = await assert_exactly_once(
                kafka_bootstrap, topics, settings, events, working, sealer=sealer
            )
    assert restarted_pid != first_pid, "Redis was not restarted"
    assert events_at_kill < len(events), "Redis went down after the stream was processed"
    # No batch finishes without Redis; only the one past its writes when Redis died may.
    assert finished_in_outage <= 1, f"{finished_in_outage} batches finished without Redis"
    assert retries_in_outage > 0, "the pipeline did not retry the unavailable projection"
    assert outcome.recorded == len(events)


async def committed(bootstrap: str, group: str, tps: Sequence[TopicPartition]) -> list[int]:
    """The group's committed positions. A worker commits only once the projections are written
    and the broker holds every derived record, so these, unlike Redis' applied offsets (written
    before the deliveries are confirmed), say that a record is done."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        return [await consumer.committed(tp) or 0 for tp in tps]
    finally:
        await consumer.stop()


async def applied(store: RedisWorkingMemory, ends: dict[TopicPartition, int]) -> int:
    """How many published records the worker has applied to Redis (progress, not completion)."""
    done = 0
    for tp in ends:
        offset = await store.applied_offset(tp.topic, tp.partition)
        done += 0 if offset is None else offset + 1
    return done


def ends_of(positions: Sequence[Position]) -> dict[TopicPartition, int]:
    ends: dict[TopicPartition, int] = {}
    for p in positions:
        tp = TopicPartition(p.topic, p.partition)
        ends[tp] = max(ends.get(tp, 0), p.offset + 1)
    return ends


@pytest.mark.parametrize("outage", [3.0, 9.0], ids=["3s", "9s"])
async def test_broker_connections_cut_mid_stream_processing_resumes_exactly_once(
    redis_server_url: str, tmp_path: Path, outage: float
) -> None:
    """Every connection to the broker is reset and reconnects are refused for a while, a
    worker being mid-backlog; then the network is back and more events arrive. The worker
    runs as ``engram worker`` under a supervisor that restarts it if it exits (crash-only
    workers exit with 70 on a batch they cannot finish), so either way the stream must end
    exactly once. The longer outage outlasts the group's session timeout (6 s): Kafka would
    then move the partitions, and the worker fold them back; Tansu (measured) keeps the member."""
    prefix = f"netfault{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    settings = isolated_settings(prefix, tmp_path, schedule_interval=0, batch_size=200)
    events = workload(AGENTS, EVENTS_PER_AGENT)
    before_cut = len(events) * 4 // 5
    proxy_port = free_port()
    bootstrap = f"127.0.0.1:{proxy_port}"
    store = RedisWorkingMemory.from_url(redis_server_url, namespace=settings.redis_namespace)
    try:
        with TansuBroker(advertised_port=proxy_port) as broker:
            async with TcpProxy(("127.0.0.1", broker.port), proxy_port) as proxy:
                await ensure_topics(bootstrap, topics, settings.partitions)
                worker = SupervisedWorker(
                    worker_env(settings, bootstrap, redis_server_url), tmp_path / "worker"
                ).start()
                try:
                    async with AsyncPublisher(bootstrap, topics=topics, linger=0.005) as pub:
                        positions = await publish_paced(pub, events[:before_cut])
                    ends = ends_of(positions)
                    deadline = time.monotonic() + 90
                    while (at_cut := await applied(store, ends)) < before_cut // 3:
                        assert time.monotonic() < deadline, worker.log_tails()
                        assert not worker.gave_up, worker.log_tails()
                        await asyncio.sleep(0.02)
                    severed = await proxy.cut(answers_lost_for=ANSWERS_LOST_S)
                    await asyncio.sleep(outage)
                    at_restore = await applied(store, ends)
                    accepted_before = proxy.accepted
                    await proxy.restore()
                    async with AsyncPublisher(bootstrap, topics=topics, linger=0.005) as pub:
                        positions += await publish_paced(pub, events[before_cut:])
                    ends = ends_of(positions)
                    group = f"{prefix}{settings.app_id}"
                    deadline = time.monotonic() + 120
                    while not all(
                        done >= end
                        for done, end in zip(
                            await committed(bootstrap, group, list(ends)),
                            ends.values(),
                            strict=True,
                        )
                    ):
                        assert time.monotonic() < deadline, worker.log_tails()
                        assert not worker.gave_up, worker.log_tails()
                        await asyncio.sleep(0.5)
                    reconnected = proxy.accepted - accepted_before
                finally:
                    await worker.stop()
                working = {agent: await store.memories(agent) for agent in agent_ids()}
                async with log_sealer(redis_server_url, settings.redis_namespace) as sealer:
                    outcome = await assert_exactly_once(
                        bootstrap,
                        topics,
                        settings,
                        events,
                        working,
                        sealer=sealer,
                        retried_copies_allowed=True,
                    )
    finally:
        await store.clear()
        await store.close()
    assert at_cut < before_cut, "the connections were cut after the backlog was processed"
    assert severed > 0, "no connection went through the proxy"
    # Without the broker no batch is acknowledged: only the one in hand (and the next, had the
    # broker answered the first just before the cut) can be applied meanwhile.
    assert at_restore - at_cut <= 2 * settings.batch_size, (at_cut, at_restore)
    assert reconnected > 0, "nothing reconnected through the proxy after the outage"
    assert set(worker.crash_codes) <= {70}, worker.log_tails()
    assert outcome.recorded == len(events)


async def test_redis_down_at_a_takeover_pauses_it_and_the_worker_stays_up(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A worker takes its partitions over at its first batch after each assignment, reading
    the stores' applied offsets. Redis down then made it exit 70 where a batch pauses; every
    start or rebalance in an outage killed the worker, each restart rebalanced the group again,
    and the group crash-looped until Redis was back. Now the takeover waits for Redis too."""
    prefix = f"takeoverfault{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    settings = isolated_settings(prefix, tmp_path, schedule_interval=0)
    await ensure_topics(kafka_bootstrap, topics, settings.partitions)
    events = workload(4, 10)
    with RedisServer(tmp_path / "redis", port=free_port(), appendfsync="always") as redis:
        store = RedisWorkingMemory.from_url(redis.url, namespace=settings.redis_namespace)
        env = worker_env(settings, kafka_bootstrap, redis.url)
        try:
            first = SupervisedWorker(env, tmp_path / "first", max_restarts=0).start()
            try:
                async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
                    positions = await publisher.publish_many(events[:-1])
                await until_applied(store, ends_of(positions), first)
            finally:
                assert await first.stop() == 0, first.log_tails()

            health = free_port()
            second = SupervisedWorker(
                env | {"ENGRAM_HEALTH_PORT": str(health)}, tmp_path / "second", max_restarts=3
            ).start()
            try:
                await until_ready(f"http://127.0.0.1:{health}/readyz", second)
                await asyncio.to_thread(redis.kill, signal.SIGKILL)
                async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
                    positions += [await publisher.publish(events[-1])]
                await asyncio.sleep(REDIS_OUTAGE_S)  # the takeover meets the outage
                assert second.runs[-1].exit_code is None, second.log_tails()
                await asyncio.to_thread(redis.start)
                await until_applied(store, ends_of(positions), second)
            finally:
                await second.stop()
        finally:
            await store.clear()
            await store.close()
    assert second.crash_codes == [], second.log_tails()
    assert len(second.runs) == 1, second.log_tails()


async def until_applied(
    store: RedisWorkingMemory, ends: dict[TopicPartition, int], worker: SupervisedWorker
) -> None:
    deadline = time.monotonic() + 60
    while await applied_or_none(store, ends) < sum(ends.values()):
        assert time.monotonic() < deadline, worker.log_tails()
        assert not worker.gave_up, worker.log_tails()
        await asyncio.sleep(0.1)


async def applied_or_none(store: RedisWorkingMemory, ends: dict[TopicPartition, int]) -> int:
    """:func:`applied`, or 0 while Redis is not back."""
    try:
        return await applied(store, ends)
    except ProjectionError:
        return 0


async def until_ready(url: str, worker: SupervisedWorker) -> None:
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(timeout=2) as http:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url)).status_code == 200:
                    return
            assert time.monotonic() < deadline, worker.log_tails()
            assert not worker.gave_up, worker.log_tails()
            await asyncio.sleep(0.1)
