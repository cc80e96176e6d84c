"""`engram replay` builds a new projection version from the log while the system runs, switches
the running processes to it, and drops the old one: nothing lost, nothing doubled."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest

from projections.episodic.edge import EdgeEpisodicMemory
from projections.memory import StoredMemory
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.topics import Topics
from streams.eventlog.publisher import AsyncPublisher, Position
from streams.rebuild.from_log import rebuild_projections
from streams.rebuild.replay import DerivedLogCursor
from streams.runtime.node import Endpoints, Node
from tests.integration.fixtures.qdrant import SharedQdrant
from tests.integration.streams.isolated import cli_env, invoke, isolated_settings, log_sealer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

AGENTS = [f"R{i}" for i in range(6)]


def events(start: int, count: int) -> list[Observation]:
    """Years advance every 12 events per agent, so consolidation and summaries happen too."""
    return [
        Observation(
            agent_id=AGENTS[i % len(AGENTS)],
            year=1 + i // (12 * len(AGENTS)),
            importance=(0.3, 0.65, 0.9)[i % 3],
            content=f"news {i}",
        )
        for i in range(start, start + count)
    ]


async def contents(node: Node) -> dict[str, list[StoredMemory]]:
    assert node.episodic is not None
    return {
        agent: [
            *await node.working.memories(agent),
            *await node.episodic.memories(agent, 1000, levels=None),
        ]
        for agent in AGENTS
    }


@pytest.fixture(params=["edge", "qdrant-client"])
def qdrant(request: pytest.FixtureRequest) -> SharedQdrant | None:
    """The episodic backend of the deployment: None for Qdrant Edge, else where the
    qdrant-client adapter's collections are."""
    if request.param == "edge":
        return None
    shared: SharedQdrant = request.getfixturevalue("shared_qdrant")
    return shared


async def test_replay_switches_a_running_node_to_a_new_version_and_drops_the_old(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path, qdrant: SharedQdrant | None
) -> None:
    prefix = f"replay{uuid.uuid4().hex[:8]}."
    on_client: dict[str, str] = {}
    if qdrant is not None:
        on_client = {"qdrant_url": qdrant.url, "qdrant_collection": f"{prefix}episodic"}
    settings = isolated_settings(prefix, tmp_path / "live", schedule_interval=0, **on_client)
    topics = Topics(prefix)
    env = cli_env(
        settings,
        kafka_bootstrap,
        redis_server_url,
        **{f"ENGRAM_{name.upper()}": value for name, value in on_client.items()},
    )
    node = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        assert node.pipeline is not None
        assert node.follower is not None
        assert node.version.name is None
        old_edge = settings.edge_path() / settings.qdrant_collection
        async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
            await node.pipeline.stats.wait_for(await publisher.publish_many(events(0, 300)))
            if qdrant is not None:
                assert (await qdrant.client.count(settings.qdrant_collection)).count > 0

            # The agents keep publishing while the replay runs: its tail passes and the fence
            # must catch what arrives meanwhile.
            async def keep_publishing() -> list[Position]:
                sent = []
                for start in range(300, 600, 20):
                    sent += await publisher.publish_many(events(start, 20))
                    await asyncio.sleep(0.05)
                return sent

            during = asyncio.create_task(keep_publishing())
            result = await invoke(["replay", "--batch-size", "100", "--drop-old"], env)
            sent_during = await during
            assert result.exit_code == 0, result.output
            assert "switched (unversioned) -> v1" in result.stdout, result.stdout
            assert "dropped version (unversioned)" in result.stdout, result.stdout

            assert node.version.name == "v1"
            assert node.working.namespace == f"{settings.redis_namespace}.v1"
            # The workers and the history follow to the index the replay wrote.
            assert node.agent_index is not None
            assert node.agent_index.namespace == f"{settings.redis_namespace}.v1"
            assert node.pipeline.agent_index is node.agent_index
            await node.pipeline.stats.wait_for(sent_during)
            await node.pipeline.stats.wait_for(await publisher.publish_many(events(600, 60)))

        # The old version is gone: its Redis keys and its Edge shard directory.
        old = RedisWorkingMemory.from_url(redis_server_url, settings.redis_namespace)
        try:
            assert all([await old.memories(agent) == [] for agent in AGENTS])
        finally:
            await old.close()
        if qdrant is None:
            assert not old_edge.exists()
        else:
            assert not await qdrant.client.collection_exists(settings.qdrant_collection)

        # The query service answers from the new version.
        async with httpx.AsyncClient(base_url=node.http_url or "") as http:
            answer = await http.post(f"/v1/agents/{AGENTS[0]}/retrieve", json={"top_k": 3})
            assert answer.status_code == 200, answer.text
            assert any("news 6" in m["content"] for m in answer.json()["results"])
        live = await contents(node)
        listing = await invoke(["versions"], env)
        assert listing.exit_code == 0, listing.output
        assert "v1 *" in listing.stdout
        assert "active" in listing.stdout
    finally:
        await node.stop()

    # Exactly what the log says: the switched-to version equals a rebuild from scratch.
    assert sum(len(m) for m in live.values()) > 0
    working = RedisWorkingMemory.from_url(redis_server_url, f"check{uuid.uuid4().hex[:8]}")
    episodic = EdgeEpisodicMemory.open(tmp_path / "check", node.embedder.dim)
    sealing = log_sealer(redis_server_url, settings.redis_namespace)
    try:
        async with sealing as sealer:
            await rebuild_projections(
                kafka_bootstrap,
                topics,
                range(settings.partitions),
                [working, episodic],
                sealer=sealer,
            )
        for agent in AGENTS:
            rebuilt = [
                *await working.memories(agent),
                *await episodic.memories(agent, 1000, levels=None),
            ]
            assert rebuilt == live[agent], agent
        assert any(m.level == 1 for m in live[AGENTS[0]])
    finally:
        await working.clear()
        await working.close()
        await episodic.close()


