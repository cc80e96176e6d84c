"""Qdrant Edge's group commit (``sync_every`` in ``projections/episodic/edge.py``) against a
real shard: an apply is readable at once, its flush and positions follow within ``sync_every``
(or at once for an erasure, on ``sync`` and on close), and a process killed in between leaves
the positions behind the data, so replaying from them restores what a one-by-one store holds."""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from projections.episodic.candidates import CandidateSignals
from projections.episodic.edge import POSITIONS_FILE, EdgeEpisodicMemory
from projections.episodic.edge_positions import read_positions
from schemas.memory_events import SourcePosition
from tests.integration.projections.lifecycle_events import agent_forgotten
from tests.integration.projections.test_episodic_candidates_contract import random_log
from tests.integration.projections.test_episodic_memory_contract import EMBEDDER, TOPIC

pytestmark = pytest.mark.integration

SEED = 3
"""random_log's partition: its events lie at offsets 0.. of (TOPIC, SEED)."""
ALL = CandidateSignals(1000, recency=True)
ROOT = Path(__file__).resolve().parents[3]


def on_disk(path: Path) -> int | None:
    return read_positions(path / POSITIONS_FILE).get((TOPIC, SEED))


async def test_an_apply_is_read_at_once_and_durable_within_sync_every(tmp_path: Path) -> None:
    store = EdgeEpisodicMemory.open(tmp_path, EMBEDDER.dim, sync_every=0.3)
    try:
        await store.apply(random_log("alice", 12, seed=SEED))
        assert await store.applied_offset(TOPIC, SEED) == 11
        assert await store.count("alice") == 12
        assert on_disk(tmp_path) is None, "the positions wait for the sync"
        deadline = time.monotonic() + 10
        while on_disk(tmp_path) is None and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        assert on_disk(tmp_path) == 11, "nothing else was applied, yet the timer synced"
    finally:
        await store.close()


async def test_sync_erasure_and_close_make_the_lag_durable(tmp_path: Path) -> None:
    store = EdgeEpisodicMemory.open(tmp_path, EMBEDDER.dim, sync_every=3600)
    log = random_log("alice", 20, seed=SEED)
    await store.apply(log[:5])
    assert on_disk(tmp_path) is None
    await store.sync()
    assert on_disk(tmp_path) == 4

    await store.apply(log[5:])
    assert on_disk(tmp_path) == 4
    erased_at = SourcePosition(topic=TOPIC, partition=SEED, offset=50)
    await store.apply([agent_forgotten("alice", position=erased_at)])
    assert on_disk(tmp_path) == 50, "an erasure does not wait for the timer"
    assert await store.count("alice") == 0

    await store.apply(random_log("bob", 8, seed=SEED)[:3])  # offsets 0-2: behind, no move
    await store.advance({(TOPIC, SEED): 60})
    assert on_disk(tmp_path) == 50
    await store.close()
    assert on_disk(tmp_path) == 60

    reopened = EdgeEpisodicMemory.open(tmp_path, EMBEDDER.dim)
    try:
        assert await reopened.count("bob") == 3
        assert await reopened.count("alice") == 0
    finally:
        await reopened.close()


KILLED = """
import asyncio, os, pickle, sys
from pathlib import Path
from projections.episodic.edge import EdgeEpisodicMemory
from tests.integration.projections.test_episodic_memory_contract import EMBEDDER

async def main() -> None:
    store = EdgeEpisodicMemory.open(Path(sys.argv[1]), EMBEDDER.dim, sync_every=3600)
    log = pickle.loads(Path(sys.argv[2]).read_bytes())
    await store.apply(log[:10])
    await store.sync()
    await store.apply(log[10:])
    os._exit(0)  # killed: no close, no sync

asyncio.run(main())
"""


async def test_a_killed_process_leaves_the_positions_behind_and_a_replay_restores(
    tmp_path: Path,
) -> None:
    log = random_log("alice", 30, seed=SEED)
    (tmp_path / "log.pickle").write_bytes(pickle.dumps(log))
    killed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", KILLED, str(tmp_path / "killed"), str(tmp_path / "log.pickle")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == 0, killed.stderr

    store = EdgeEpisodicMemory.open(tmp_path / "killed", EMBEDDER.dim)
    reference = EdgeEpisodicMemory.open(tmp_path / "reference", EMBEDDER.dim)
    try:
        applied = await store.applied_offset(TOPIC, SEED)
        assert applied == 9, "the positions vouch only for what was synced"
        # What a worker's takeover does: apply again what lies past the store's positions.
        await store.apply(
            [e for e in log if e.source_position and e.source_position.offset > applied]
        )
        await reference.apply(log)
        assert await store.applied_offset(TOPIC, SEED) == 29
        replayed = sorted(await store.candidates("alice", ALL), key=lambda m: m.memory_id)
        expected = sorted(await reference.candidates("alice", ALL), key=lambda m: m.memory_id)
        assert len(expected) == 30
        assert replayed == expected
    finally:
        await store.close()
        await reference.close()


def test_a_negative_sync_interval_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sync_every"):
        EdgeEpisodicMemory.open(tmp_path, EMBEDDER.dim, sync_every=-1)
