"""``engram mcp``: the memory tools as an MCP server, a process of its own.

It holds no memory: reads go to the query service over HTTP (``ENGRAM_QUERY_URL``, else
``ENGRAM_URL`` as ``engram retrieve`` reads it), observations to the log through the publisher
(``ENGRAM_KAFKA_BOOTSTRAP``, sealed with the deployment's keyring as ``engram publish`` seals
them). So it scales, restarts and is deployed apart from the query service and the workers;
without a broker configured it serves the read tools and ``publish_observation`` answers that
publishing is not available.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import SettingsConfigDict

from projections.service.client import AsyncEngramClient
from projections.service.http_auth import api_keys_for
from projections.service.mcp_server import create_mcp_server, serve_http, serve_stdio
from projections.service.tools import ToolContext, ToolError, ToolRegistry, memory_tools
from schemas.agent_events import AgentEvent
from schemas.topics import Topics
from streams.eventlog.publisher import AsyncPublisher, Position, PublishError
from streams.privacy.keyring import Keyring, KeyringError, open_keyring
from streams.settings import EngramSettings

__all__ = ["LogPublisher", "ToolServerSettings", "Transport", "run_tool_server"]

log = logging.getLogger("engram.mcp")

Transport = Literal["stdio", "http"]


class ToolServerSettings(EngramSettings):
    """The MCP server's configuration: :class:`EngramSettings` (broker, topic prefix, keyring)
    and where the query service is."""

    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_", frozen=True, extra="ignore", populate_by_name=True
    )

    query_url: str = Field(
        default="http://127.0.0.1:8000",
        validation_alias=AliasChoices("ENGRAM_QUERY_URL", "ENGRAM_URL", "query_url"),
        description="The query service the read tools call: an http:// or https:// URL.",
    )

    @field_validator("query_url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not url.lower().startswith(("http://", "https://")):
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        return url

    query_timeout: float = Field(
        default=10.0,
        gt=0.0,
        description="Seconds a retrieval may take, besides the wait a read-your-writes asks for.",
    )
    publish_timeout: float = Field(
        default=15.0,
        gt=0.0,
        description="Seconds publish_observation waits for the broker (connecting included).",
    )
    mcp_host: str = Field(default="127.0.0.1", description="Where the HTTP transport listens.")
    mcp_port: int = Field(default=8765, ge=0, le=65535, description="Its port (0: any free).")


class LogPublisher:
    """What ``publish_observation`` publishes with: connected at the first observation (a
    read-only use never needs the broker), and again after a failure, so a broker that was
    down when the server started, or went away, is used once it is back."""

    def __init__(self, settings: EngramSettings, *, timeout: float) -> None:
        self._settings = settings
        self._timeout = timeout
        self._publisher: AsyncPublisher | None = None
        self._keyring: Keyring | None = None
        self._lock = asyncio.Lock()

    async def __call__(self, observation: AgentEvent, /) -> Position:
        bootstrap = self._settings.kafka_bootstrap
        what = observation.event_type  # feedback is published here too
        if not bootstrap:
            raise ToolError(
                "publishing is not available: this memory server has no event log "
                "(ENGRAM_KAFKA_BOOTSTRAP is not set)"
            )
        try:
            async with asyncio.timeout(self._timeout):
                publisher = await self._started(bootstrap)
                return await publisher.publish(observation)
        except TimeoutError:
            await self.close()
            raise ToolError(
                f"the event log at {bootstrap} did not confirm the {what} within "
                f"{self._timeout:g} s (it may still be recorded); call again later"
            ) from None
        except (PublishError, KeyringError) as exc:
            await self.close()
            raise ToolError(
                f"the {what} was not recorded (event log at {bootstrap}): {exc}"
            ) from None

    async def _started(self, bootstrap: str) -> AsyncPublisher:
        async with self._lock:
            if self._publisher is None:
                settings = self._settings
                self._keyring = await open_keyring(
                    settings.keyring,
                    redis_url=settings.redis_url,
                    namespace=settings.redis_namespace,
                    default_dir=settings.keyring_dir(),
                )
                publisher = AsyncPublisher(
                    bootstrap, topics=Topics(settings.topic_prefix), keyring=self._keyring
                )
                self._publisher = await publisher.start()
            return self._publisher

    async def close(self) -> None:
        publisher, keyring = self._publisher, self._keyring
        self._publisher = self._keyring = None
        for close in (
            publisher.close if publisher else None,
            keyring.close if keyring else None,
        ):
            if close is not None:
                try:
                    await asyncio.wait_for(close(), timeout=10.0)
                except Exception as exc:  # closing what failed may fail the same way
                    log.warning("closing the publisher: %s", exc)


async def run_tool_server(
    settings: ToolServerSettings,
    transport: Transport,
    *,
    stop: asyncio.Event,
    registry: ToolRegistry | None = None,
    on_started: Callable[[str], Awaitable[None] | None] | None = None,
) -> None:
    """Serves ``registry`` (the memory tools by default) until ``stop`` is set, or, on stdio,
    until the client closes stdin. ``on_started`` gets the HTTP endpoint's URL.

    On stdio, a ``stop`` returns at once but leaves the SDK's stdin reader blocked in its
    thread until the client writes or closes stdin: a process stopping for a signal exits
    without waiting for it (``engram mcp`` does), as nothing is left to flush (every
    publication was acknowledged before its call answered)."""
    root = logging.getLogger().getEffectiveLevel()
    logging.getLogger("mcp").setLevel(max(logging.WARNING, root))  # a line per session else
    # Over HTTP the callers present keys; on stdio the caller is the process that launched it.
    api_keys = (
        api_keys_for(settings.api_keys_file, "MCP server", settings.mcp_host)
        if transport == "http"
        else None
    )
    publisher = LogPublisher(settings, timeout=settings.publish_timeout)
    own_key = settings.api_key.get_secret_value() if settings.api_key else None
    async with AsyncEngramClient(
        settings.query_url, timeout=settings.query_timeout, api_key=own_key
    ) as memory:
        server = create_mcp_server(
            registry or memory_tools(), ToolContext(memory, publisher), api_keys=api_keys
        )
        try:
            if transport == "http":
                await serve_http(
                    server,
                    host=settings.mcp_host,
                    port=settings.mcp_port,
                    on_started=on_started,
                    stop=stop,
                    api_keys=api_keys,
                )
            else:
                serving = asyncio.create_task(serve_stdio(server))
                stopped = asyncio.create_task(stop.wait())
                try:
                    await asyncio.wait({serving, stopped}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopped.cancel()
                    if not serving.done():
                        # Not awaited: the SDK reads stdin in a thread no cancellation reaches,
                        # so it ends only at the client's next line or EOF (see the docstring).
                        serving.cancel()
                if serving.done():
                    serving.result()  # the client closed stdin, or the transport failed
        finally:
            await publisher.close()