async def test_replay_refuses_what_it_cannot_do_with_a_readable_error(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    env = {
        "ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ENGRAM_REDIS_URL": redis_server_url,
        "ENGRAM_REDIS_NAMESPACE": f"refuse{uuid.uuid4().hex[:8]}",
        "ENGRAM_QDRANT_PATH": str(tmp_path / "edge"),
    }
    cases = {
        ("replay", "--since", "2026-01-01"): "--since needs --into",
        ("replay", "--into", "nope"): "no projection version 'nope'",
        ("replay", "--version", "Bad Name"): "version name",
        ("replay", "--resume"): "--resume needs --version",
        ("versions", "drop", "nope"): "no projection version 'nope'",
    }
    for args, message in cases.items():
        result = await invoke(list(args), env)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output


async def test_a_retried_replay_resumes_its_own_version_and_then_does_nothing(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    """What a Kubernetes Job that runs ``engram replay --version NAME --resume`` again after a
    failure gets: the version the first attempt left half built, finished and switched to;
    a run after the switch changes nothing; never a second version."""
    prefix = f"resume{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path / "live", schedule_interval=0)
    env = cli_env(settings, kafka_bootstrap, redis_server_url)
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        assert node.pipeline is not None
        async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as publisher:
            await node.pipeline.stats.wait_for(await publisher.publish_many(events(0, 120)))
        live = {agent: await node.working.memories(agent) for agent in AGENTS}
        # A first attempt that died after registering its version (the state it leaves).
        await node.versions.create("rebuild-1", note="engram replay")

        refused = await invoke(["replay", "--version", "rebuild-1"], env)
        assert refused.exit_code == 2, refused.output
        assert "exists already" in refused.output

        resumed = await invoke(["replay", "--version", "rebuild-1", "--resume"], env)
        assert resumed.exit_code == 0, resumed.output
        assert "resuming version rebuild-1" in resumed.stdout
        assert "switched (unversioned) -> rebuild-1" in resumed.stdout, resumed.stdout
        rebuilt = RedisWorkingMemory.from_url(
            redis_server_url, f"{settings.redis_namespace}.rebuild-1"
        )
        try:
            assert {agent: await rebuilt.memories(agent) for agent in AGENTS} == live
        finally:
            await rebuilt.close()

        again = await invoke(["replay", "--version", "rebuild-1", "--resume"], env)
        assert again.exit_code == 0, again.output
        assert "active already" in again.stdout
        names = [info.version.name for info in await node.versions.versions()]
        assert names.count("rebuild-1") == 1
        assert not [n for n in names if n not in (None, "rebuild-1")], names


async def test_reading_every_partition_at_once_reads_what_reading_each_does(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    """The tail passes and the fenced pass read all partition numbers in two reads of the
    broker (DerivedLogCursor.read_many): the same records, in the same order, with the same
    positions and markers as reading each partition number on its own."""
    prefix = f"together{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path / "live", schedule_interval=0)
    topics = Topics(prefix)
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        assert node.pipeline is not None
        async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
            await node.pipeline.stats.wait_for(await publisher.publish_many(events(0, 200)))
    async with log_sealer(redis_server_url, settings.redis_namespace) as sealer:
        parts = list(range(settings.partitions))
        each = DerivedLogCursor(kafka_bootstrap, topics, parts, sealer=sealer)
        together = DerivedLogCursor(kafka_bootstrap, topics, parts, sealer=sealer)
        # Lower bounds on Tansu, which reports a partition's end at its last batch's start.
        assert await each.start_at(None) == await together.start_at(None) > 0
        assert await together.backlog() > 0
        one_by_one = {p: await each.read(p) for p in parts}
        all_at_once = await together.read_many(parts)
    assert all_at_once == one_by_one
    assert sum(map(len, all_at_once.values())) > 200
    assert (together.next_offset, together.upto) == (each.next_offset, each.upto)
    assert await together.backlog() == 0
