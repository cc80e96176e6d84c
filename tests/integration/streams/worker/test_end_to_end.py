"""From an agent's event to a retrievable memory, through the real broker, Redis and Qdrant Edge.

One Engram node (Faust processors + query service) runs for the module; agents publish with the
client or with a raw Kafka producer, and memories are read back over HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError
from typer.testing import CliRunner

from projections.service.client import AsyncEngramClient
from schemas.agent_events import Decision, Observation
from schemas.codec import RecordOrigin, encode_event
from schemas.deadletter import DeadLetter
from schemas.envelope import MAX_CONTENT_CHARS
from schemas.topics import Topics
from streams.cli.main import app as cli
from streams.eventlog.dead_letters import latest_dead_letters
from streams.eventlog.publisher import AsyncPublisher, Position
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def prefix() -> str:
    import uuid

    return f"e2e{uuid.uuid4().hex[:8]}."


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


async def test_published_events_are_retrievable_with_importance_and_destination(
    node: Node, publisher: AsyncPublisher, client: AsyncEngramClient
) -> None:
    assert node.pipeline is not None
    flood = Observation(
        agent_id="H001",
        agent_type="household",
        year=3,
        kind="flood.major",
        tags=("flood", "major"),
        content="Year 3: A major flood caused $60,000 in damages",
    )
    wait = Decision(
        agent_id="H001",
        agent_type="household",
        year=4,
        skill="do_nothing",
        content="Year 4: I chose to wait and not take protective action",
    )
    positions = await publisher.publish_many([flood, wait])
    assert {p.topic for p in positions} == {
        publisher.topics.observations,
        publisher.topics.decisions,
    }
    await node.pipeline.stats.wait_for(positions)

    response = await client.retrieve("H001", top_k=5, current_year=4)
    by_content = {m.content: m for m in response.results}
    major = by_content[flood.content]
    assert (major.importance, major.destination, major.store) == (0.9, "episodic", "episodic")
    nothing = by_content[wait.content]
    assert (nothing.importance, nothing.destination, nothing.store) == (0.3, "working", "working")
    # Two-phase (seed 004): working memory first, then episodic by 0.95^years x importance.
    assert [m.content for m in response.results] == [wait.content, flood.content]
    assert major.score == pytest.approx(0.9 * 0.95)


async def test_query_text_finds_the_related_episodic_memory(
    node: Node, publisher: AsyncPublisher, client: AsyncEngramClient
) -> None:
    assert node.pipeline is not None
    events = [
        Observation(agent_id="Q1", importance=0.9, step=i, content=text)
        for i, text in enumerate(
            [
                "The insurance claim for the basement was denied by the adjuster",
                "We planted tomatoes and basil in the community garden",
                "The river levee was breached and water filled the street",
            ]
        )
    ]
    await node.pipeline.stats.wait_for(await publisher.publish_many(events))
    response = await client.retrieve(
        "Q1",
        query="levee breached by the river",
        top_k=3,
        mode="weighted",
        weights={"relevance": 1.0, "recency": 0.0, "importance": 0.0, "context": 0.0},
    )
    assert response.results[0].content == events[2].content


async def test_working_memory_keeps_the_ten_latest(
    node: Node, publisher: AsyncPublisher, client: AsyncEngramClient
) -> None:
    assert node.pipeline is not None
    events = [
        Observation(agent_id="FIFO", importance=0.5, step=i, content=f"Event {i}")
        for i in range(12)
    ]
    await node.pipeline.stats.wait_for(await publisher.publish_many(events))
    response = await client.retrieve("FIFO", top_k=20)
    contents = [m.content for m in response.results]
    assert len(contents) == 10
    assert "Event 0" not in contents
    assert "Event 1" not in contents
    assert contents[0] == "Event 11"


async def test_agents_sharing_an_event_id_keep_their_own_memories(
    node: Node, publisher: AsyncPublisher, client: AsyncEngramClient
) -> None:
    """Producers choose event ids on their own: two agents' "turn-1" are two memories."""
    assert node.pipeline is not None
    agents = ("C1", "C2")
    events = [
        Observation(agent_id=agent, event_id=f"turn-{n}", importance=importance, content=text)
        for agent in agents
        for n, importance, text in ((1, 0.9, f"{agent} lost the harvest"), (2, 0.3, f"{agent} ate"))
    ]
    await node.pipeline.stats.wait_for(await publisher.publish_many(events))
    for agent in agents:
        response = await client.retrieve(agent, top_k=10)
        assert sorted((m.content, m.store) for m in response.results) == [
            (f"{agent} ate", "working"),
            (f"{agent} lost the harvest", "episodic"),
        ]


