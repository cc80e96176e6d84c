"""``engram mcp`` without servers: where its configuration comes from, what it refuses at once,
and what publishing answers when no log is configured. The server itself, over stdio and
streamable HTTP, is tested in ``tests/integration/projections/test_mcp_tools.py``."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from projections.service.tools import ToolError
from schemas.agent_events import Feedback, Observation
from streams.cli.main import app
from streams.integrations.tool_server import LogPublisher, ToolServerSettings
from tests.unit.streams.cli.test_cli import closed_port

runner = CliRunner()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("ENGRAM_QUERY_URL", "ENGRAM_URL", "ENGRAM_MCP_PORT", "ENGRAM_KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_query_service_is_engram_query_url_else_engram_url(
    clean_env: pytest.MonkeyPatch,
) -> None:
    assert ToolServerSettings().query_url == "http://127.0.0.1:8000"
    clean_env.setenv("ENGRAM_URL", "http://as-engram-retrieve-reads-it:8000")
    assert ToolServerSettings().query_url == "http://as-engram-retrieve-reads-it:8000"
    clean_env.setenv("ENGRAM_QUERY_URL", "http://query:8000")
    assert ToolServerSettings().query_url == "http://query:8000"
    clean_env.setenv("ENGRAM_QUERY_URL", "HTTPS://Query:8000")  # as httpx takes it
    assert ToolServerSettings().query_url == "HTTPS://Query:8000"
    assert ToolServerSettings(query_url="http://flag:1").query_url == "http://flag:1"


def test_the_http_port_comes_from_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    assert ToolServerSettings().mcp_port == 8765
    clean_env.setenv("ENGRAM_MCP_PORT", "9100")
    assert ToolServerSettings().mcp_port == 9100


async def test_without_a_broker_publishing_is_refused_in_words(
    clean_env: pytest.MonkeyPatch,
) -> None:
    publisher = LogPublisher(ToolServerSettings(), timeout=5.0)
    with pytest.raises(ToolError, match="ENGRAM_KAFKA_BOOTSTRAP is not set"):
        await publisher(Observation(agent_id="H001", content="rain"))
    await publisher.close()


async def test_feedback_that_was_not_published_is_called_feedback(
    clean_env: pytest.MonkeyPatch,
) -> None:
    """It was "the observation was not recorded" for every event the tools publish."""
    clean_env.setenv("ENGRAM_KAFKA_BOOTSTRAP", f"127.0.0.1:{closed_port()}")
    publisher = LogPublisher(ToolServerSettings(), timeout=3.0)
    feedback = Feedback(agent_id="H001", content="good call", target_event_id="d1", signal=1.0)
    with pytest.raises(ToolError, match=r"the feedback (was not recorded|within)"):
        await publisher(feedback)
    await publisher.close()


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["mcp", "--transport", "carrier-pigeon"], {}, "--transport must be stdio or http"),
        (["mcp", "--transport", "http"], {"ENGRAM_MCP_PORT": "port"}, "mcp_port: Input should be"),
        (["mcp"], {"ENGRAM_QUERY_TIMEOUT": "0"}, "query_timeout: Input should be greater than 0"),
        (["mcp"], {"ENGRAM_LIFECYCLE": "{bad"}, "ENGRAM_LIFECYCLE could not be parsed"),
        (["mcp"], {"ENGRAM_QUERY_URL": "notaurl"}, "'notaurl' is not an http:// or https:// URL"),
    ],
)
def test_bad_configuration_is_one_readable_error(
    args: list[str], env: dict[str, str], message: str
) -> None:
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_the_help_says_how_to_configure_it() -> None:
    result = runner.invoke(app, ["mcp", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for needed in ("retrieve_memory", "ENGRAM_QUERY_URL", "ENGRAM_KAFKA_BOOTSTRAP", "/mcp"):
        assert needed in result.output
