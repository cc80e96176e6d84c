"""The chat summariser against a real HTTP server on this machine.

The server is stdlib ``http.server`` speaking just enough of the OpenAI chat API, so the
request bytes, the auth header and every failure mode (500, silence, trickle, refusal, junk)
go over a real socket: the fallback is what keeps a summary from being lost, so it is tested
the way it will fail in production.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from processors.summarising import (
    MAX_SUMMARY_CHARS,
    ExtractiveSummariser,
    SummaryItem,
    SummaryRequest,
)
from streams.integrations.chat_summariser import ChatSummariser, summariser_from_url

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

T0 = datetime(2024, 5, 1, tzinfo=UTC)
REQUEST = SummaryRequest(
    agent_id="H7",
    agent_type="household",
    level=1,
    items=[
        SummaryItem("The river flooded the lower field", 0.9, 3, 2, T0),
        SummaryItem("I bought flood insurance", 0.7, 4, 2, T0),
        SummaryItem("The insurer denied my claim for the barn", 0.8, 5, 2, T0),
    ],
)
CANNED = "H7 lost the lower field to the flood in year 2, insured, and had a claim denied."
LOGGER = "engram.chat_summariser"


@dataclass
class Endpoint:
    """What the fake model does next, and what it was sent."""

    mode: str = "ok"
    answer: str = CANNED
    received: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def completion(self) -> bytes:
        return json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": self.answer},
                        "finish_reason": "stop",
                    }
                ],
            }
        ).encode()


class Handler(BaseHTTPRequestHandler):
    server: Server

    def do_POST(self) -> None:
        endpoint = self.server.endpoint
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        endpoint.received.append((self.path, dict(self.headers.items()), body))
        if endpoint.mode == "hang":
            endpoint.release.wait(10)  # bounded; released at teardown
            return
        if endpoint.mode == "slow" and endpoint.release.wait(0.5):
            return  # held back, then answered as "ok" unless the test is over
        if endpoint.mode == "trickle":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(40):  # a byte every 0.1 s: each read is quick, the whole is not
                if endpoint.release.wait(0.1):
                    return
                self.wfile.write(b" ")
                self.wfile.flush()
            return
        status, payload = {
            "ok": (200, endpoint.completion()),
            "slow": (200, endpoint.completion()),
            "error": (500, b'{"error": "model crashed"}'),
            "junk": (200, b"<html>not json</html>"),
            "wrong_shape": (200, b'{"choices": []}'),
        }[endpoint.mode]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.endpoint = Endpoint()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up closes the socket under a handler: expected here


@pytest.fixture
def server() -> Iterator[Server]:
    httpd = Server()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield httpd
    finally:
        httpd.endpoint.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def base_url(httpd: Server) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_the_model_answer_is_the_summary_and_the_request_carries_the_memories(
    server: Server,
) -> None:
    chat = ChatSummariser(base_url(server) + "/", "tiny-model", "sekrit", timeout=2.0)
    assert (chat.id, chat.blocking) == ("chat:tiny-model", True)

    assert chat.summarise_with_origin(REQUEST) == (CANNED, "chat:tiny-model")

    [(path, headers, body)] = server.endpoint.received
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sekrit"
    assert body["model"] == "tiny-model"
    assert body["temperature"] == 0
    assert body["max_tokens"] == 400
    system, user = body["messages"]
    assert system["role"] == "system"
    assert "H7" in system["content"]
    assert "household" in system["content"]
    assert "session summary" in system["content"]
    assert user["role"] == "user"
    assert "Year 2, steps 3-5" in user["content"]
    for memory in REQUEST.items:
        assert memory.content in user["content"]


def test_a_chapter_request_asks_for_a_chapter_and_no_key_sends_no_auth(server: Server) -> None:
    chapter = SummaryRequest("H7", "household", 2, REQUEST.items[:1])
    assert ChatSummariser(base_url(server), "tiny-model").summarise(chapter) == CANNED
    [(_, headers, body)] = server.endpoint.received
    assert "Authorization" not in headers
    assert "chapter summary" in body["messages"][0]["content"]


def test_an_over_long_answer_is_cut_and_thinking_is_dropped(server: Server) -> None:
    server.endpoint.answer = "<think>\nThe user wants...\n</think>\n" + "flood " * 1000
    text = ChatSummariser(base_url(server), "tiny-model").summarise(REQUEST)
    assert len(text) <= MAX_SUMMARY_CHARS
    assert text.startswith("flood flood")
    assert text.endswith("\u2026")


def assert_fell_back(
    chat: ChatSummariser, caplog: pytest.LogCaptureFixture, reason: str
) -> logging.LogRecord:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        text, origin = chat.summarise_with_origin(REQUEST)
    extractive = ExtractiveSummariser()
    assert (text, origin) == (extractive.summarise(REQUEST), extractive.id)
    assert chat.summarise(REQUEST) == text
    [record, *_] = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.WARNING
    assert reason in record.__dict__["reason"]
    assert record.__dict__["fallback"] == "extractive-v1"
    return record


def test_a_server_error_falls_back_to_the_extractive_summary(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    server.endpoint.mode = "error"
    assert_fell_back(ChatSummariser(base_url(server), "m", timeout=2.0), caplog, "500")


@pytest.mark.parametrize(("mode", "reason"), [("junk", "JSONDecodeError"), ("wrong_shape", "not")])
def test_an_answer_that_is_not_a_completion_falls_back(
    server: Server, caplog: pytest.LogCaptureFixture, mode: str, reason: str
) -> None:
    server.endpoint.mode = mode
    assert_fell_back(ChatSummariser(base_url(server), "m", timeout=2.0), caplog, reason)


def test_an_empty_answer_falls_back(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    server.endpoint.answer = "  <think>hmm</think>\n "
    assert_fell_back(ChatSummariser(base_url(server), "m", timeout=2.0), caplog, "empty")


def test_a_silent_server_falls_back_after_the_timeout(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """The server holds the request for 10 s and then hangs up without an answer: only the
    client's own read timeout (0.5 s) gives a ReadTimeout, so the reason shows that the
    client stopped waiting by itself."""
    server.endpoint.mode = "hang"
    chat = ChatSummariser(base_url(server), "m", timeout=0.5)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        text, origin = chat.summarise_with_origin(REQUEST)
    assert origin == "extractive-v1"
    assert text == ExtractiveSummariser().summarise(REQUEST)
    assert len(server.endpoint.received) == 1, "the model was asked before the fallback"
    assert "ReadTimeout" in caplog.records[0].__dict__["reason"]


def test_an_answer_slower_than_usual_but_within_the_timeout_is_the_summary(
    server: Server,
) -> None:
    """The client does not give up before its timeout: an answer held back 0.5 s, a tenth of
    the 5 s allowed, is still the summary."""
    server.endpoint.mode = "slow"
    chat = ChatSummariser(base_url(server), "tiny-model", timeout=5.0)
    assert chat.summarise_with_origin(REQUEST) == (CANNED, "chat:tiny-model")


def test_a_trickling_server_is_cut_off_at_the_deadline(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """Each byte comes within the read timeout, and the whole would take 4 s before the server
    hangs up mid-body: only the client's deadline for the whole answer gives this reason."""
    server.endpoint.mode = "trickle"
    chat = ChatSummariser(base_url(server), "m", timeout=0.5)
    assert_fell_back(chat, caplog, "within 0.5 s")
    # Two summaries (summarise_with_origin, then summarise): each gives up at its deadline.
    reasons = [r.__dict__["reason"] for r in caplog.records if r.name == LOGGER]
    assert len(reasons) == len(server.endpoint.received) == 2
    assert all("no complete answer within 0.5 s" in reason for reason in reasons), reasons


def test_a_server_that_is_down_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    chat = ChatSummariser(f"http://127.0.0.1:{closed_port()}/v1", "m", timeout=0.5)
    assert_fell_back(chat, caplog, "ConnectError")


def test_the_factory_uses_a_model_only_when_one_is_configured(server: Server) -> None:
    assert summariser_from_url(None, "m", None, 1.0).id == "extractive-v1"
    assert summariser_from_url("", "m", None, 1.0).id == "extractive-v1"
    chat = summariser_from_url(base_url(server), "tiny-model", "k", 2.0)
    assert chat.summarise_with_origin(REQUEST) == (CANNED, "chat:tiny-model")


@pytest.mark.parametrize("url", ["localhost:8000/v1", "ftp://host/v1", "http:///v1"])
def test_a_malformed_url_is_refused_up_front(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        ChatSummariser(url, "m")
