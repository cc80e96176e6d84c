"""A replay calls its version ready only once the version's stores are durable: the Edge store
it opens keeps ``ENGRAM_EDGE_SYNC_SECONDS``' group commit, so what it applied last may still
wait for a flush when the passes end, and "ready" is what a later switch or drop relies on."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from projections.episodic.edge import POSITIONS_FILE, EdgeEpisodicMemory
from projections.episodic.edge_positions import read_positions
from projections.versions import ProjectionStores, ProjectionVersion, VersionState
from schemas.agent_events import Observation
from schemas.topics import Topics
from streams.cli.rebuild import _replay_job
from streams.cli.version_stores import version_stores
from streams.eventlog.publisher import AsyncPublisher
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings, log_sealer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def test_a_replayed_version_is_ready_once_its_episodic_store_is_durable(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"ready{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(
        prefix,
        tmp_path / "live",
        schedule_interval=0,
        kafka_bootstrap=kafka_bootstrap,
        redis_url=redis_server_url,
        edge_sync_seconds=3600.0,  # the timer never syncs within the test
    )
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        assert node.pipeline is not None
        async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as publisher:
            recorded = [
                Observation(agent_id=f"R{i % 3}", importance=0.9, content=f"news {i}")
                for i in range(12)
            ]
            await node.pipeline.stats.wait_for(await publisher.publish_many(recorded))
    stores = version_stores(settings)
    opened: list[EdgeEpisodicMemory] = []
    at_ready: list[dict[tuple[str, int], int]] = []

    async def opening(version: ProjectionVersion) -> ProjectionStores:
        working, episodic = await stores.open_stores(version)
        assert isinstance(episodic, EdgeEpisodicMemory)
        opened.append(episodic)
        return working, episodic

    set_state = stores.versions.set_state

    async def noting(name: str, state: VersionState) -> None:
        if state == "ready":
            at_ready.append(read_positions(opened[0].path / POSITIONS_FILE))
        await set_state(name, state)

    stores.versions.set_state = noting  # type: ignore[method-assign]
    try:
        async with log_sealer(redis_server_url, settings.redis_namespace) as sealer:
            replay = _replay_job(settings, stores, None, 1_000, fence_timeout=10.0)
            report = await dataclasses.replace(replay, open_stores=opening, sealer=sealer).run(
                name="ready-1", switch=False
            )
        assert report.events > 0
        (path,) = (store.path for store in opened)
        closed = read_positions(path / POSITIONS_FILE)
        assert closed, "the replay applied nothing to its episodic store"
        assert at_ready == [closed], "the version was ready before its store was durable"
        await stores.drop(report.version)
    finally:
        await stores.versions.close()
