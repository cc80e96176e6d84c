"""A TCP proxy that can take the network away: every connection cut, new ones refused.

Put in front of a broker whose advertised address is the proxy's, every client connection
(bootstrap, partition leader, group coordinator) goes through it, so :meth:`TcpProxy.cut` is
what a client sees when the broker's host drops off the network and comes back: established
connections reset, connection attempts refused, until :meth:`TcpProxy.restore`. The broker itself
keeps running, which a broker with in-memory storage needs to keep its log.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Self

_CHUNK = 1 << 16


class TcpProxy:
    """Forwards connections on ``host:port`` to ``upstream``; runs on the caller's event loop."""

    def __init__(self, upstream: tuple[str, int], port: int, host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self.host = host
        self.port = port
        self.accepted = 0
        """Connections forwarded so far (a client that reconnects adds to it)."""
        self.severed = 0
        """Connections that :meth:`cut` broke."""
        self.dropped_bytes = 0
        """Bytes of the upstream's answers thrown away by :meth:`cut` before the reset."""
        self._server: asyncio.Server | None = None
        self._answers_lost = False
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def start(self) -> Self:
        self._server = await asyncio.start_server(
            self._forward, self.host, self.port, reuse_address=True
        )
        return self

    async def cut(self, answers_lost_for: float = 0.0) -> int:
        """Stop accepting (connects are refused) and reset every open connection; returns how
        many were cut.

        ``answers_lost_for`` seconds before the reset, requests still reach the upstream but
        its answers are thrown away: what a client sees when the network fails between a
        request and its response, the case in which a client cannot know whether it was done.
        """
        if answers_lost_for > 0:
            self._answers_lost = True
            await asyncio.sleep(answers_lost_for)
            self._answers_lost = False
        if self._server is not None:
            self._server.close()
            self._server = None
        pairs, self._pairs = list(self._pairs), set()
        for client, upstream in pairs:
            client.transport.abort()
            upstream.transport.abort()
        self.severed += len(pairs)
        # Let the pumps see their transports gone before anyone reconnects.
        await asyncio.sleep(0)
        return len(pairs)

    async def restore(self) -> None:
        if self._server is None:
            await self.start()

    async def close(self) -> None:
        await self.cut()

    async def _forward(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        if self._server is None:
            client_w.transport.abort()
            return
        try:
            upstream_r, upstream_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.transport.abort()
            return
        pair = (client_w, upstream_w)
        self._pairs.add(pair)
        self.accepted += 1
        try:
            await asyncio.gather(
                self._pump(client_r, upstream_w), self._pump(upstream_r, client_w, answers=True)
            )
        finally:
            self._pairs.discard(pair)
            client_w.transport.abort()
            upstream_w.transport.abort()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answers: bool = False
    ) -> None:
        """Copy one direction until either side goes away; then the other side goes too."""
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(_CHUNK):
                if answers and self._answers_lost:
                    self.dropped_bytes += len(data)
                    continue
                writer.write(data)
                await writer.drain()
        writer.transport.abort()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
