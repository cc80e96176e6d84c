"""The stores a command opens for a version (``engram reprocess``, ``replay``, ``forget-agent``)
keep the Edge group commit of ``ENGRAM_EDGE_SYNC_SECONDS``, as a worker's do: a reprocess cut
at the live workers' small batches flushed its shard after every one of them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from projections.episodic.edge import POSITIONS_FILE, EdgeEpisodicMemory
from projections.episodic.edge_positions import read_positions
from projections.versions import ProjectionVersion
from streams.cli.version_stores import version_stores
from tests.integration.projections.test_episodic_candidates_contract import random_log
from tests.integration.projections.test_episodic_memory_contract import TOPIC
from tests.integration.streams.isolated import isolated_settings

pytestmark = pytest.mark.integration

SEED = 3
"""random_log's partition: its events lie at offsets 0.. of (TOPIC, SEED)."""


@pytest.mark.parametrize(("sync_seconds", "durable_at_once"), [(3600.0, False), (0.0, True)])
async def test_a_version_store_keeps_the_configured_sync_lag(
    kafka_bootstrap: str,
    redis_server_url: str,
    tmp_path: Path,
    sync_seconds: float,
    durable_at_once: bool,
) -> None:
    prefix = f"vstores{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(
        prefix,
        tmp_path,
        kafka_bootstrap=kafka_bootstrap,
        redis_url=redis_server_url,
        edge_sync_seconds=sync_seconds,
    )
    stores = version_stores(settings)
    version = ProjectionVersion("v1", f"{prefix}v1", "episodic_v1")
    try:
        working, episodic = await stores.open_stores(version)
        try:
            assert isinstance(episodic, EdgeEpisodicMemory)
            path = episodic.path
            await episodic.apply(random_log("alice", 12, seed=SEED))
            assert await episodic.applied_offset(TOPIC, SEED) == 11
            on_disk = read_positions(path / POSITIONS_FILE).get((TOPIC, SEED))
            assert on_disk == (11 if durable_at_once else None)
        finally:
            if episodic is not None:
                await episodic.close()
            await working.close()
        # Closing syncs whatever waited.
        assert read_positions(path / POSITIONS_FILE).get((TOPIC, SEED)) == 11
    finally:
        await stores.drop(version)
        await stores.versions.close()
