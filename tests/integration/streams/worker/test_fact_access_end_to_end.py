"""Seed 000's ``access_count`` through the real broker, worker, Redis and HTTP: two searches of
an agent's facts (facts reads with a query) count 2 on the fact they returned and nothing on
the other; the history tells each search and each count; a rebuild of the projections from
the log and a takeover's fold (from the snapshots and the log after them, and from the whole
log) give the same counts."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from projections.learned.reads import LearnedMemory
from projections.service.client import AsyncEngramClient
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import FactStatement, Observation
from schemas.topics import Topics
from streams.eventlog import derived_log, snapshot_log
from streams.eventlog.publisher import AsyncPublisher
from streams.privacy.sealing import RecordSealer
from streams.rebuild.from_log import rebuild_projections
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

AGENT = "H9"


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"factuse{uuid.uuid4().hex[:8]}."


@pytest.fixture(scope="module")
async def node(
    kafka_bootstrap: str,
    redis_server_url: str,
    prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Node]:
    """A snapshot after every batch: the takeover below resumes from one."""
    data_dir: Path = tmp_path_factory.mktemp("engram")
    settings = isolated_settings(prefix, data_dir, snapshot_every_records=1)
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        yield node


def stating(attribute: str, subject: str, value: str) -> Observation:
    return Observation(
        agent_id=AGENT,
        agent_type="household",
        content=f"The {subject} {attribute} is {value}",
        fact=FactStatement(subject=subject, attribute=attribute, value=value),
    )


async def counted(client: AsyncEngramClient, attribute: str, count: int) -> dict[str, int]:
    """Each fact's count once the worker counted ``count`` on ``attribute``. Read without a
    query: a listing, which is not recorded, so waiting counts nothing."""
    deadline = time.monotonic() + 60
    while True:
        facts = (await client.facts(AGENT)).facts
        counts = {f.attribute: f.access_count for f in facts}
        if counts.get(attribute) == count:
            return counts
        assert time.monotonic() < deadline, f"the worker did not count the searches: {counts}"
        await asyncio.sleep(0.05)


async def snapshot_counts(
    bootstrap: str, topics: Topics, partitions: range, sealer: RecordSealer
) -> dict[str, int]:
    """The agent's counts in the latest snapshot of its partition, once one holds the two
    (the worker takes one after every batch here; one due while the one before is written
    follows it, rather than waiting for a next batch: on a busy machine that was the next tick,
    and this wait took a minute)."""
    deadline = time.monotonic() + 60
    while True:
        snapshots, _ = await snapshot_log.read_snapshots(bootstrap, topics.snapshots, partitions)
        opened = await snapshot_log.opened_snapshots(snapshots, sealer)
        held = [s.states[AGENT] for s in opened.values() if AGENT in s.states]
        counts = held[0].learned.access_counts if held else {}
        if sorted(counts.values()) == [2] or time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.1)


async def test_two_searches_count_two_on_the_fact_they_returned_in_every_reading(
    node: Node, kafka_bootstrap: str, redis_server_url: str, prefix: str
) -> None:
    assert node.pipeline is not None
    assert node.http_url is not None
    topics = Topics(prefix)
    events = [
        stating("roof", "house", "clay tiles"),
        stating("premium", "flood insurance", "$1,200 a year"),
    ]
    async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
        await node.pipeline.stats.wait_for([await publisher.publish(e) for e in events])

    async with AsyncEngramClient(node.http_url) as client:
        for _ in range(2):
            (found,) = (await client.facts(AGENT, "flood insurance premium", top_k=1)).facts
            assert found.attribute == "premium"
        live = await counted(client, "premium", 2)
        assert live == {"premium": 2, "roof": 0}
        timeline = await client.history(AGENT)
    assert (timeline.counts["retrieved"], timeline.counts["fact_accessed"]) == (2, 2)
    searches = [e.text for e in timeline.entries if e.kind == "retrieved"]
    assert all(t.startswith('facts search for "flood insurance premium", 1 fact') for t in searches)
    told = [e.text for e in timeline.entries if e.kind == "fact_accessed"]
    assert told[-1] == (
        "fact flood insurance premium returned by a search (rank 1): returned 2 times in all"
    )
    held = node.pipeline.folded.states[AGENT].learned.access_counts
    assert sorted(held.values()) == [2]

    sealer = RecordSealer(node.keyring)
    partitions = range(node.settings.partitions)
    assert await snapshot_counts(kafka_bootstrap, topics, partitions, sealer) == held
    for recover in (snapshot_log.recover_state, derived_log.recover_state):
        folded, _ = await recover(kafka_bootstrap, topics, partitions, sealer)
        assert folded.states[AGENT].learned.access_counts == held, recover.__module__

    rebuilt = RedisWorkingMemory.from_url(redis_server_url, f"rebuilt{uuid.uuid4().hex[:8]}")
    try:
        await rebuild_projections(kafka_bootstrap, topics, partitions, [rebuilt], sealer=sealer)
        facts = await LearnedMemory(lambda: rebuilt, node.embedder).facts(AGENT)
        assert {f.attribute: f.access_count for f in facts.facts} == live
    finally:
        await rebuilt.clear()
        await rebuilt.close()
