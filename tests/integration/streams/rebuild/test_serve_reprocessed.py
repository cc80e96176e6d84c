"""Serving a reprocessed version: `engram versions activate` moves the pointer, the running
worker (old configuration, old derived log) leaves without ever writing into the new version,
and a worker started with the new configuration continues the version's own derived log from
the raw offsets the reprocess committed: every raw record is derived into it exactly once."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from processors.embedding import embedder_from_name
from processors.summarising import ExtractiveSummariser
from projections.episodic.edge import EdgeEpisodicMemory
from projections.memory import StoredMemory
from projections.service.client import AsyncEngramClient
from projections.versions import (
    DerivedLog,
    ProjectionStores,
    ProjectionVersion,
    ProjectionVersions,
    WriteLock,
)
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import Observation
from schemas.memory_events import DerivedEvent, MemoryRecorded
from schemas.topics import Topics
from streams.eventlog.derived_log import read_partitions
from streams.eventlog.publisher import AsyncPublisher, Position
from streams.rebuild.from_log import rebuild_projections
from streams.rebuild.projection_switch import (
    ProjectionFollower,
    Serving,
    WrongConfigurationError,
)
from streams.runtime.node import Endpoints, Node
from streams.settings import EngramSettings, processing_config
from tests.integration.fixtures.qdrant import SharedQdrant
from tests.integration.streams.isolated import invoke, isolated_settings
from tests.integration.streams.rebuild.test_reprocess import configurations
from tests.integration.streams.worker_process import WorkerProcess, worker_environment

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

AGENTS = [f"S{i}" for i in range(4)]
WAIT_S = 90.0
UNSEALED = "off"
"""ENGRAM_KEYRING: per-agent sealing is beside the point here, and the logs are read back."""


def events(start: int, count: int) -> list[Observation]:
    """Importance 0.6 is working memory under the live threshold (0.7), episodic under 0.5."""
    return [
        Observation(
            agent_id=AGENTS[i % len(AGENTS)],
            year=1 + i // (6 * len(AGENTS)),
            importance=(0.3, 0.6, 0.9)[i % 3],
            content=f"harbour news {i}",
        )
        for i in range(start, start + count)
    ]


def env_of(settings: EngramSettings, bootstrap: str, redis_url: str) -> dict[str, str]:
    return {
        "ENGRAM_KAFKA_BOOTSTRAP": bootstrap,
        "ENGRAM_REDIS_URL": redis_url,
        "ENGRAM_TOPIC_PREFIX": settings.topic_prefix,
        "ENGRAM_REDIS_NAMESPACE": settings.redis_namespace,
        "ENGRAM_QDRANT_PATH": str(settings.edge_path()),
        "ENGRAM_PARTITIONS": str(settings.partitions),
        "ENGRAM_EPISODIC_THRESHOLD": str(settings.episodic_threshold),
        "ENGRAM_EMBEDDER": settings.embedder,
        "ENGRAM_SCHEDULE_INTERVAL": "0",
        "ENGRAM_KEYRING": UNSEALED,
    }


def config_version_of(settings: EngramSettings) -> str:
    embedder = embedder_from_name(settings.embedder)
    return processing_config(settings).version(embedder.id, ExtractiveSummariser().id)


def recorded_sources(log: list[DerivedEvent]) -> Counter[tuple[str, int, int]]:
    return Counter(
        (e.source_position.topic, e.source_position.partition, e.source_position.offset)
        for e in log
        if isinstance(e, MemoryRecorded) and e.source_position is not None
    )


def positions(sent: list[Position]) -> set[tuple[str, int, int]]:
    return {(p.topic, p.partition, p.offset) for p in sent}


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


async def test_an_activated_reprocessed_version_is_continued_by_workers_with_its_configuration(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"serve{uuid.uuid4().hex[:8]}."
    old_settings = isolated_settings(prefix, tmp_path, schedule_interval=0, keyring=UNSEALED)
    new_settings = isolated_settings(
        prefix,
        tmp_path,
        schedule_interval=0,
        keyring=UNSEALED,
        episodic_threshold=0.5,
        embedder="hashing-64",
    )
    new_config = config_version_of(new_settings)
    assert new_config != config_version_of(old_settings)
    env = env_of(new_settings, kafka_bootstrap, redis_server_url)
    endpoints = Endpoints(kafka_bootstrap, redis_server_url)
    topics, parts = Topics(prefix), range(old_settings.partitions)

    old = await Node(old_settings, endpoints).start()
    try:
        assert old.pipeline is not None
        async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
            before = await publisher.publish_many(events(0, 96))
            await old.pipeline.stats.wait_for(before, timeout=WAIT_S)

            reprocessed = await invoke(["reprocess", "--batch-size", "40"], env)
            assert reprocessed.exit_code == 0, reprocessed.output
            assert "engram versions activate v1" in reprocessed.stdout, reprocessed.stdout
            assert f"consumer group {prefix}engram.v1" in reprocessed.stdout

            # Published after the reprocess read the raw topics: the old worker derives them
            # into the old version; the version's own workers must derive them into v1 later.
            between = await publisher.publish_many(events(96, 48))
            await old.pipeline.stats.wait_for(between, timeout=WAIT_S)

            activated = await invoke(["versions", "activate", "v1"], env)
            assert activated.exit_code == 0, activated.output
            assert "switched (unversioned) -> v1" in activated.stdout, activated.stdout
            listing = await invoke(["versions"], env)
            assert listing.exit_code == 0, listing.output
            assert "v1 *" in listing.stdout, listing.stdout
            assert new_config in listing.stdout, listing.stdout
            # Piped, the table is as wide as its rows: none is folded over lines.
            rows = listing.stdout.splitlines()
            assert any("v1 *" in row and new_config in row for row in rows), listing.stdout
            await asyncio.wait_for(old.left.wait(), WAIT_S)
        assert old.left_reason is not None
        assert f"restart with configuration {new_config} to serve version v1" in (old.left_reason)
        # It never switched: its batches went on into the old stores and the old log only.
        assert old.version.name is None
        assert old.topics.items == topics.items
    finally:
        await old.stop()

    new = await Node(new_settings, endpoints).start()
    try:
        assert new.pipeline is not None
        assert new.processor is not None
        assert new.version.name == "v1"
        assert new.topics.items == f"{prefix}v1.memory.items"
        assert new.topics.observations == topics.observations
        assert new.processor.app.conf.id == f"{prefix}engram.v1"
        async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
            after = await publisher.publish_many(events(144, 48))
        await new.pipeline.stats.wait_for([*between, *after], timeout=WAIT_S)
        # It started at the reprocess's commits: the raw records derived there are not even
        # delivered again (none skipped by the fold either).
        assert new.pipeline.stats.events == len(between) + len(after)
        assert new.pipeline.stats.skipped == 0

        async with AsyncEngramClient(new.http_url or "") as client:
            answer = await client.retrieve(AGENTS[1], query="harbour news", top_k=50)
        assert answer.results
        # A 0.6 memory is episodic only under the new threshold, searched with 64-d vectors.
        assert any(m.store == "episodic" and m.importance == 0.6 for m in answer.results)
        # `engram history` reads the version's own log, as the query service does (it read
        # the old log, which stopped at the switch).
        history = await invoke(["history", AGENTS[1], "--json", "--limit", "1000"], env)
        assert history.exit_code == 0, history.output
        read_from = {e["position"]["topic"] for e in json.loads(history.stdout)["entries"]}
        assert read_from, history.stdout
        assert read_from <= {new.topics.items, new.topics.lifecycle, new.topics.access}
    finally:
        await new.stop()

    new_log = await read_partitions(
        kafka_bootstrap, (new.topics.items, new.topics.lifecycle), parts
    )
    old_log = await read_partitions(kafka_bootstrap, (topics.items, topics.lifecycle), parts)
    assert configurations(new_log) == {new_config}
    # Every raw record derived into v1's log exactly once, by the reprocess or the workers.
    in_new = recorded_sources(new_log)
    assert set(in_new) == positions([*before, *between, *after])
    assert set(in_new.values()) == {1}
    # The old worker stopped deriving at the switch.
    assert set(recorded_sources(old_log)) == positions([*before, *between])
    v1_ids = {e.memory_id for e in new_log if isinstance(e, MemoryRecorded)}
    assert {m.memory_id for m in answer.results if m.level == 0} <= v1_ids

    # The version's stores are exactly what its derived log says (nothing applied twice).
    registry = ProjectionVersions.from_url(
        redis_server_url, new_settings.redis_namespace, new_settings.qdrant_collection
    )
    try:
        v1 = registry.version("v1")
    finally:
        await registry.close()
    working = RedisWorkingMemory.from_url(redis_server_url, v1.redis_namespace)
    episodic = EdgeEpisodicMemory.open(new_settings.edge_path() / v1.qdrant_collection, 64)
    try:
        served = await snapshot(working, episodic)
    finally:
        await episodic.close()
        await working.close()
    check_working = RedisWorkingMemory.from_url(redis_server_url, f"check{uuid.uuid4().hex[:8]}")
    check_episodic = EdgeEpisodicMemory.open(tmp_path / "check", 64)
    try:
        await rebuild_projections(
            kafka_bootstrap, new.topics, parts, [check_working, check_episodic]
        )
        assert await snapshot(check_working, check_episodic) == served
    finally:
        await check_working.clear()
        await check_working.close()
        await check_episodic.close()
    assert sum(len(m) for m in served.values()) > 0


async def registered(settings: EngramSettings, redis_url: str, log: DerivedLog) -> None:
    """A ready version ``v1`` with ``log``, made active, as `engram reprocess` and
    `engram versions activate` leave it."""
    registry = ProjectionVersions.from_url(
        redis_url, settings.redis_namespace, settings.qdrant_collection
    )
    try:
        await registry.create("v1")
        await registry.set_derived_log("v1", log)
        await registry.set_state("v1", "ready")
        await registry.activate("v1")
    finally:
        await registry.close()


async def test_a_worker_with_another_configuration_refuses_to_start(
    redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"refuse{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path, schedule_interval=0)
    own = config_version_of(settings)
    embedder = embedder_from_name(settings.embedder).id
    log = DerivedLog(f"{prefix}v1.", f"{prefix}engram.v1", "0123456789ab", embedder)
    await registered(settings, redis_server_url, log)
    # No broker behind this address: the refusal comes before anything is touched.
    endpoints = Endpoints("127.0.0.1:9", redis_server_url)

    with pytest.raises(WrongConfigurationError) as refused:
        await Node(settings, endpoints, run_service=False).start()
    message = str(refused.value)
    assert "restart with configuration 0123456789ab to serve version v1" in message
    assert own in message

    # A query service embeds like the version did, so it starts (and serves v1).
    service = await Node(settings, Endpoints("", redis_server_url), run_processors=False).start()
    try:
        assert service.version.name == "v1"
    finally:
        await service.stop()

    env = env_of(settings, "127.0.0.1:9", redis_server_url)
    result = await invoke(["worker"], env)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())  # the console wraps long lines
    assert "restart with configuration 0123456789ab to serve version v1" in said
    assert own in said
    assert "Traceback" not in result.output

    # A replay would rebuild it from the live derived log, not from its own.
    replay = await invoke(["replay", "--into", "v1"], env)
    assert replay.exit_code == 2, replay.output
    assert "engram replay rebuilds only from the live one" in " ".join(replay.output.split())


async def test_a_running_worker_process_exits_asking_for_the_versions_configuration(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    """As a cluster runs it: `engram worker` finishes its batch, commits, and exits with code 3
    and one log line naming the configuration to restart with (its deployment restarts it)."""
    prefix = f"exit{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(
        prefix, tmp_path, schedule_interval=0, qdrant_path=tmp_path / "edge"
    )
    env = worker_environment(settings, kafka_bootstrap, redis_server_url)
    env["ENGRAM_KEYRING"] = UNSEALED
    worker = WorkerProcess(env, tmp_path / "worker.log")
    worker.start()
    try:
        for _ in range(int(WAIT_S / 0.1)):
            worker.check_alive()
            started = [r for r in worker.log_records() if r.get("msg") == "processors started"]
            if started:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the worker did not start:\n{worker.tail()}")
        embedder = embedder_from_name(settings.embedder).id
        # The log says which embedder the worker derives with (and, for MiniLM, its precision).
        assert started[0].get("embedder") == embedder, started
        log = DerivedLog(f"{prefix}v1.", f"{prefix}engram.v1", "0123456789ab", embedder)
        await registered(settings, redis_server_url, log)
        code = await asyncio.to_thread(worker.exit_code, WAIT_S)
        output = worker.tail()
        assert code == 3, output
        messages = [str(r.get("msg", "")) for r in worker.log_records()]
        assert any(
            "restart with configuration 0123456789ab to serve version v1" in m for m in messages
        ), output
        assert not any("switched projection version" in m for m in messages), output
    finally:
        worker.stop()


async def test_a_follower_that_cannot_serve_the_new_version_leaves_without_opening_it(
    redis_server_url: str,
) -> None:
    """The pointer moving is not enough to write into a version: the follower asks first."""
    namespace = f"follow{uuid.uuid4().hex[:8]}"
    registry = ProjectionVersions.from_url(redis_server_url, namespace, "c")
    log = DerivedLog("p.v1.", "p.engram.v1", "newconfig000", "hashing-64")
    serving = Serving(None, "oldconfig111", "hashing", derives=True, applies_log=True)
    opened: list[ProjectionVersion] = []
    left: list[str] = []

    async def open_stores(version: ProjectionVersion) -> ProjectionStores:
        opened.append(version)
        raise AssertionError("a refused version's stores must not be opened")

    async def on_switch(version: ProjectionVersion, stores: ProjectionStores) -> None:
        raise AssertionError("a refused version must not be switched to")

    async def refusal(version: ProjectionVersion) -> str | None:
        return serving.refusal(version, await registry.derived_log(version.name))

    working = RedisWorkingMemory.from_url(redis_server_url, namespace)
    follower = await ProjectionFollower(
        versions=registry,
        role="worker",
        version=registry.version(None),
        stores=(working, None),
        open_stores=open_stores,
        on_switch=on_switch,
        write_lock=WriteLock(),
        refusal=refusal,
        on_leave=lambda version, reason: left.append(reason),
        interval=0.05,
    ).start()
    try:
        await registry.create("v1")
        await registry.set_derived_log("v1", log)
        await registry.activate("v1")
        for _ in range(400):
            if follower.left_for is not None:
                break
            await asyncio.sleep(0.05)
        assert follower.left_for is not None
        assert follower.left_for[0].name == "v1"
        assert len(left) == 1
        assert "restart with configuration newconfig000 to serve version v1" in left[0]
        assert follower.version.name is None
        assert opened == []
        assert follower.switches == 0
    finally:
        await follower.stop()
        await working.close()
        await registry.close()


async def wait_until(done: Callable[[], bool]) -> None:
    for _ in range(int(WAIT_S / 0.05)):
        if done():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("not within the wait")


async def test_query_services_follow_a_version_embedded_like_them_and_read_its_log(
    redis_server_url: str, tmp_path: Path, shared_qdrant: SharedQdrant
) -> None:
    """A query service derives nothing, so it follows a reprocessed version and reads its
    derived log for histories; one whose embedder differs leaves like a worker. (The other
    reads a Qdrant server: one process of a deployment holds its Qdrant Edge shards.)"""
    prefix = f"svc{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path, keyring=UNSEALED)
    other = isolated_settings(
        prefix,
        tmp_path / "other",
        keyring=UNSEALED,
        embedder="hashing-64",
        qdrant_url=shared_qdrant.url,
        qdrant_collection=f"{prefix}other",
    )
    endpoints = Endpoints("", redis_server_url)  # no broker: no retrieval records, no history
    same = await Node(settings, endpoints, run_processors=False).start()
    different = await Node(other, endpoints, run_processors=False).start()
    try:
        assert same.topics.items == f"{prefix}memory.items"
        embedder = embedder_from_name(settings.embedder).id
        log = DerivedLog(f"{prefix}v1.", f"{prefix}engram.v1", "0123456789ab", embedder)
        await registered(settings, redis_server_url, log)
        await wait_until(lambda: same.version.name == "v1" and different.left.is_set())
        assert same.topics.items == f"{prefix}v1.memory.items"
        assert same.topics.access == f"{prefix}memory.access"
        assert not same.left.is_set()
        assert different.version.name is None
        assert different.left_reason is not None
        assert "restart with configuration 0123456789ab to serve version v1" in (
            different.left_reason
        )
    finally:
        await different.stop()
        await same.stop()


async def test_the_live_log_refuses_a_process_with_another_embedder(
    redis_server_url: str, tmp_path: Path
) -> None:
    """The live derived log had no recorded embedder: workers restarted with another one of
    the same dimension wrote a second vector space into its stores, and a query service with
    another one compared its queries with vectors of the first. The first process to derive
    records its embedder; a worker or query service with another is refused at start."""
    prefix = f"live{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path, schedule_interval=0)
    registry = ProjectionVersions.from_url(
        redis_server_url, settings.redis_namespace, settings.qdrant_collection
    )
    try:
        assert await registry.live_embedder() is None
        assert await registry.live_embedder(claim="hashing-v1-384") == "hashing-v1-384"
        assert await registry.live_embedder(claim="minilm-l6-v2-384") == "hashing-v1-384"
    finally:
        await registry.close()
    other = settings.model_copy(update={"embedder": "hashing-256"})
    # No broker behind this address: the refusal comes before anything is touched.
    for endpoints, processors in (
        (Endpoints("127.0.0.1:9", redis_server_url), True),
        (Endpoints("", redis_server_url), False),
    ):
        with pytest.raises(WrongConfigurationError) as refused:
            await Node(
                other, endpoints, run_processors=processors, run_service=not processors
            ).start()
        assert "live derived log is embedded with hashing-v1-384" in str(refused.value)
        assert "this process has embedder hashing-v1-256" in str(refused.value)

    service = await Node(settings, Endpoints("", redis_server_url), run_processors=False).start()
    await service.stop()


async def test_a_query_service_does_not_follow_back_to_a_live_log_of_another_embedder(
    redis_server_url: str, tmp_path: Path
) -> None:
    """The live log's embedder was checked at start only: a query service serving a version
    reprocessed with its embedder followed the pointer back to the live log, embedded with
    another, and compared its queries with vectors it cannot be compared with."""
    prefix = f"back{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path, keyring=UNSEALED, embedder="hashing-64")
    registry = ProjectionVersions.from_url(
        redis_server_url, settings.redis_namespace, settings.qdrant_collection
    )
    try:
        assert await registry.live_embedder(claim="hashing-v1-384") == "hashing-v1-384"
        embedder = embedder_from_name(settings.embedder).id
        log = DerivedLog(f"{prefix}v1.", f"{prefix}engram.v1", "0123456789ab", embedder)
        await registered(settings, redis_server_url, log)
        service = await Node(
            settings, Endpoints("", redis_server_url), run_processors=False
        ).start()
        try:
            assert service.version.name == "v1"
            await registry.activate(None)  # back to the live log
            await wait_until(service.left.is_set)
            assert service.version.name == "v1", "it switched"
            assert service.left_reason is not None
            assert "live derived log is embedded with hashing-v1-384" in service.left_reason
        finally:
            await service.stop()
    finally:
        await registry.close()
