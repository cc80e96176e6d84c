"""Read your writes through the real broker, Redis and Qdrant Edge: publish, then retrieve at
once with the positions publishing returned; a position the log does not hold is refused at
once, with where the log ends.

One node (processors + query service, the worker writing both stores) runs for the module.
The tests never wait on the worker by other means: the ``after`` of the retrieval is the only
synchronisation, so a retrieval that did not wait would race the worker.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from typer.testing import CliRunner

from projections.interfaces import EpisodicMemoryStore, WorkingMemoryStore
from projections.retrieval.engine import RetrievalEngine
from projections.service.app import create_app
from projections.service.client import (
    AsyncEngramClient,
    EngramClient,
    NotInLogError,
    WaitTimeoutError,
)
from schemas.agent_events import Decision, Observation
from schemas.codec import encode_event
from schemas.memory_events import MemoryRetrieved
from schemas.topics import Topics
from streams.cli.main import app as cli
from streams.eventlog.publisher import AsyncPublisher, Position, Publisher
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PATIENT_MS = 30_000
"""The longest wait the service allows: generous on a shared 2-core machine, still bounded."""


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"ryw{uuid.uuid4().hex[:8]}."


@pytest.fixture(scope="module")
async def node(
    kafka_bootstrap: str,
    redis_server_url: str,
    prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Node]:
    data_dir: Path = tmp_path_factory.mktemp("engram")
    settings = isolated_settings(prefix, data_dir)
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        yield node


@pytest.fixture(scope="module")
async def publisher(kafka_bootstrap: str, prefix: str) -> AsyncIterator[AsyncPublisher]:
    async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as pub:
        yield pub


@pytest.fixture
async def client(node: Node) -> AsyncIterator[AsyncEngramClient]:
    assert node.http_url is not None
    async with AsyncEngramClient(node.http_url) as c:
        yield c


async def raw_send(bootstrap: str, topic: str, value: bytes, partition: int) -> Position:
    """A record written by any Kafka client, bypassing the publisher's validation."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    await producer.start()
    try:
        sent = await producer.send_and_wait(topic, value, key=b"RAW", partition=partition)
    finally:
        await producer.stop()
    return Position(sent.topic, sent.partition, sent.offset)


class CountedMarks:
    """A store as the query service reads it, counting its applied-offset reads per
    partition; everything else is the store's own. Only the service reads through it, so the
    worker's reads (on a takeover) are not counted."""

    def __init__(self, store: WorkingMemoryStore | EpisodicMemoryStore) -> None:
        self.store = store
        self.reads: Counter[tuple[str, int]] = Counter()

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        self.reads[(topic, partition)] += 1
        return await self.store.applied_offset(topic, partition)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def applied(node: Node, position: Position) -> tuple[int | None, int | None]:
    assert node.episodic is not None
    return (
        await node.working.applied_offset(position.topic, position.partition),
        await node.episodic.applied_offset(position.topic, position.partition),
    )


async def test_a_retrieval_after_publishing_sees_what_was_published(
    publisher: AsyncPublisher, client: AsyncEngramClient
) -> None:
    flood = Observation(
        agent_id="RYW1",
        agent_type="household",
        year=3,
        kind="flood.major",
        content="Year 3: A major flood caused $60,000 in damages",
    )
    wait = Decision(
        agent_id="RYW1",
        agent_type="household",
        year=4,
        skill="do_nothing",
        content="Year 4: I chose to wait and not take protective action",
    )
    positions = await publisher.publish_many([flood, wait])

    response = await client.retrieve(
        "RYW1", top_k=5, current_year=4, after=positions, wait_timeout_ms=PATIENT_MS
    )

    stores = {m.content: m.store for m in response.results}
    assert stores == {flood.content: "episodic", wait.content: "working"}


