"""The command line answers bad input and unreachable servers with one readable line, exit 2."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from streams.cli.console import UNREACHABLE
from streams.cli.main import app
from streams.runtime.devstack.ports import free_port

runner = CliRunner()


def closed_port() -> int:
    return free_port()  # nothing listens there once the probe socket is closed


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["publish", "H1", "x"], {}, "ENGRAM_KAFKA_BOOTSTRAP"),
        (
            ["publish", "bad id", "x", "--importance", "3"],
            {"ENGRAM_KAFKA_BOOTSTRAP": "x:1"},
            "importance: Input should be less than or equal to 1",
        ),
        (
            ["publish", "H1", "x", "--type", "decision"],
            {"ENGRAM_KAFKA_BOOTSTRAP": "x:1"},
            "needs --skill",
        ),
        (["retrieve", "H1", "--mode", "psychic"], {}, "invalid retrieval: mode: Input should be"),
        (["retrieve", "H1", "--mode", "relevance"], {}, "give a query"),
        (["retrieve", "H1", "--kind", "dream"], {}, "invalid retrieval: filter.kinds.0"),
        (
            ["retrieve", "H1", "--step-from", str(2**53 + 1)],
            {},
            "invalid retrieval: filter.step_from",
        ),
        (
            ["retrieve", "H1", "--arousal", "0.5"],
            {},
            "invalid retrieval: request: arousal applies only to mode 'constrained'",
        ),
        (["retrieve", "H1", "--weight", "recency=1"], {}, "--weight applies to --mode weighted"),
        (
            ["retrieve", "H1", "--days", "3"],
            {},
            "invalid retrieval: request: days applies only to mode 'recent'",
        ),
        (
            ["retrieve", "H1", "--mode", "recent", "--days", "0"],
            {},
            "invalid retrieval: days: Input should be greater than 0",
        ),
        (
            ["retrieve", "H1", "--mode", "weighted", "--weight", "recency=lots"],
            {},
            "--weight: 'recency=lots' is not name=number",
        ),
        (
            ["retrieve", "H1", "--mode", "weighted", "--weight", "luck=1"],
            {},
            "invalid retrieval: weights.luck: Extra inputs are not permitted",
        ),
        (
            ["retrieve", "H1", "--mode", "generative", "--query", "x", "--weight", "recency=-1"],
            {},
            "invalid retrieval: generative.recency",
        ),
        (["retrieve", "H1", "--url", "http://127.0.0.1:abc"], {}, "is not a valid URL"),
        (["retrieve", "H1", "--url", "notaurl"], {}, "is not http:// or https://"),
        (["retrieve", "H1", "--query", "  "], {}, "invalid retrieval: query: must not be blank"),
        (["facts", "H1", "--url", "ftp://127.0.0.1"], {}, "is not http:// or https://"),
        (["plan", "H1", "x", "--url", "http://[::1"], {}, "is not a valid URL"),
        (["facts", "a/b"], {}, "'a/b' is not an agent id"),
        (["procedures", "a?b"], {}, "'a?b' is not an agent id"),
        (["feedback", "a b", "x", "0.5"], {"ENGRAM_KAFKA_BOOTSTRAP": "x:1"}, "agent_id: must be"),
        (
            ["publish", "H1", "   "],
            {"ENGRAM_KAFKA_BOOTSTRAP": "x:1"},
            "content: must not be blank (whitespace alone)",
        ),
        (["feedback", "H1", "", "0.5"], {"ENGRAM_KAFKA_BOOTSTRAP": "x:1"}, "target_event_id"),
        (["worker"], {}, "cluster mode needs"),
        (["worker"], {"ENGRAM_PARTITIONS": "zero"}, "partitions: Input should be a valid integer"),
        (["worker"], {"ENGRAM_LIFECYCLE": "{bad"}, "ENGRAM_LIFECYCLE could not be parsed"),
        (["retrieve", "H1", "--after", "agent.observations:2:¹"], {}, "is not topic:partition"),
        (["schemas", "export", "/proc/engram-schemas"], {}, "cannot write the schemas to"),
    ],
)
def test_bad_input_is_one_readable_error(
    args: list[str], env: dict[str, str], message: str
) -> None:
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert "errors.pydantic.dev" not in result.output


def test_an_unreachable_query_service_is_named() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = runner.invoke(app, ["retrieve", "H1", "--url", url])
    assert result.exit_code == UNREACHABLE  # a retry may succeed, as with the broker
    assert f"cannot reach the query service at {url}" in result.output
    assert "Exit" not in result.output


def test_a_mistyped_agent_type_or_source_is_named() -> None:
    """Both are valid, and silently gave the default profile (importance, capacities)."""
    env = {"ENGRAM_KAFKA_BOOTSTRAP": f"127.0.0.1:{closed_port()}"}
    args = ["publish", "H5", "Year 1: big flood", "--agent-type", "housewhold"]
    result = runner.invoke(app, [*args, "--source", "persnal"], env=env)
    said = " ".join(result.output.split())
    assert "agent type 'housewhold' is not in the agent types" in said
    assert "source 'persnal' is not one of the profile's" in said
    right = ["publish", "H5", "x", "--agent-type", "household", "--source", "personal"]
    assert "warning" not in runner.invoke(app, right, env=env).output


def test_the_help_names_every_exit_code() -> None:
    from streams.cli.stack import EXIT_RESTART

    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for code in (2, EXIT_RESTART, 70, UNREACHABLE):
        assert f"; {code} " in text


def test_schemas_are_exported(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schemas", "export", str(tmp_path)])
    assert result.exit_code == 0, result.output
    listed = result.output.split()
    assert str(tmp_path / "observation.v2.schema.json") in listed
    assert all(Path(p).exists() for p in listed)


class _RecordingService(BaseHTTPRequestHandler):
    """Answers every retrieval with no memories and keeps the bodies it was sent."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        answer = json.dumps(
            {
                "agent_id": "H1",
                "mode": body["mode"],
                "clock": {"axis": "year", "now": 0},
                "working_count": 0,
                "episodic_count": 0,
                "results": [],
                "took_ms": 0.1,
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def service_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _RecordingService)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _RecordingService.bodies.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("mode_args", "field", "expected"),
    [
        (
            ["--mode", "weighted", "--query", "flood"],
            "weights",
            {"recency": 0.1, "relevance": 0.6},
        ),
        (["--mode", "generative", "--query", "flood"], "generative", {"recency": 0.1}),
    ],
)
def test_weights_and_step_filters_reach_the_request(
    service_url: str, mode_args: list[str], field: str, expected: dict[str, float]
) -> None:
    weights = [arg for name, value in expected.items() for arg in ("--weight", f"{name}={value}")]
    steps = ["--step-from", "2", "--step-to", "9"]
    result = runner.invoke(
        app, ["retrieve", "H1", *mode_args, *weights, *steps, "--url", service_url]
    )
    assert result.exit_code == 0, result.output
    [body] = _RecordingService.bodies
    assert {k: body[field][k] for k in expected} == expected
    assert (body["filter"]["step_from"], body["filter"]["step_to"]) == (2, 9)


