"""A worker forced to rejoin its group again and again while it derives a backlog still records
every observation exactly once.

Faust drops a record fetched before a rebalance by its group generation, but Tansu keeps the
generation across a lone member's rejoin: a record Faust's fetcher was handing to its channel
when the revocation came reaches the worker after the assignment, ahead of the redelivery from
the committed offset. Derived, it moved the partition's mark past records never derived,
which the redelivery then skipped as derived already: lost, without a dead letter.
:mod:`processors.source_order` holds such a record back and rewinds the consumer to the mark.

The rejoins are requested of aiokafka's group coordinator, in Faust's consumer thread, when
Faust's channel holds a backlog: that is when a rebalance interrupts a handoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest

from schemas.agent_events import Observation
from schemas.memory_events import MemoryRecorded
from schemas.topics import Topics
from streams.eventlog.derived_log import read_partitions
from streams.eventlog.publisher import AsyncPublisher, Position
from streams.runtime.node import Endpoints, Node
from tests.integration.opt_in import opt_in
from tests.integration.streams.isolated import isolated_settings, log_sealer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    opt_in(
        "ENGRAM_REJOIN_TEST",
        "about 85 s on two cores: run it with ENGRAM_REJOIN_TEST=1 pytest -n 0 "
        "tests/integration/streams/worker/test_rejoins.py",
    ),
]

AGENTS = 300
PRODUCERS = 4
EVENTS_PER_PRODUCER = 5_000
REJOINS = 12
BACKLOG = 3_500
"""Records in Faust's channel (of the 4,096 it holds) before a rejoin is requested."""
SETTLE_S = 30.0
"""At most, for a rejoin's rebalance to assign the partitions again."""


def observations(producer: int) -> list[Observation]:
    return [
        Observation(
            agent_id=f"A{(producer + PRODUCERS * i) % AGENTS:03d}",
            event_id=f"p{producer}-{i}",
            importance=0.3 + 0.1 * (i % 7),
            content=f"observation {i} of producer {producer}",
        )
        for i in range(EVENTS_PER_PRODUCER)
    ]


async def publish(bootstrap: str, topics: Topics, events: list[Observation]) -> list[Position]:
    """In lots, as a simulation does, so the worker reads while the producers write."""
    positions: list[Position] = []
    async with AsyncPublisher(bootstrap, topics=topics) as publisher:
        for start in range(0, len(events), 400):
            positions.extend(await publisher.publish_many(events[start : start + 400]))
    return positions


class Rejoins:
    """Forces the node's consumer to rejoin its group, and counts the rejoins that led to a
    rebalance (the partitions assigned again)."""

    def __init__(self, node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
        assert node.processor is not None
        assert node.pipeline is not None
        self.app = cast(Any, node.processor.app)
        self.thread = self.app.consumer._thread
        self.requested = 0
        self.rejoined = 0
        self.assigned = asyncio.Event()
        loop = asyncio.get_running_loop()
        assign = node.pipeline.assign

        def noted(partitions: set[int]) -> None:
            loop.call_soon_threadsafe(self.assigned.set)
            assign(partitions)

        monkeypatch.setattr(node.pipeline, "assign", noted)

    def backlog(self) -> int:
        return max((q.qsize() for q in list(self.app.flow_control._queues)), default=0)

    def request(self) -> None:
        """In Faust's consumer thread, where the aiokafka consumer and its coordinator live."""
        coordinator = self.thread._ensure_consumer()._coordinator
        self.thread.thread_loop.call_soon_threadsafe(coordinator.request_rejoin)
        self.requested += 1

    async def until(self, done: asyncio.Event) -> None:
        """Up to REJOINS rejoins, each once the last one's rebalance is over and the channel
        holds a backlog again."""
        for _ in range(REJOINS):
            while self.backlog() < BACKLOG:
                if done.is_set():
                    return
                await asyncio.sleep(0.01)
            self.assigned.clear()
            self.request()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.assigned.wait(), SETTLE_S)
            self.rejoined += self.assigned.is_set()
            await asyncio.sleep(1.0)


async def test_forced_rejoins_under_a_backlog_record_every_observation_once(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"rejoin{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    settings = isolated_settings(prefix, tmp_path, schedule_interval=0)
    lots = [observations(p) for p in range(PRODUCERS)]
    published = {e.event_id for lot in lots for e in lot}

    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        assert node.pipeline is not None
        rejoins = Rejoins(node, monkeypatch)
        done = asyncio.Event()
        rejoining = asyncio.create_task(rejoins.until(done))
        positions = await asyncio.gather(*(publish(kafka_bootstrap, topics, e) for e in lots))
        await node.pipeline.stats.wait_for([p for ps in positions for p in ps], timeout=180)
        done.set()
        await rejoining
        stats = node.pipeline.stats
    finally:
        await node.stop()
    print(
        f"\nrejoins {rejoins.rejoined} of {rejoins.requested} requested, "
        f"held back {stats.held_back}, skipped {stats.skipped}"
    )

    async with log_sealer(redis_server_url, settings.redis_namespace) as sealer:
        logged = await read_partitions(
            kafka_bootstrap,
            [topics.items, topics.lifecycle],
            range(settings.partitions),
            sealer=sealer,
        )
    recorded = Counter(e.source_event_id for e in logged if isinstance(e, MemoryRecorded))
    assert rejoins.rejoined > 0, "no rejoin was forced: the worker never held a backlog"
    lost = published - set(recorded)
    assert not lost, f"{len(lost)} of {len(published)} observations never recorded"
    twice = [i for i, n in recorded.items() if n > 1]
    assert not twice, f"{len(twice)} observations recorded twice, e.g. {twice[:5]}"
    assert set(recorded) == published, "recordings of observations never published"
