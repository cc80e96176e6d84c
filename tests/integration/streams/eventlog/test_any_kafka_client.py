"""Any Kafka client can feed Engram, shown with one that is not Python: kcat (librdkafka, C).

Its records are JSON lines written from the exported JSON Schemas (``engram schemas export``),
as a producer in another language would write them, some without ``event_id``, ``occurred_at``
or ``event_type``. Each becomes the memory the contract promises: the type its topic carries,
an id made of its position in the log, the time the log gave it; and ``engram reprocess`` of the
same log derives the same memories, with the same ids and times.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from jsonschema import Draft202012Validator

from projections.episodic.edge import EdgeEpisodicMemory
from projections.memory import StoredMemory
from projections.service.client import AsyncEngramClient
from projections.working.redis_store import RedisWorkingMemory
from schemas.codec import RecordOrigin
from schemas.json_schema import schema_version_of
from schemas.memory_events import Destination, memory_id_for
from schemas.topics import Topics
from streams.eventlog.history import partition_for
from streams.eventlog.publisher import Position
from streams.runtime.devstack.broker import TansuBroker
from streams.runtime.devstack.ports import free_port
from streams.runtime.node import Endpoints, Node
from streams.settings import EngramSettings
from tests.integration.streams.eventlog.api_versions_relay import ApiVersionsRelay
from tests.integration.streams.eventlog.kcat import (
    ReadRecord,
    kcat_binary,
    librdkafka_version,
    produce,
    read_topic,
)
from tests.integration.streams.isolated import cli_env, invoke, isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

READS_FEATURE_TAGS = (2, 2, 0)
"""The first librdkafka that parses the tagged fields of an ApiVersions answer
(see :mod:`tests.integration.streams.eventlog.api_versions_relay`)."""
EDGE_DIM = 384
"""The default (hashing) embedder's vector size, of the live version and of the reprocessed."""
WAIT_MS = 20_000


@dataclass(frozen=True)
class Line:
    """One JSON line a producer writes, and the memory it must become."""

    schema: str
    """The exported schema it is written from: observation, decision or feedback."""
    topic: str
    """The :class:`Topics` field of the topic it is published on."""
    record: dict[str, Any]
    destination: Destination

    @property
    def agent(self) -> str:
        return str(self.record["agent_id"])


LINES = (
    # Everything the envelope has: the producer names the type, the id and the time.
    Line(
        "observation",
        "observations",
        {
            "event_id": "kc-observation-1",
            "event_type": "observation",
            "occurred_at": "2031-05-01T12:00:00Z",
            "agent_id": "KC1",
            "agent_type": "household",
            "kind": "flood.major",
            "year": 3,
            "tags": ["flood", "major"],
            "content": "Year 3: the river flooded our basement",
        },
        "episodic",
    ),
    # What the schema requires and nothing else: type, id and time come from the log.
    Line(
        "observation",
        "observations",
        {"agent_id": "KC1", "content": "Year 4: my neighbor elevated his house"},
        "working",
    ),
    # A decision that leaves out its type.
    Line(
        "decision",
        "decisions",
        {
            "event_id": "kc-decision-1",
            "occurred_at": "2031-06-01T09:30:00Z",
            "agent_id": "KC1",
            "agent_type": "household",
            "skill": "elevate_house",
            "year": 4,
            "content": "Year 4: I decided to elevate the house",
        },
        "episodic",
    ),
    # Feedback on that decision, without an id or a time of its own.
    Line(
        "feedback",
        "feedback",
        {
            "event_type": "feedback",
            "agent_id": "KC1",
            "target_event_id": "kc-decision-1",
            "signal": 0.8,
            "importance": 0.5,
            "content": "The elevation kept the house dry in Year 5",
        },
        "working",
    ),
    # Another agent whose producer uses the same event id: a memory of its own.
    Line(
        "observation",
        "observations",
        {
            "event_id": "kc-observation-1",
            "agent_id": "KC2",
            "importance": 0.5,
            "content": "Year 3: the water stopped one street away",
        },
        "working",
    ),
)


@pytest.fixture
def kcat() -> str:
    return kcat_binary()


@pytest.fixture
async def kcat_bootstrap(kcat: str, kafka_bootstrap: str) -> AsyncIterator[str]:
    """A broker kcat can talk to: the session's, or, for a kcat on a librdkafka that cannot
    read the broker's ApiVersions answer, a broker of its own that every client reaches
    through :class:`ApiVersionsRelay`."""
    if librdkafka_version(kcat) >= READS_FEATURE_TAGS:
        yield kafka_bootstrap
        return
    relay_port = free_port()
    broker = TansuBroker(advertised_port=relay_port).start()
    try:
        async with ApiVersionsRelay(("127.0.0.1", broker.port), relay_port) as relay:
            yield relay.bootstrap
    finally:
        broker.stop()


def validated(lines: tuple[Line, ...], schema_dir: Path) -> None:
    """Each line is what its exported schema allows, and the lines leave out, between them,
    every envelope field a producer may leave to the log."""
    for line in lines:
        version = schema_version_of(line.schema)
        schema = orjson.loads((schema_dir / f"{line.schema}.v{version}.schema.json").read_bytes())
        Draft202012Validator(schema).validate(line.record)
        assert set(schema["required"]) <= line.record.keys() <= set(schema["properties"])
    for field in ("event_id", "occurred_at", "event_type"):
        assert any(field not in line.record for line in lines), field