@pytest.mark.parametrize(
    ("args", "asked"),
    [
        (["--mode", "recent", "--days", "3"], {"days": 3.0, "top_k": 10}),
        (["--mode", "recent", "--top-k", "2", "--time", "2026-01-01T00:00:00Z"], {"top_k": 2}),
        (["--mode", "saliency"], {"top_k": 5}),
    ],
)
def test_recent_reaches_the_request_with_its_own_defaults(
    service_url: str, args: list[str], asked: dict[str, Any]
) -> None:
    """``--top-k`` left out is the mode's default (10 for recent, seed 000's limit), and the
    time left out is the service's to pin."""
    result = runner.invoke(app, ["retrieve", "H1", *args, "--url", service_url])
    assert result.exit_code == 0, result.output
    [body] = _RecordingService.bodies
    assert {k: body.get(k) for k in asked} == asked
    assert ("current_time" in body) == ("--time" in args)
    assert ("days" in body) == (body["mode"] == "recent")


@pytest.mark.parametrize(
    "args",
    [
        ["history", "bad id"],
        ["forget-agent", "a/b", "--yes"],
        ["recall", "no spaces", "--as-of", "2026-01-01T00:00:00Z"],
    ],
)
def test_an_agent_id_the_events_refuse_is_named_with_the_rule(args: list[str]) -> None:
    """Before any server is asked (none runs at this address): `engram history` said only
    "(input): String should match pattern ..." after reaching for the broker."""
    result = runner.invoke(app, args, env={"ENGRAM_KAFKA_BOOTSTRAP": "127.0.0.1:9"})
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert f"{args[1]!r} is not an agent id: it must be 1-200 characters" in said


def test_the_mcp_help_names_every_tool_it_serves() -> None:
    from projections.service.tools import memory_tools

    result = runner.invoke(app, ["mcp", "--help"], env={"COLUMNS": "300"})
    said = " ".join(result.output.split())
    names = memory_tools().names()
    assert len(names) == 8
    assert [name for name in names if name not in said] == []