async def test_the_blocking_client_takes_the_blocking_publishers_positions(
    node: Node, kafka_bootstrap: str, prefix: str
) -> None:
    url = node.http_url
    assert url is not None

    def publish_then_retrieve() -> list[str]:
        with Publisher(kafka_bootstrap, topics=Topics(prefix)) as agent_log:
            position = agent_log.observe(
                "RYW2", "Year 5: The levee held", agent_type="household", year=5
            )
        with EngramClient(url) as memory:
            answer = memory.retrieve("RYW2", after=[position], wait_timeout_ms=PATIENT_MS)
        return [m.content for m in answer.results]

    assert await asyncio.to_thread(publish_then_retrieve) == ["Year 5: The levee held"]


async def test_records_that_derive_nothing_complete_the_wait(
    node: Node, kafka_bootstrap: str, prefix: str, client: AsyncEngramClient
) -> None:
    """A dead letter and a retrieval record derive no event to apply; the worker must still
    move the stores past them, or this wait would run into its timeout. Each is the last
    record of its partition, so no later record moves the marks for it."""
    topics = Topics(prefix)
    dead = await raw_send(kafka_bootstrap, topics.observations, b"not json {", partition=1)
    retrieval = MemoryRetrieved(
        agent_id="RAW", mode="two_phase", parameters={}, results=(), took_ms=0.1
    )
    read = await raw_send(kafka_bootstrap, topics.access, encode_event(retrieval), partition=1)

    response = await client.retrieve("RAW", after=[dead, read], wait_timeout_ms=PATIENT_MS)

    assert response.results == ()
    for position in (dead, read):
        working, episodic = await applied(node, position)
        assert working is not None
        assert working >= position.offset
        assert episodic is not None
        assert episodic >= position.offset


async def test_a_position_beyond_the_log_is_refused_at_once_with_where_the_log_ends(
    node: Node, publisher: AsyncPublisher, client: AsyncEngramClient
) -> None:
    """Refused at once, which is counted, not timed: the service reads each store's mark once
    per partition, finds the positions beyond the log and refuses, although the request
    allowed the longest wait; a service that waited would read the marks again at each poll."""
    written = await publisher.publish(Observation(agent_id="RYW3", content="the pump failed"))
    beyond = Position(written.topic, written.partition, written.offset + 1_000_000)
    no_such_partition = Position(written.topic, node.settings.partitions, 0)
    assert node.engine is not None
    assert node.episodic is not None
    working, episodic = CountedMarks(node.working), CountedMarks(node.episodic)

    node.engine.use(cast(WorkingMemoryStore, working), cast(EpisodicMemoryStore, episodic))
    try:
        with pytest.raises(NotInLogError) as refused:
            await client.retrieve(
                "RYW3", after=[written, beyond, no_such_partition], wait_timeout_ms=PATIENT_MS
            )
    finally:
        node.engine.use(node.working, node.episodic)

    assert refused.value.status == 409
    once = Counter(
        {(written.topic, written.partition): 1, (written.topic, no_such_partition.partition): 1}
    )
    assert (working.reads, episodic.reads) == (once, once), "it waited"
    ends = {(p.partition, p.offset): p.log_end for p in refused.value.missing}
    assert set(ends) == {(beyond.partition, beyond.offset), (no_such_partition.partition, 0)}
    assert ends[(no_such_partition.partition, 0)] is None
    end = ends[(beyond.partition, beyond.offset)]
    assert end is not None
    assert written.offset < end <= beyond.offset
    assert "not in the log" in refused.value.message


async def test_positions_just_published_several_to_a_batch_are_in_the_log(
    publisher: AsyncPublisher, client: AsyncEngramClient
) -> None:
    """Records published together share a batch, whose last records the broker's own end
    offset may leave out (Tansu reports the last batch's base offset + 1): none is refused."""
    events = [Observation(agent_id="RYW6", step=i, content=f"gauge reading {i}") for i in range(8)]
    positions = await publisher.publish_many(events)
    assert len({(p.topic, p.partition) for p in positions}) == 1

    response = await client.retrieve("RYW6", after=positions, wait_timeout_ms=PATIENT_MS)

    assert response.working_count == len(events)  # all 8 within working memory's 10


