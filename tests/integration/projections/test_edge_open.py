"""A second opener of a live Qdrant Edge store, in another process or in this one, is refused
before Edge touches the shard, and the store it was refused goes on writing durably.

A refused ``engram serve`` pointed at the directory ``engram up`` held used to remove a
segment's tracker journal while Edge tried to load the shard, and every later sync of the
running holder failed on it.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from projections.episodic.edge import EdgeEpisodicMemory
from projections.episodic.edge_open import LOCK_FILE
from projections.interfaces import ProjectionError
from tests.integration.fixtures.qdrant import EMBEDDING_DIM
from tests.integration.projections.test_episodic_memory_contract import log_of, numbered, state_of

pytestmark = pytest.mark.integration

OPEN_ELSEWHERE = """
import sys
from pathlib import Path
from projections.episodic.edge import EdgeEpisodicMemory
from projections.interfaces import ProjectionError
try:
    EdgeEpisodicMemory.open(Path(sys.argv[1]), int(sys.argv[2]))
except ProjectionError as exc:
    print(exc)
    sys.exit(3)
print("opened")
"""


def files_of(path: Path) -> set[Path]:
    return {p.relative_to(path) for p in path.rglob("*") if p.is_file()}


async def test_a_second_process_is_refused_and_the_holder_goes_on_syncing(tmp_path: Path) -> None:
    path = tmp_path / "held"
    store = EdgeEpisodicMemory.open(path, EMBEDDING_DIM)
    try:
        await store.apply(log_of("alice", numbered("alice", 6)))
        await store.sync()
        before = files_of(path)
        refused = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", OPEN_ELSEWHERE, str(path), str(EMBEDDING_DIM)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).parents[3],
        )
        assert files_of(path) == before, "the refused opener changed the store's files"
        assert refused.returncode == 3, refused.stdout + refused.stderr
        holder = f"{socket.gethostname()} pid {os.getpid()}"
        assert f"held by another process or store: {holder}): " in refused.stdout
        # The holder writes on, durably: a flush after more memories succeeds.
        await store.apply(log_of("bob", numbered("bob", 6), first_offset=6))
        await store.sync()
        _, memories, _ = await state_of(store, "alice", "bob")
        assert (len(memories["alice"]), len(memories["bob"])) == (6, 6)
    finally:
        await store.close()
    assert (path / LOCK_FILE).read_text() == f"{socket.gethostname()} pid {os.getpid()}"
    reopened = EdgeEpisodicMemory.open(path, EMBEDDING_DIM)  # closed, the lock is free again
    await reopened.close()


async def test_a_second_store_in_this_process_is_refused(tmp_path: Path) -> None:
    store = EdgeEpisodicMemory.open(tmp_path / "held", EMBEDDING_DIM)
    try:
        with pytest.raises(ProjectionError, match="held by another process or store: this process"):
            EdgeEpisodicMemory.open(tmp_path / "held", EMBEDDING_DIM)
    finally:
        await store.close()


async def test_a_store_that_failed_to_open_leaves_its_directory_free(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="optimize"):
        EdgeEpisodicMemory.open(tmp_path / "s", EMBEDDING_DIM, optimize_every=-1)
    gc.collect()
    reopened = EdgeEpisodicMemory.open(tmp_path / "s", EMBEDDING_DIM)
    await reopened.close()


async def test_a_store_dropped_unclosed_lets_go_of_its_directory(tmp_path: Path) -> None:
    """As Edge's own lock did: a store no one holds any more does not hold its shard."""
    store = EdgeEpisodicMemory.open(tmp_path / "s", EMBEDDING_DIM)
    del store
    gc.collect()
    reopened = EdgeEpisodicMemory.open(tmp_path / "s", EMBEDDING_DIM)
    await reopened.close()


def test_a_directory_that_cannot_be_locked_is_a_projection_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(ProjectionError, match=r"opening the store at .*a-file/s failed"):
        EdgeEpisodicMemory.open(tmp_path / "a-file" / "s", EMBEDDING_DIM)
