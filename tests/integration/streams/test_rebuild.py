"""`engram rebuild` puts the projections back from the log alone."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from projections.episodic.edge import EdgeEpisodicMemory
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.topics import Topics
from streams.cli import app as cli
from streams.publisher import AsyncPublisher
from streams.runtime import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_the_rebuild_command_gives_the_live_memories_back(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"rebuild{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path / "live", schedule_interval=0)
    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    events = [
        Observation(agent_id=f"R{i % 3}", year=1 + i // 9, importance=v, content=f"news {i}")
        for i, v in enumerate([0.3, 0.65, 0.9] * 20)
    ]
    try:
        assert node.pipeline is not None
        assert node.episodic is not None
        async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as publisher:
            await node.pipeline.stats.wait_for(await publisher.publish_many(events))
        live = {
            agent: [
                *await node.working.memories(agent),
                *await node.episodic.memories(agent, 1000, levels=None),
            ]
            for agent in ("R0", "R1", "R2")
        }
    finally:
        await node.stop()
    assert any(m.level == 1 for memories in live.values() for m in memories)

    namespace = f"rebuilt{uuid.uuid4().hex[:8]}"
    env = {
        "ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ENGRAM_REDIS_URL": redis_server_url,
        "ENGRAM_TOPIC_PREFIX": prefix,
        "ENGRAM_PARTITIONS": str(settings.partitions),
    }
    edge = tmp_path / "rebuilt"
    result = await asyncio.to_thread(
        CliRunner().invoke,
        cli,
        ["rebuild", "--namespace", namespace, "--qdrant-path", str(edge), "--batch-size", "50"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert "rebuilt" in result.stdout

    working = RedisWorkingMemory.from_url(redis_server_url, namespace)
    episodic = EdgeEpisodicMemory.open(edge / settings.qdrant_collection, node.embedder.dim)
    try:
        for agent, memories in live.items():
            rebuilt = [
                *await working.memories(agent),
                *await episodic.memories(agent, 1000, levels=None),
            ]
            assert rebuilt == memories, agent
    finally:
        await working.clear()
        await working.close()
        await episodic.close()
