"""A relay between librdkafka before 2.2 and a broker that answers ApiVersions with tagged fields.

librdkafka before 2.2 skips a KIP-482 tagged field one byte short (its length is read as if it
were a compact length, N+1), so it cannot parse an ApiVersions v3 answer that carries any: it
reports "Read underflow" and drops the connection. Debian 12's kcat links librdkafka 2.0.2, and
the embedded broker (Tansu) always sends the broker-feature fields (``SupportedFeatures``,
``FinalizedFeaturesEpoch``, ``FinalizedFeatures``, ``ZkMigrationReady``), so that kcat cannot
talk to it at all; the fix is librdkafka's pull request 4278, released in 2.2.0.

This relay forwards every frame unchanged both ways, except the top-level tagged fields of an
ApiVersions v3+ answer, which it drops: they describe broker features a producer or a plain
consumer does not use. The records a client sends and reads pass through byte for byte. Put in
front of a broker whose advertised address is the relay's, every connection of every client
goes through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from types import TracebackType
from typing import Self

API_VERSIONS = 18
_LENGTH = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")
"""api_key, api_version, correlation_id: how every request starts."""


def _uvarint(frame: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = frame[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _after_tags(frame: bytes, at: int) -> int:
    count, at = _uvarint(frame, at)
    for _ in range(count):
        _, at = _uvarint(frame, at)
        size, at = _uvarint(frame, at)
        at += size
    return at


def without_feature_tags(answer: bytes) -> bytes:
    """An ApiVersions v3+ answer (correlation id first) with no top-level tagged fields.

    Its layout: correlation_id int32 (the response header of ApiVersions has no tags),
    error_code int16, api_keys compact array of (api_key, min, max int16, tags),
    throttle_time_ms int32, tags. An answer with an error is returned as it is."""
    (error,) = struct.unpack_from(">h", answer, 4)
    if error != 0:
        return answer
    entries, at = _uvarint(answer, 6)
    for _ in range(entries - 1):
        at = _after_tags(answer, at + 6)
    at += 4
    return answer[:at] + b"\x00"


class ApiVersionsRelay:
    """Forwards connections on ``127.0.0.1:port`` to ``upstream`` on the caller's event loop."""

    def __init__(self, upstream: tuple[str, int], port: int) -> None:
        self.upstream = upstream
        self.port = port
        self.rewritten = 0
        """ApiVersions answers whose tagged fields were dropped."""
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._connections):
            writer.transport.abort()
        self._connections.clear()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream_r, upstream_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.transport.abort()
            return
        self._connections |= {client_w, upstream_w}
        asked: dict[int, tuple[int, int]] = {}
        """Per correlation id, the api key and version of a request not yet answered."""
        try:
            await asyncio.gather(
                self._requests(client_r, upstream_w, asked),
                self._answers(upstream_r, client_w, asked),
            )
        finally:
            self._connections -= {client_w, upstream_w}
            client_w.transport.abort()
            upstream_w.transport.abort()

    @staticmethod
    async def _frame(reader: asyncio.StreamReader) -> bytes:
        (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
        return await reader.readexactly(size)

    async def _requests(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        asked: dict[int, tuple[int, int]],
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                frame = await self._frame(reader)
                api_key, version, correlation = _REQUEST_HEADER.unpack_from(frame)
                asked[correlation] = (api_key, version)
                writer.write(_LENGTH.pack(len(frame)) + frame)
                await writer.drain()
        writer.transport.abort()

    async def _answers(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        asked: dict[int, tuple[int, int]],
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                frame = await self._frame(reader)
                (correlation,) = struct.unpack_from(">i", frame)
                api_key, version = asked.pop(correlation, (-1, -1))
                if api_key == API_VERSIONS and version >= 3:
                    frame = without_feature_tags(frame)
                    self.rewritten += 1
                writer.write(_LENGTH.pack(len(frame)) + frame)
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
