"""`engram replay` writes the agent index of the version it builds: the very index the live
workers wrote for the same log, so a history of the new version reads by the index too."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from projections.history import build_timeline
from projections.service.client import AsyncEngramClient
from projections.working.agent_index import AgentIndex
from schemas.agent_events import Observation
from schemas.memory_events import ForgetAgent
from schemas.topics import Topics
from streams.eventlog.history import read_agent_events
from streams.eventlog.publisher import AsyncPublisher
from streams.privacy.forgetting import request_forget
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import cli_env, invoke, isolated_settings, log_sealer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

AGENTS = [f"X{i}" for i in range(6)]


def events(start: int, count: int) -> list[Observation]:
    return [
        Observation(
            agent_id=AGENTS[i % len(AGENTS)],
            year=1 + i // (12 * len(AGENTS)),
            importance=(0.3, 0.65, 0.9)[i % 3],
            content=f"news {i}",
        )
        for i in range(start, start + count)
    ]


async def index_of(client: aioredis.Redis, namespace: str) -> dict[str, Any]:
    """Every key of a namespace's agent index, by its name after the namespace, with its
    value (members with their scores, a watermark hash, an end, a whole mark)."""
    out: dict[str, Any] = {}
    for pattern in (f"{namespace}:idx:*", f"{namespace}:idx#*"):
        async for raw in client.scan_iter(pattern, count=1000):
            key = raw.decode()
            kind = (await client.type(raw)).decode()
            name = key[len(namespace) :]
            if kind == "zset":
                out[name] = await client.zrange(raw, 0, -1, withscores=True)
            elif kind == "hash":
                out[name] = await client.hgetall(raw)
            else:
                out[name] = await client.get(raw)
    return out


async def until_indexed(client: aioredis.Redis, namespace: str, agent: str, topic: str) -> None:
    """Until the workers indexed a retrieval of the agent (they consume memory.access): its
    member, or the watermark the cap left when it dropped it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        members = await client.zrange(f"{namespace}:idx:a:{agent}", 0, -1)
        dropped = await client.hkeys(f"{namespace}:idx#from:{agent}")
        if any(m.decode().startswith(f"{topic}:") for m in [*members, *dropped]):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no retrieval of {agent} indexed within 30 s")


async def test_a_replay_writes_the_index_the_live_workers_wrote(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"rix{uuid.uuid4().hex[:8]}."
    # A small cap, so that trimming and its watermarks are compared too.
    settings = isolated_settings(prefix, tmp_path, schedule_interval=0, agent_index_cap=12)
    topics = Topics(prefix)
    env = cli_env(settings, kafka_bootstrap, redis_server_url) | {"ENGRAM_AGENT_INDEX_CAP": "12"}
    client = aioredis.Redis.from_url(redis_server_url)
    ns = settings.redis_namespace
    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        assert node.pipeline is not None
        assert node.http_url is not None
        async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
            for start in range(0, 240, 30):
                await node.pipeline.stats.wait_for(await publisher.publish_many(events(start, 30)))
            async with AsyncEngramClient(node.http_url) as service:
                for agent in AGENTS[:3]:
                    await service.retrieve(agent, top_k=3)
            for agent in AGENTS[:3]:
                await until_indexed(client, ns, agent, topics.access)
            forget = ForgetAgent(
                event_id=str(uuid.uuid4()), agent_id=AGENTS[5], requested_at=datetime.now(UTC)
            )
            forgot = await request_forget(kafka_bootstrap, topics, forget)
            await node.pipeline.stats.wait_for([forgot])
            await node.pipeline.stats.wait_for(await publisher.publish_many(events(240, 30)))
        live = await index_of(client, ns)
        result = await invoke(["replay", "--no-switch", "--batch-size", "50"], env)
        assert result.exit_code == 0, result.output
        replayed = await index_of(client, f"{ns}.v1")
    finally:
        await node.stop()
        await client.aclose()

    # What the comparison covers: members of agents (some trimmed), retrievals, the ends and
    # the whole marks; the forgotten agent's index holds only what came after its erasure.
    assert {k for k in live if k.startswith(":idx:a:")} == {f":idx:a:{a}" for a in AGENTS}
    assert len(live[f":idx:a:{AGENTS[5]}"]) <= 2
    assert any(k.startswith(":idx#from:") for k in live)
    assert any(k.startswith(":idx#whole:") for k in live)
    assert any(k.startswith(f":idx#end:{topics.access}") for k in live)
    assert replayed == live

    # The new version's history reads by its index and equals the scan.
    index = AgentIndex.from_url(redis_server_url, f"{ns}.v1")
    try:
        async with log_sealer(redis_server_url, ns) as sealer:
            for agent in AGENTS[:2]:
                scan = await read_agent_events(
                    kafka_bootstrap, topics, agent, settings.partitions, sealer
                )
                indexed = await read_agent_events(
                    kafka_bootstrap, topics, agent, settings.partitions, sealer, index
                )
                assert build_timeline(agent, indexed.events) == build_timeline(agent, scan.events)
                assert build_timeline(agent, scan.events).counts["retrieved"] == 1
    finally:
        await index.close()