async def test_a_record_without_envelope_gets_type_identity_and_time_from_the_log(
    node: Node, kafka_bootstrap: str, prefix: str, client: AsyncEngramClient
) -> None:
    """What the exported schema leaves optional, a plain Kafka client may leave out: the topic
    gives the type, the record's position its id and its timestamp its time."""
    assert node.pipeline is not None
    topics = Topics(prefix)
    at = datetime(2025, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=False
    )
    await producer.start()
    try:
        bare = orjson.dumps({"agent_id": "K1", "content": "written by a plain Kafka client"})
        sent = await producer.send_and_wait(
            topics.observations, bare, key=b"K1", timestamp_ms=int(at.timestamp() * 1000)
        )
    finally:
        await producer.stop()
    await node.pipeline.stats.wait_for([Position(sent.topic, sent.partition, sent.offset)])
    (memory,) = (await client.retrieve("K1", top_k=5)).results
    origin = RecordOrigin(sent.topic, sent.partition, sent.offset)
    assert (memory.content, memory.occurred_at) == ("written by a plain Kafka client", at)
    assert (memory.source_event_type, memory.source_event_id) == ("observation", origin.event_id)


async def test_poison_records_go_to_the_dead_letter_topic_and_good_ones_land(
    node: Node, kafka_bootstrap: str, prefix: str, client: AsyncEngramClient
) -> None:
    assert node.pipeline is not None
    topics = Topics(prefix)
    good = [
        Observation(agent_id="P1", importance=0.5, step=i, content=f"good record {i}")
        for i in range(4)
    ]
    future = Observation(agent_id="P1", content="from the future").wire() | {"schema_version": 9}
    poison = {
        b"this is not json {": "not_json",
        orjson.dumps({"event_type": "observation", "agent_id": "P1"}): "invalid",
        orjson.dumps(
            {"event_type": "telepathy", "agent_id": "P1", "content": "x"}
        ): "unknown_event_type",
        orjson.dumps(future): "future_version",
        orjson.dumps([1, 2, 3]): "invalid",
        encode_event(
            Decision(agent_id="P1", skill="x", content="on the wrong topic")
        ): "wrong_topic",
        orjson.dumps(
            {
                "event_type": "observation",
                "agent_id": "P1",
                "content": "x" * (MAX_CONTENT_CHARS + 1),
            }
        ): "invalid",
    }
    # Near the producer's 1 MiB limit: its letter keeps a prefix, or it could not be written.
    huge = orjson.dumps({"event_type": "observation", "agent_id": "P1", "content": "y" * 900_000})
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=False
    )
    await producer.start()
    try:
        sent = []
        bad = iter(poison)
        for record in good:
            sent.append(
                await producer.send_and_wait(topics.observations, encode_event(record), key=b"P1")
            )
            raw = next(bad, None)
            if raw is not None:
                sent.append(await producer.send_and_wait(topics.observations, raw, key=b"P1"))
        for raw in bad:
            sent.append(await producer.send_and_wait(topics.observations, raw, key=b"P1"))
        sent.append(await producer.send_and_wait(topics.observations, huge, key=b"P1"))
        # Above the limit the publisher's producer refuses it: an error for the publisher, and
        # nothing reaches the log.
        with pytest.raises(MessageSizeTooLargeError):
            await producer.send_and_wait(topics.observations, b"z" * (1 << 20), key=b"P1")
    finally:
        await producer.stop()
    await node.pipeline.stats.wait_for([Position(m.topic, m.partition, m.offset) for m in sent])

    response = await client.retrieve("P1", top_k=10)
    assert sorted(m.content for m in response.results) == [f"good record {i}" for i in range(4)]

    consumer = AIOKafkaConsumer(
        topics.deadletter,
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    letters: list[DeadLetter] = []
    try:
        deadline = time.monotonic() + 30
        while len(letters) < len(poison) + 1 and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                letters.extend(DeadLetter.model_validate_json(r.value) for r in records if r.value)
    finally:
        await consumer.stop()
    (cut,) = [letter for letter in letters if letter.original_value() not in poison]
    # Exactly the first 128 KiB (131,072 bytes) of it, and the reason names that size.
    assert cut.original_value() == huge[:131_072]
    assert f"keeps the first 131,072 bytes of the value ({len(huge):,} bytes)" in cut.reason
    assert cut.error_kind == "invalid"
    assert "content" in cut.reason
    assert f"[{sent[-1].partition}]@{sent[-1].offset}" in cut.reason
    got = {letter.original_value(): letter for letter in letters if letter is not cut}
    assert set(got) == set(poison)
    for raw, kind in poison.items():
        assert got[raw].error_kind == kind, got[raw]
        assert got[raw].reason
        assert got[raw].topic == topics.observations

    # Read back for a person (`engram dead-letters`): one per source record, newest first. A
    # batch processed again after a crash logs its letters again; here one, written twice.
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topics.deadletter, encode_event(letters[0]), key=b"P1")
        await producer.send_and_wait(topics.deadletter, b"not a dead letter", key=b"P1")
    finally:
        await producer.stop()
    found = await latest_dead_letters(kafka_bootstrap, [topics.deadletter], limit=3)
    assert (found.total, found.unreadable) == (len(poison) + 1, 1)
    newest = sorted(letters, key=lambda letter: letter.failed_at, reverse=True)
    assert [letter.failed_at for letter in found.latest] == [
        letter.failed_at for letter in newest[:3]
    ]
    shown = await asyncio.to_thread(
        CliRunner().invoke,
        cli,
        ["dead-letters", "--limit", "50"],
        env={"ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap, "ENGRAM_TOPIC_PREFIX": prefix},
    )
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert f"the latest {len(poison) + 1} of {len(poison) + 1} dead letters" in text
    for letter in letters:
        assert f"{letter.topic}:{letter.partition}:{letter.offset} {letter.error_kind}" in text


async def test_the_api_answers_422_with_a_readable_message(node: Node) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=node.http_url or "") as http:
        response = await http.post("/v1/agents/H001/retrieve", json={"top_k": 0})
        assert response.status_code == 422
        assert "top_k" in response.text
        response = await http.post("/v1/agents/bad agent/retrieve", json={})
        assert response.status_code == 422


async def test_the_blocking_publisher_returns_positions(
    node: Node, kafka_bootstrap: str, prefix: str, client: AsyncEngramClient
) -> None:
    from streams.eventlog.publisher import Publisher

    assert node.pipeline is not None

    def publish() -> Position:
        with Publisher(kafka_bootstrap, topics=Topics(prefix)) as blocking:
            return blocking.decide(
                "SYNC1", "relocate", "I relocated to a safer area", agent_type="household", year=5
            )

    position = await asyncio.to_thread(publish)
    assert position.topic == Topics(prefix).decisions
    await node.pipeline.stats.wait_for([position])
    (memory,) = (await client.retrieve("SYNC1")).results
    assert (memory.importance, memory.destination) == (0.9, "episodic")
