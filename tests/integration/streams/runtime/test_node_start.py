"""A node that fails half way through its start stops what it had started: a query service
whose port is taken left the processors' Faust thread running, and `engram up` hung on it."""

from __future__ import annotations

import socket
import threading
import uuid
from pathlib import Path

import pytest

from projections.episodic.edge_location import (
    EdgeLocationError,
    record_edge_dir,
    recorded_edge_dir,
)
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_a_node_whose_port_is_taken_fails_clearly_and_leaves_no_thread(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        prefix = f"nodestart{uuid.uuid4().hex[:8]}."
        settings = isolated_settings(prefix, tmp_path, http_port=port)
        # The deployment's shards, held by a process that runs.
        await record_edge_dir(redis_server_url, settings.redis_namespace, tmp_path / "holder")
        before = set(threading.enumerate())
        with pytest.raises(OSError, match=rf"cannot listen on 127\.0\.0\.1:{port}"):
            await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    started = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    # Executor threads of the loop may stay for it; Faust's consumer thread must not.
    assert [name for name in started if not name.startswith("asyncio_")] == []
    # A failed start recorded its own Edge directory, and replays then built versions there
    # that the running holder served empty.
    recorded = await recorded_edge_dir(redis_server_url, settings.redis_namespace)
    assert recorded == (tmp_path / "holder").resolve()


async def test_a_new_edge_directory_is_recorded_with_a_warning(
    redis_server_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    namespace = f"edgemove{uuid.uuid4().hex[:8]}"
    await record_edge_dir(redis_server_url, namespace, tmp_path / "a")
    await record_edge_dir(redis_server_url, namespace, tmp_path / "a")
    assert "moves" not in caplog.text
    await record_edge_dir(redis_server_url, namespace, tmp_path / "b")
    assert f"moves from {tmp_path / 'a'} to {tmp_path / 'b'}" in caplog.text
    assert await recorded_edge_dir(redis_server_url, namespace) == (tmp_path / "b").resolve()


async def test_a_second_edge_holder_elsewhere_is_refused_while_the_first_runs(
    kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    """An `engram serve` beside a running `engram up`, with its own Edge directory, served an
    empty episodic memory as ready, and took the deployment's recorded location over."""
    prefix = f"holders{uuid.uuid4().hex[:8]}."
    first = isolated_settings(prefix, tmp_path / "first")
    second = isolated_settings(prefix, tmp_path / "second")
    endpoints = Endpoints(kafka_bootstrap, redis_server_url)
    async with Node(first, endpoints):
        with pytest.raises(
            EdgeLocationError,
            match=r"held at .*first.* which runs: Qdrant Edge lives inside one process",
        ):
            await Node(second, endpoints).start()
        recorded = await recorded_edge_dir(redis_server_url, first.redis_namespace)
        assert recorded == first.edge_path().resolve()
    # Stopped, the first lets go: the second may hold them elsewhere (a move).
    async with Node(second, endpoints):
        recorded = await recorded_edge_dir(redis_server_url, first.redis_namespace)
        assert recorded == second.edge_path().resolve()
