"""A replay or reprocess uses the version it builds: `engram versions drop` waits for it (and
then refuses) instead of deleting the stores under it, which failed the build half way on an
Edge IO error."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from projections.versions import (
    ProjectionStores,
    ProjectionVersion,
    ProjectionVersions,
    SwitchError,
    wait_until_unused,
)
from schemas.agent_events import Observation
from schemas.topics import Topics
from streams.cli.rebuild import _replay_job, _reprocess_job
from streams.cli.version_stores import version_stores
from streams.eventlog.publisher import AsyncPublisher
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings, log_sealer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def _users(versions: ProjectionVersions, version: ProjectionVersion) -> list[str]:
    return [m.role for m in await versions.members() if m.uses(version.name)]


@pytest.mark.parametrize("job", ["replay", "reprocess"])
async def test_a_version_being_built_is_in_use_until_its_build_ends(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path, job: str
) -> None:
    prefix = f"build{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(
        prefix,
        tmp_path / "live",
        schedule_interval=0,
        kafka_bootstrap=kafka_bootstrap,
        redis_url=redis_server_url,
    )
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        assert node.pipeline is not None
        async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as publisher:
            recorded = [
                Observation(agent_id=f"B{i % 3}", importance=0.9, content=f"news {i}")
                for i in range(12)
            ]
            await node.pipeline.stats.wait_for(await publisher.publish_many(recorded))
        stores = version_stores(settings)
        seen: list[list[str]] = []

        async def opening(version: ProjectionVersion) -> ProjectionStores:
            """Where the build has begun: the version is in use by it, so a drop waits."""
            seen.append(await _users(stores.versions, version))
            with pytest.raises(SwitchError, match=f"still in use by {job}"):
                await wait_until_unused(stores.versions, version, timeout=0.3)
            return await stores.open_stores(version)

        try:
            async with log_sealer(redis_server_url, settings.redis_namespace) as sealer:
                if job == "replay":
                    replay = _replay_job(settings, stores, None, 1_000, fence_timeout=10.0)
                    report = await dataclasses.replace(
                        replay, open_stores=opening, sealer=sealer
                    ).run(name="built-1", switch=False)
                else:
                    reprocess = _reprocess_job(settings, stores, batch_size=1_000)(sealer)
                    report = await dataclasses.replace(reprocess, open_stores=opening).run(
                        name="built-1"
                    )
            assert seen == [[job]]
            # The build is over: nobody uses the version, and a drop goes ahead at once.
            assert await _users(stores.versions, report.version) == []
            await wait_until_unused(stores.versions, report.version, timeout=0.0)
            await stores.drop(report.version)
            assert "built-1" not in [i.version.name for i in await stores.versions.versions()]
        finally:
            await stores.versions.close()
