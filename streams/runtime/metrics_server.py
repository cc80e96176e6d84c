"""``/metrics`` on a port of its own, for the processes without a query service
(``engram worker``, ``engram project``): a small uvicorn server in the process's event loop,
so a scrape reads the counters on the same thread that writes them."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CollectorRegistry, make_asgi_app

from projections.service.embedded_server import EmbeddedServer

__all__ = ["MetricsServer"]

log = logging.getLogger("engram.metrics")

START_TIMEOUT_S = 10.0


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, *, host: str, port: int) -> None:
        self._server = EmbeddedServer.serving(make_asgi_app(registry), host=host, port=port)
        self._task: asyncio.Task[None] | None = None
        self.port: int | None = None

    async def start(self) -> MetricsServer:
        # A port it cannot bind is an OSError naming it (EmbeddedServer.serve).
        self._task = asyncio.create_task(self._server.serve())
        async with asyncio.timeout(START_TIMEOUT_S):
            while not self._server.started:
                if self._task.done():
                    self._task.result()
                    raise OSError("the metrics server stopped while starting (port in use?)")
                await asyncio.sleep(0.02)
        sockets = [s for server in self._server.servers for s in server.sockets]
        self.port = int(sockets[0].getsockname()[1])
        log.info("metrics on port %d at /metrics", self.port)
        return self

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 10)
