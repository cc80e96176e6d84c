"""A uvicorn server that serves beside other work in one process and leaves the process's
signals to it."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

__all__ = ["EmbeddedServer"]


class EmbeddedServer(uvicorn.Server):
    """uvicorn (0.29 and later) takes SIGINT and SIGTERM for itself while it serves, whatever
    ``install_signal_handlers`` says: on the first signal it stops serving on its own, and the
    process hears of the signal only once the server is down (uvicorn raises it again). Engram
    serves beside other work (a worker's probes; the dev stack's query service, which the demo
    calls): the process stops in its own order, finishing its work before its server, so its
    own handlers must stay in place. The server stops when told (``should_exit``)."""

    @classmethod
    def serving(cls, app: Any, *, host: str, port: int) -> EmbeddedServer:
        """A server of ``app`` as Engram runs them: no lifespan, no access log, and its log
        lines through Engram's logging (``log_config=None``): uvicorn's own configuration
        printed plain text lines ("ERROR:    [Errno 98] ...") among ENGRAM_LOG_FORMAT=json's
        objects."""
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            log_config=None,
            lifespan="off",
            access_log=False,
        )
        return cls(config)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn ends the process (``SystemExit``) when it cannot bind: here an ``OSError``
        that names the address, so the process stops what it started, in its own order, and
        says why. A ``SystemExit`` in a task also left `engram up` hung on Faust's thread."""
        try:
            await super().serve(sockets)
        except SystemExit as exc:
            config, cause = self.config, exc.__context__  # what uvicorn caught, if anything
            why = cause.strerror if isinstance(cause, OSError) and cause.strerror else None
            raise OSError(
                f"cannot listen on {config.host}:{config.port} ({why or 'is the port in use?'})"
            ) from None
