"""`engram reprocess` re-derives every memory from the raw agent events with a new
configuration, into a derived log and a projection version of its own: the new rules route
differently, the new embedder's vectors live in a new space, and the live version and log are
left exactly as they were."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from projections.episodic.edge import EdgeEpisodicMemory
from projections.history import build_timeline
from projections.interfaces import ProjectionError
from projections.memory import StoredMemory
from projections.versions import ProjectionVersions
from projections.working.agent_index import AgentIndex
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.memory_events import (
    ConsolidationCompleted,
    DerivedEvent,
    MemoryForgotten,
    MemoryRecorded,
    MemoryWritten,
)
from schemas.topics import Topics
from streams.eventlog.derived_log import read_partitions
from streams.eventlog.history import read_agent_events
from streams.eventlog.kafka_clients import admin_client
from streams.eventlog.publisher import AsyncPublisher
from streams.privacy.keyring import RedisKeyring
from streams.privacy.sealing import RecordSealer
from streams.rebuild.from_log import rebuild_projections
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import cli_env, invoke, isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

AGENTS = [f"P{i}" for i in range(5)]
COUNT = 200


def events() -> list[Observation]:
    """Years advance every 8 events per agent, so consolidation and summaries happen too;
    importance 0.6 is working memory under the default threshold (0.7), episodic under 0.5."""
    return [
        Observation(
            agent_id=AGENTS[i % len(AGENTS)],
            year=1 + i // (8 * len(AGENTS)),
            importance=(0.3, 0.6, 0.9)[i % 3],
            content=f"river news {i}",
        )
        for i in range(COUNT)
    ]


async def snapshot(
    working: RedisWorkingMemory, episodic: EdgeEpisodicMemory
) -> dict[str, list[StoredMemory]]:
    return {
        agent: [
            *await working.memories(agent),
            *await episodic.memories(agent, 1000, levels=None),
        ]
        for agent in AGENTS
    }


async def opens_with(path: Path, dim: int) -> bool:
    """Whether the Edge shard at ``path`` holds vectors of ``dim`` (another dimension fails)."""
    try:
        store = EdgeEpisodicMemory.open(path, dim)
    except ProjectionError:
        return False
    await store.close()
    return True


def by_id(event: DerivedEvent) -> str:
    return event.event_id


def configurations(log: list[DerivedEvent]) -> set[str]:
    """The configuration versions the derivations of ``log`` carry."""
    derivations = (MemoryWritten, ConsolidationCompleted, MemoryForgotten)
    return {e.config_version for e in log if isinstance(e, derivations)}


def recordings(log: list[DerivedEvent], importance: float) -> list[MemoryRecorded]:
    return [e for e in log if isinstance(e, MemoryRecorded) and e.importance == importance]


async def test_reprocess_derives_a_new_version_with_the_new_rules_and_embedder(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"reproc{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path / "live", schedule_interval=0)
    topics = Topics(prefix)
    parts = range(settings.partitions)
    old_edge = settings.edge_path() / settings.qdrant_collection

    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        assert node.pipeline is not None
        live_version = node.pipeline.config_version
        async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
            await node.pipeline.stats.wait_for(await publisher.publish_many(events()))
    finally:
        await node.stop()

    old_working = RedisWorkingMemory.from_url(redis_server_url, settings.redis_namespace)
    old_episodic = EdgeEpisodicMemory.open(old_edge, 384)
    try:
        before = await snapshot(old_working, old_episodic)
    finally:
        await old_episodic.close()
    # Sealed with the agents' keys (the default keyring, in the session's Redis), as is the log
    # the reprocess writes: it opens the raw records and seals what it derives.
    keyring = RedisKeyring.from_url(redis_server_url, settings.redis_namespace)
    sealer = RecordSealer(keyring)
    old_log = await read_partitions(
        kafka_bootstrap, (topics.items, topics.lifecycle), parts, sealer=sealer
    )

    env = cli_env(
        settings,
        kafka_bootstrap,
        redis_server_url,
        ENGRAM_EPISODIC_THRESHOLD="0.5",
        ENGRAM_EMBEDDER="hashing-64",
    )
    result = await invoke(["reprocess", "--batch-size", "50"], env)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output

    new_topics = Topics(f"{prefix}v1.")
    new_log = await read_partitions(
        kafka_bootstrap, (new_topics.items, new_topics.lifecycle), parts, sealer=sealer
    )
    assert not await read_partitions(kafka_bootstrap, (new_topics.items,), parts), (
        "without the keys, none of the new log's recordings opens"
    )
    # Every derived event carries the new configuration version, which the CLI names.
    new_versions = configurations(new_log)
    assert len(new_versions) == 1, new_versions
    new_version = new_versions.pop()
    assert new_version != live_version
    assert f"configuration version {new_version}" in result.stdout, result.stdout
    assert new_topics.items in result.stdout
    assert "not switched" in result.stdout
    assert configurations(old_log) == {live_version}

    # One recording per raw event, named by the raw record's position, with the new rule and
    # the new embedder.
    recorded = [e for e in new_log if isinstance(e, MemoryRecorded)]
    assert len(recorded) == COUNT
    assert all(
        e.source_position is not None and e.source_position.topic == topics.observations
        for e in recorded
    )
    assert all(e.vector().shape == (64,) for e in recorded)
    assert {e.destination for e in recordings(new_log, 0.6)} == {"episodic"}
    assert {e.destination for e in recordings(old_log, 0.6)} == {"working"}
    assert any(e.event_type != "memory.recorded" for e in new_log)

    registry = ProjectionVersions.from_url(
        redis_server_url, settings.redis_namespace, settings.qdrant_collection
    )
    try:
        assert (await registry.active()).name is None
        states = {i.version.name: i.state for i in await registry.versions()}
        assert states.get("v1") == "ready", states
    finally:
        await registry.close()

    new_edge = settings.edge_path() / f"{settings.qdrant_collection}_v1"
    assert not await opens_with(new_edge, 384)
    new_working = RedisWorkingMemory.from_url(redis_server_url, f"{settings.redis_namespace}.v1")
    new_episodic = EdgeEpisodicMemory.open(new_edge, 64)
    try:
        after_new = await snapshot(new_working, new_episodic)
    finally:
        await new_episodic.close()
        await new_working.close()

    # The new version holds the 0.6 memories as episodic recordings; the old one never did.
    new_ids_06 = {e.memory_id for e in recordings(new_log, 0.6)}
    old_ids_06 = {e.memory_id for e in recordings(old_log, 0.6)}
    for agent in AGENTS:
        episodic_06 = {
            m.memory_id
            for m in after_new[agent]
            if m.destination == "episodic" and m.memory_id in new_ids_06
        }
        assert episodic_06, agent
        assert not {m.memory_id for m in before[agent] if m.destination == "episodic"} & (
            old_ids_06
        ), agent

    # The new version is what its own derived log says: a rebuild from it gives the same.
    check_working = RedisWorkingMemory.from_url(redis_server_url, f"check{uuid.uuid4().hex[:8]}")
    check_episodic = EdgeEpisodicMemory.open(tmp_path / "check", 64)
    try:
        await rebuild_projections(
            kafka_bootstrap, new_topics, parts, [check_working, check_episodic], sealer=sealer
        )
        assert await snapshot(check_working, check_episodic) == after_new
    finally:
        await check_working.clear()
        await check_working.close()
        await check_episodic.close()

    # The live version and the live derived log are untouched.
    old_episodic = EdgeEpisodicMemory.open(old_edge, 384)
    try:
        assert await snapshot(old_working, old_episodic) == before
    finally:
        await old_episodic.close()
        await old_working.close()
    again = await read_partitions(
        kafka_bootstrap, (topics.items, topics.lifecycle), parts, sealer=sealer
    )
    # The reprocess indexed the version's derived log as a worker does: a history of the new
    # version reads the agent's own records by the index, and equals the scan.
    served = Topics(prefix, f"{prefix}v1.")
    index = AgentIndex.from_url(redis_server_url, f"{settings.redis_namespace}.v1")
    try:
        for agent in AGENTS[:2]:
            scan = await read_agent_events(
                kafka_bootstrap, served, agent, settings.partitions, sealer
            )
            indexed = await read_agent_events(
                kafka_bootstrap, served, agent, settings.partitions, sealer, index
            )
            assert indexed.indexed, agent
            assert build_timeline(agent, indexed.events) == build_timeline(agent, scan.events)
            assert build_timeline(agent, scan.events).counts["recorded"] == COUNT // len(AGENTS)
    finally:
        await index.close()
    await keyring.close()
    # (partitions are read together, so compare in one order)
    assert sorted(again, key=by_id) == sorted(old_log, key=by_id)

    # A version name used before is refused rather than mixed into.
    refused = await invoke(["reprocess", "--version", "v1"], env)
    assert refused.exit_code == 2, refused.output
    assert "exists already" in refused.output
    assert "Traceback" not in refused.output

    # Dropping the version asks what becomes of its own derived log; --with-log deletes it, so
    # the name can be reprocessed into again (its topics held records, which a reprocess
    # refuses to mix into).
    kept = await invoke(["versions", "drop", "v1"], env)
    assert kept.exit_code == 2, kept.output
    assert "--with-log" in kept.output
    assert new_topics.items in kept.output
    dropped = await invoke(["versions", "drop", "v1", "--with-log"], env)
    assert dropped.exit_code == 0, dropped.output
    admin = admin_client(kafka_bootstrap)
    await admin.start()
    try:
        left = set(await admin.list_topics()) & {
            new_topics.items,
            new_topics.lifecycle,
            new_topics.deadletter,
            new_topics.snapshots,
        }
    finally:
        await admin.close()
    assert left == set()
    again_v1 = await invoke(["reprocess", "--version", "v1", "--batch-size", "50"], env)
    assert again_v1.exit_code == 0, again_v1.output
