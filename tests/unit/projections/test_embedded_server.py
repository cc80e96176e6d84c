"""``EmbeddedServer``: serving leaves the process's SIGINT and SIGTERM handlers alone."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable
from typing import Any

import pytest
import uvicorn

from projections.service.embedded_server import EmbeddedServer


async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    raise AssertionError("no request is made")


def handlers() -> dict[int, Any]:
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}


async def handlers_while_serving(server: uvicorn.Server) -> dict[int, Any]:
    serving = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                assert not serving.done(), serving.result()
                await asyncio.sleep(0.01)
        return handlers()
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


def config() -> uvicorn.Config:
    return uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")


async def test_the_process_keeps_its_signal_handlers_while_it_serves() -> None:
    before = handlers()
    assert await handlers_while_serving(EmbeddedServer(config())) == before
    assert handlers() == before


async def test_uvicorn_alone_takes_them_which_is_why_the_class_exists() -> None:
    """If a uvicorn release stops taking the signals, this fails: the class can then go."""
    before = handlers()
    during = await handlers_while_serving(uvicorn.Server(config()))
    assert during != before
    assert handlers() == before  # given back once it stops


async def test_a_port_in_use_is_an_os_error_naming_it_not_an_exit() -> None:
    """uvicorn raises SystemExit when it cannot bind: in a task of `engram up` that left the
    process hung on Faust's thread; in `engram serve`, a bare exit."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = EmbeddedServer(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", lifespan="off")
        )
        with pytest.raises(OSError, match=rf"cannot listen on 127\.0\.0\.1:{port}"):
            await server.serve()


async def test_its_log_lines_go_through_the_processs_logging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """uvicorn's own logging configuration printed plain text lines ("ERROR:    [Errno 98]
    ...") among the JSON objects of ENGRAM_LOG_FORMAT=json, past the process's handlers."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = EmbeddedServer.serving(app, host="127.0.0.1", port=port)
        with pytest.raises(OSError, match="cannot listen"):
            await server.serve()
    assert any(
        r.name == "uvicorn.error" and "error while attempting to bind" in r.getMessage()
        for r in caplog.records
    )