async def publish(kcat: str, bootstrap: str, topics: Topics) -> None:
    for name in sorted({line.topic for line in LINES}):
        keyed = [(line.agent, line.record) for line in LINES if line.topic == name]
        await produce(kcat, bootstrap, getattr(topics, name), keyed)


@dataclass(frozen=True)
class Landed:
    """Where a line landed, as kcat reads it back."""

    topic: str
    record: ReadRecord

    @property
    def origin(self) -> RecordOrigin:
        r = self.record
        return RecordOrigin(self.topic, r.partition, r.offset, r.timestamp_ms)

    @property
    def position(self) -> Position:
        return Position(self.topic, self.record.partition, self.record.offset)


async def where_each_landed(kcat: str, bootstrap: str, topics: Topics) -> list[Landed]:
    """Per line, in the order of :data:`LINES`, the record kcat reads back for it."""
    found: dict[str, Landed] = {}
    for name in sorted({line.topic for line in LINES}):
        topic = getattr(topics, name)
        read = await read_topic(kcat, bootstrap, topic)
        assert len(read) == sum(line.topic == name for line in LINES), read
        found |= {r.value: Landed(topic, r) for r in read}
    return [found[orjson.dumps(line.record).decode()] for line in LINES]


CHECKED = (
    "memory_id",
    "source_event_id",
    "source_event_type",
    "content",
    "destination",
    "store",
    "occurred_at",
)


def expected(line: Line, landed: Landed) -> dict[str, Any]:
    """The memory a line must become; what it leaves out, its place in the log gives."""
    event_id = line.record.get("event_id", landed.origin.event_id)
    occurred_at = line.record.get("occurred_at")
    return {
        "memory_id": memory_id_for(line.agent, event_id),
        "source_event_id": event_id,
        "source_event_type": line.schema,
        "content": line.record["content"],
        "destination": line.destination,
        "store": line.destination,
        "occurred_at": (
            landed.origin.occurred_at
            if occurred_at is None
            else datetime.fromisoformat(occurred_at)
        ),
    }


def by_memory_id(memory: dict[str, Any]) -> str:
    return str(memory["memory_id"])


async def stored(
    settings: EngramSettings, redis_url: str, version: str | None
) -> list[StoredMemory]:
    """Every memory of the agents in the stores of ``version`` (None: the live one)."""
    namespace = settings.redis_namespace + (f".{version}" if version else "")
    collection = settings.qdrant_collection + (f"_{version}" if version else "")
    working = RedisWorkingMemory.from_url(redis_url, namespace)
    episodic = EdgeEpisodicMemory.open(settings.edge_path() / collection, EDGE_DIM)
    try:
        memories = []
        for agent in sorted({line.agent for line in LINES}):
            memories += await working.memories(agent)
            memories += await episodic.memories(agent, 1000, levels=None)
    finally:
        await episodic.close()
        await working.close()
    return sorted(memories, key=lambda m: m.memory_id)


async def test_kcat_records_become_the_memories_a_reprocess_derives_again(
    kcat: str, kcat_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"kcat{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path / "live", schedule_interval=0)
    topics = Topics(prefix)
    env = cli_env(settings, kcat_bootstrap, redis_server_url)

    exported = await invoke(["schemas", "export", str(tmp_path / "schemas")], env)
    assert exported.exit_code == 0, exported.output
    validated(LINES, tmp_path / "schemas")

    node = await Node(settings, Endpoints(kcat_bootstrap, redis_server_url)).start()
    try:
        assert node.http_url is not None
        await publish(kcat, kcat_bootstrap, topics)
        landed = await where_each_landed(kcat, kcat_bootstrap, topics)
        for line, at in zip(LINES, landed, strict=True):
            assert at.record.key == line.agent
            assert at.record.partition == partition_for(line.agent, settings.partitions)
        wanted = [expected(line, at) for line, at in zip(LINES, landed, strict=True)]

        # Over HTTP, as the agent's own client reads them, once the workers passed its records.
        async with AsyncEngramClient(node.http_url) as client:
            for agent in sorted({line.agent for line in LINES}):
                mine = [i for i, line in enumerate(LINES) if line.agent == agent]
                after = [landed[i].position for i in mine]
                response = await client.retrieve(
                    agent, top_k=20, after=after, wait_timeout_ms=WAIT_MS
                )
                got = [{key: getattr(m, key) for key in CHECKED} for m in response.results]
                assert sorted(got, key=by_memory_id) == sorted(
                    (wanted[i] for i in mine), key=by_memory_id
                )
        assert not await read_topic(kcat, kcat_bootstrap, topics.deadletter)
    finally:
        await node.stop()

    live = await stored(settings, redis_server_url, None)
    assert [m.memory_id for m in live] == sorted(w["memory_id"] for w in wanted)

    # The same log, derived again into a version of its own: the same memories, ids and times.
    result = await invoke(["reprocess"], env)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    again = await stored(settings, redis_server_url, "v1")
    # (as dicts, so that a difference names its field)
    assert [m.model_dump() for m in again] == [m.model_dump() for m in live]
