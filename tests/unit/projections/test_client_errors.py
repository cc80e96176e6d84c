"""A client that gets no answer, or an answer that is not the service's, raises Engram's
errors naming the URL: before, a program embedding the client met httpx's ConnectError,
ReadTimeout or a pydantic ValidationError, and had to import both libraries to catch them."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from projections.service.client import (
    AsyncEngramClient,
    EngramClient,
    QueryError,
    ServiceTimeoutError,
    ServiceUnreachableError,
    UnreadableAnswerError,
)
from schemas.errors import EngramError
from streams.runtime.devstack.ports import free_port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A real listener that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_a_refused_connection_is_service_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens once the probe is closed
    with EngramClient(url) as client, pytest.raises(ServiceUnreachableError) as raised:
        client.facts("H1")
    error = raised.value
    assert isinstance(error, EngramError)
    assert not isinstance(error, TimeoutError)
    assert str(error).startswith(f"cannot reach the query service at {url}: ")
    assert error.url == url
    assert isinstance(error.__cause__, httpx.ConnectError)


async def test_the_async_client_raises_the_same() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with AsyncEngramClient(url) as client:
        with pytest.raises(ServiceUnreachableError, match="cannot reach the query service"):
            await client.retrieve("H1")


def test_no_answer_in_time_is_a_service_timeout(silent_port: int) -> None:
    url = f"http://127.0.0.1:{silent_port}"
    with EngramClient(url, timeout=0.2) as client, pytest.raises(ServiceTimeoutError) as raised:
        client.history("H1")
    assert isinstance(raised.value, TimeoutError)  # an ``except TimeoutError`` catches it too
    assert isinstance(raised.value, ServiceUnreachableError)
    assert f"the query service at {url} did not answer in time" in str(raised.value)


async def test_the_async_client_times_out_the_same(silent_port: int) -> None:
    async with AsyncEngramClient(f"http://127.0.0.1:{silent_port}", timeout=0.2) as client:
        with pytest.raises(ServiceTimeoutError):
            await client.surprise("H1")


def another_server(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, html="<html><body>It works!</body></html>")


def test_a_success_that_is_not_the_service_answer_is_unreadable() -> None:
    transport = httpx.MockTransport(another_server)
    with (
        EngramClient("http://elsewhere.test", transport=transport) as client,
        pytest.raises(UnreadableAnswerError) as raised,
    ):
        client.procedures("H1")
    message = str(raised.value)
    assert "answered 200 with something other than Engram's Procedures" in message
    assert "It works!" in message
    assert isinstance(raised.value, ValueError)


async def test_a_body_that_does_not_decode_is_unreadable() -> None:
    def bad_gzip(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"Content-Encoding": "gzip"}, stream=httpx.ByteStream(b"not gzip")
        )

    transport = httpx.MockTransport(bad_gzip)
    async with AsyncEngramClient("http://proxy.test", transport=transport) as client:
        with pytest.raises(UnreadableAnswerError, match="answered unreadably"):
            await client.facts("H1")


def test_a_refusal_stays_a_query_error() -> None:
    def refusing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"detail": "Redis is unavailable"})

    with (
        EngramClient("http://engram.test", transport=httpx.MockTransport(refusing)) as client,
        pytest.raises(QueryError) as raised,
    ):
        client.lookup_plan("H1", "a prompt")
    assert (raised.value.status, raised.value.message) == (503, "Redis is unavailable")