async def test_without_log_ends_a_position_beyond_the_log_times_out_with_what_is_pending(
    node: Node, publisher: AsyncPublisher, client: AsyncEngramClient
) -> None:
    """A service that cannot ask where the log ends (none is given to its engine) waits for
    such a position as for any other, and its 504 says how far the real stores got."""
    written = await publisher.publish(Observation(agent_id="RYW3", content="the last one"))
    await client.retrieve("RYW3", after=[written], wait_timeout_ms=PATIENT_MS)
    beyond = Position(written.topic, written.partition, written.offset + 1_000_000)
    assert node.episodic is not None
    topics = node.topics
    engine = RetrievalEngine(
        node.working,
        node.episodic,
        node.embedder,
        source_topics=(*topics.agent_inputs, topics.schedule, topics.access),
    )
    transport = httpx.ASGITransport(app=create_app(engine))

    with pytest.raises(WaitTimeoutError) as timed_out:
        async with AsyncEngramClient("http://engram.test", transport=transport) as blind:
            await blind.retrieve("RYW3", after=[written, beyond], wait_timeout_ms=300)

    error = timed_out.value
    assert error.status == 504
    [pending] = error.pending
    assert (pending.topic, pending.partition, pending.offset) == (
        beyond.topic,
        beyond.partition,
        beyond.offset,
    )
    assert pending.working is not None
    assert written.offset <= pending.working < beyond.offset
    assert pending.episodic is not None
    assert written.offset <= pending.episodic < beyond.offset
    assert error.waited_ms >= 300
    assert f"{beyond.topic}[{beyond.partition}]@{beyond.offset}" in str(error)


async def test_the_http_answers_of_the_wait(node: Node, prefix: str) -> None:
    topics = Topics(prefix)
    async with httpx.AsyncClient(base_url=node.http_url or "") as http:
        unknown = await http.post(
            "/v1/agents/RYW4/retrieve",
            json={"after": [{"topic": topics.items, "partition": 0, "offset": 0}]},
        )
        past_the_end = await http.post(
            "/v1/agents/RYW4/retrieve",
            json={
                "after": [{"topic": topics.feedback, "partition": 0, "offset": 10**12}],
                "wait_timeout_ms": 0,
            },
        )
    assert unknown.status_code == 422, unknown.text
    assert unknown.json()["detail"][0]["loc"] == ["body", "after", 0, "topic"]
    assert past_the_end.status_code == 409, past_the_end.text
    [missing] = past_the_end.json()["missing"]
    assert (missing["offset"], missing["log_end"]) == (10**12, 0)  # nothing fed back yet


async def test_the_command_line_waits_with_after(node: Node, publisher: AsyncPublisher) -> None:
    written = await publisher.publish(Observation(agent_id="RYW5", content="said on the CLI"))
    after = f"{written.topic}:{written.partition}:{written.offset}"
    args = ["retrieve", "RYW5", "--after", after, "--wait-timeout-ms", str(PATIENT_MS)]
    args += ["--url", node.http_url or ""]

    result = await asyncio.to_thread(CliRunner().invoke, cli, args)

    assert result.exit_code == 0, result.output
    assert "said on the CLI" in result.output


async def test_with_the_episodic_projector_episodic_memories_are_awaited_too(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    """Workers write Redis, the projector applies the log to Edge: the marks it records come
    from the derived events' source positions, the very positions publishing returned."""
    prefix = f"rywp{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path, episodic_writer="projector")
    node = await Node(
        settings, Endpoints(kafka_bootstrap, redis_server_url), run_projector=True
    ).start()
    try:
        assert node.projector is not None
        assert node.http_url is not None
        async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as agent_log:
            positions = await agent_log.publish_many(
                Observation(agent_id="RYWP", importance=0.9, step=i, content=f"flood {i}")
                for i in range(3)
            )
        async with AsyncEngramClient(node.http_url) as memory:
            response = await memory.retrieve(
                "RYWP", top_k=5, after=positions, wait_timeout_ms=PATIENT_MS
            )
    finally:
        await node.stop()
    assert [(m.content, m.store) for m in response.results] == [
        ("flood 2", "episodic"),
        ("flood 1", "episodic"),
        ("flood 0", "episodic"),
    ]
