"""`engram forget-agent`: the agent's memories leave the projections, its events on every topic
can no longer be read, a rebuild from the log does not bring them back, and the agent may start
a new life. Real broker, Redis (projections and keyring) and Qdrant Edge."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import ConsumerRecord, TopicPartition

from projections.episodic.edge import EdgeEpisodicMemory
from projections.memory import StoredMemory
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.codec import DecodeError
from schemas.topics import Topics
from streams.eventlog.derived_log import read_to_end
from streams.eventlog.publisher import AsyncPublisher
from streams.privacy.keyring import RedisKeyring
from streams.privacy.sealing import FORGOTTEN, RecordSealer
from streams.rebuild.from_log import rebuild_projections
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import cli_env, invoke, isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FORGOTTEN_AGENT, KEPT_AGENT = "F1", "K1"


def events() -> list[Observation]:
    """Two agents over two years: working and episodic memories, summaries, a consolidation."""
    return [
        Observation(
            agent_id=agent,
            year=1 + i // 10,
            step=i,
            importance=(0.4, 0.95)[i % 2],
            content=f"secret-{agent}-{i} about the river",
        )
        for i in range(24)
        for agent in (FORGOTTEN_AGENT, KEPT_AGENT)
    ]


async def memories(working: Any, episodic: Any, agent: str) -> list[StoredMemory]:
    return [
        *await working.memories(agent),
        *await episodic.memories(agent, 1000, levels=None),
    ]


async def every_record(bootstrap: str, topics: Topics, partitions: int) -> list[bytes]:
    values: list[bytes] = []

    def keep(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        if record.value is not None:
            values.append(record.value)

    tps = [TopicPartition(t, p) for t in topics.all() for p in range(partitions)]
    await read_to_end(bootstrap, tps, keep, timeout=60)
    return values


async def test_a_forgotten_agent_leaves_the_projections_and_the_readable_log(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"forget{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path / "live", schedule_interval=0)
    topics = Topics(prefix)
    env = cli_env(settings, kafka_bootstrap, redis_server_url)
    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        assert node.pipeline is not None
        assert node.episodic is not None
        assert isinstance(node.keyring, RedisKeyring)  # the default with a Redis
        async with AsyncPublisher(kafka_bootstrap, topics=topics, keyring=node.keyring) as pub:
            await node.pipeline.stats.wait_for(await pub.publish_many(events()))
            # The query names what the agent asked: its record on memory.access is sealed too.
            retrieved = await invoke(
                ["retrieve", FORGOTTEN_AGENT, "--query", "secret-F1 river", "--top-k", "3"],
                {**env, "ENGRAM_URL": node.http_url or ""},
            )
        mine = await memories(node.working, node.episodic, FORGOTTEN_AGENT)
        theirs = await memories(node.working, node.episodic, KEPT_AGENT)
        assert {m.destination for m in mine} == {"working", "episodic"}
        assert any(m.level == 1 for m in mine), "summaries of the agent exist too"

        # Sealed on every topic, raw and derived: the content is nowhere in clear.
        logged = await every_record(kafka_bootstrap, topics, settings.partitions)
        assert len(logged) > len(events())
        assert not [v for v in logged if b"secret-" in v]

        # A publisher that runs through the forget (an MCP tool server's) holds the old key.
        living = await AsyncPublisher(kafka_bootstrap, topics=topics, keyring=node.keyring).start()
        await node.pipeline.stats.wait_for([await living.observe(FORGOTTEN_AGENT, "old life")])
        result = await invoke(
            ["forget-agent", FORGOTTEN_AGENT, "--yes", "--json", "--reason", "asked"], env
        )
        assert result.exit_code == 0, result.output
        report = orjson.loads(result.stdout)
        assert report["active_version_erased"] is True
        assert len(report["keys_deleted"]) == 1
        assert report["keys_remaining"] == []

        assert await memories(node.working, node.episodic, FORGOTTEN_AGENT) == []
        assert await node.episodic.count(FORGOTTEN_AGENT) == 0

        # A mistyped id: nothing of it was ever sealed, and the output says so.
        typo = await invoke(["forget-agent", f"{FORGOTTEN_AGENT}X", "--yes"], env)
        assert typo.exit_code == 0, typo.output
        assert "had no sealing key" in typo.output
        assert "is the id right?" in " ".join(typo.output.split())
        assert await memories(node.working, node.episodic, KEPT_AGENT) == theirs

        # The log: none of the forgotten agent's records opens any more, the others do.
        keyring = RedisKeyring.from_url(redis_server_url, settings.redis_namespace)
        try:
            logged = await every_record(kafka_bootstrap, topics, settings.partitions)
            opened = await RecordSealer(keyring).open_all(list(logged))
        finally:
            await keyring.close()
        forgotten = [o for o in opened if isinstance(o, DecodeError) and o.kind == FORGOTTEN]
        readable = [o for o in opened if isinstance(o, bytes)]
        assert len(forgotten) >= len(events()) // 2
        assert not [o for o in opened if isinstance(o, DecodeError) and o.kind != FORGOTTEN]
        assert not [r for r in readable if f"secret-{FORGOTTEN_AGENT}".encode() in r]
        assert [r for r in readable if f"secret-{KEPT_AGENT}".encode() in r]

        # The history shows the erasure, and nothing of what was forgotten.
        history = await invoke(["history", FORGOTTEN_AGENT, "--json"], env)
        assert history.exit_code == 0, history.output
        entries = orjson.loads(history.stdout)["entries"]
        assert [e["kind"] for e in entries] == ["agent_forgotten"]

        # The agent may publish again: a new life, with a new key, from the running publisher
        # too (it sealed with the deleted key for 5 s, and the command waited them out).
        again = await living.observe(FORGOTTEN_AGENT, "a new life", importance=0.9, year=5)
        await node.pipeline.stats.wait_for([again])
        await living.close()
        reborn = await memories(node.working, node.episodic, FORGOTTEN_AGENT)
        assert [m.content for m in reborn] == ["a new life"]
        live_kept = await memories(node.working, node.episodic, KEPT_AGENT)
    finally:
        await node.stop()

    # A rebuild from the log does not bring the forgotten memories back.
    keyring = RedisKeyring.from_url(redis_server_url, settings.redis_namespace)
    working = RedisWorkingMemory.from_url(redis_server_url, f"check{uuid.uuid4().hex[:8]}")
    episodic = EdgeEpisodicMemory.open(tmp_path / "check", node.embedder.dim)
    try:
        await rebuild_projections(
            kafka_bootstrap,
            topics,
            range(settings.partitions),
            [working, episodic],
            sealer=RecordSealer(keyring),
        )
        rebuilt = await memories(working, episodic, FORGOTTEN_AGENT)
        assert [m.content for m in rebuilt] == ["a new life"]
        assert await memories(working, episodic, KEPT_AGENT) == live_kept
    finally:
        await working.clear()
        await working.close()
        await episodic.close()
        await keyring.close()
    assert retrieved.exit_code == 0, retrieved.output


async def test_forget_agent_explains_bad_input_and_a_missing_worker(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"forgetbad{uuid.uuid4().hex[:8]}."
    env = {
        "ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ENGRAM_REDIS_URL": redis_server_url,
        "ENGRAM_TOPIC_PREFIX": prefix,
        "ENGRAM_REDIS_NAMESPACE": prefix.rstrip("."),
        "ENGRAM_QDRANT_PATH": str(tmp_path / "edge"),
    }
    bad = await invoke(["forget-agent", "no spaces please", "--yes"], env)
    assert bad.exit_code == 2
    assert "'no spaces please' is not an agent id: it must be" in bad.output
    assert "Traceback" not in bad.output

    # Nobody processes the request: a bounded wait, then where the request is and what to do.
    waiting = await invoke(["forget-agent", "H001", "--yes", "--timeout", "1"], env)
    assert waiting.exit_code == 1, waiting.output
    assert f"{prefix}memory.schedule" in waiting.output
    assert "no worker completed it" in waiting.output


async def test_forget_agent_erases_a_version_reprocessed_with_another_embedder(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    """An inactive version holds its own embedder's vectors (64 here, 384 live): the erasure
    opens it with that size, whatever the embedder configured now."""
    prefix = f"forgetdim{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path / "live", schedule_interval=0)
    topics = Topics(prefix)
    env = cli_env(settings, kafka_bootstrap, redis_server_url)
    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        assert node.pipeline is not None
        assert node.episodic is not None
        async with AsyncPublisher(kafka_bootstrap, topics=topics, keyring=node.keyring) as pub:
            await node.pipeline.stats.wait_for(await pub.publish_many(events()))
        reprocessed = await invoke(["reprocess"], {**env, "ENGRAM_EMBEDDER": "hashing-64"})
        assert reprocessed.exit_code == 0, reprocessed.output

        v1_edge = settings.edge_path() / f"{settings.qdrant_collection}_v1"
        v1_working = RedisWorkingMemory.from_url(redis_server_url, f"{settings.redis_namespace}.v1")
        v1_episodic = EdgeEpisodicMemory.open(v1_edge, 64)
        try:
            assert await memories(v1_working, v1_episodic, FORGOTTEN_AGENT)
            v1_kept = await memories(v1_working, v1_episodic, KEPT_AGENT)
            assert v1_kept
        finally:
            await v1_episodic.close()

        result = await invoke(["forget-agent", FORGOTTEN_AGENT, "--yes", "--json"], env)
        assert result.exit_code == 0, result.output
        report = orjson.loads(result.stdout)
        assert report["active_version_erased"] is True
        assert report["other_versions_erased"] == ["v1"]

        assert await memories(node.working, node.episodic, FORGOTTEN_AGENT) == []
        assert await memories(node.working, node.episodic, KEPT_AGENT)
        v1_episodic = EdgeEpisodicMemory.open(v1_edge, 64)
        try:
            assert await memories(v1_working, v1_episodic, FORGOTTEN_AGENT) == []
            assert await memories(v1_working, v1_episodic, KEPT_AGENT) == v1_kept
        finally:
            await v1_episodic.close()
            await v1_working.close()
    finally:
        await node.stop()
