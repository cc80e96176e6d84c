"""A node that fails half way through its start stops what it had started: a query service
whose port is taken left the processors' Faust thread running, and `engram up` hung on it."""

from __future__ import annotations

import socket
import threading
import uuid
from pathlib import Path

import pytest

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
        before = set(threading.enumerate())
        with pytest.raises(OSError, match=rf"cannot listen on 127\.0\.0\.1:{port}"):
            await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    started = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    # Executor threads of the loop may stay for it; Faust's consumer thread must not.
    assert [name for name in started if not name.startswith("asyncio_")] == []
