"""The real query service app served on localhost in a thread of the test process, for the
commands that call it over HTTP."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

from fastapi import FastAPI

from projections.service.embedded_server import EmbeddedServer
from streams.runtime.devstack.ports import free_port


def serving(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` until the generator is closed; yields its URL (a fixture's body)."""
    port = free_port()
    server = EmbeddedServer.serving(app, host="127.0.0.1", port=port)
    thread = threading.Thread(target=asyncio.run, args=(server.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "the service stopped before it started"
        assert time.monotonic() < deadline, "the service did not start in 10 s"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
