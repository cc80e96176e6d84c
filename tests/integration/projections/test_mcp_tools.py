"""The memory tools as an LLM agent reaches them: ``engram mcp`` in its own process, spoken to by
the MCP SDK's own client over stdio and over streamable HTTP, in front of a real query service,
worker, broker, Redis and Qdrant Edge.

One node (processors + query service) runs for the module. An agent records observations with
``publish_observation`` and finds them with ``retrieve_memory`` and
``recall_similar_experience``, passing the positions publishing returned as ``after``: that is
the only synchronisation with the worker, so a tool that dropped ``after`` would race it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from projections.retrieval.models import RetrievalResponse
from projections.service.client import format_for_prompt
from streams.runtime.devstack.ports import free_port
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import cli_env, isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).parents[3]
ENGRAM_MCP = [sys.executable, "-m", "streams.cli.main", "mcp"]

PATIENT_MS = 30_000
"""The longest read-your-writes wait the service allows: generous on a shared 2-core machine."""

CALL_TIMEOUT_S = 60.0
"""Longest any one MCP request may take (a retrieval waits up to PATIENT_MS of it)."""

START_TIMEOUT_S = 60.0
"""Longest the MCP server process may take to start (Python imports on a busy machine)."""


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"mcp{uuid.uuid4().hex[:8]}."


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engram-mcp")


@pytest.fixture(scope="module")
async def node(
    kafka_bootstrap: str, redis_server_url: str, prefix: str, data_dir: Path
) -> AsyncIterator[Node]:
    settings = isolated_settings(prefix, data_dir)
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        yield node


@pytest.fixture
def mcp_env(node: Node, kafka_bootstrap: str, redis_server_url: str) -> dict[str, str]:
    """What a deployment of ``engram mcp`` beside this node is given: the query service's URL,
    and the node's broker, topics and Redis (for the keyring its events are sealed with)."""
    assert node.http_url is not None
    return cli_env(
        node.settings,
        kafka_bootstrap,
        redis_server_url,
        ENGRAM_QUERY_URL=node.http_url,
        ENGRAM_DATA_DIR=str(node.settings.data_dir),
    )


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def results_of(result: CallToolResult) -> list[dict[str, Any]]:
    assert not result.is_error, text_of(result)
    assert isinstance(result.structured_content, dict)
    return list(result.structured_content["results"])


@contextlib.asynccontextmanager
async def over_stdio(env: dict[str, str], errlog: Path) -> AsyncIterator[ClientSession]:
    """``engram mcp`` launched by the SDK's stdio client, as a desktop agent launches it."""
    params = StdioServerParameters(command=ENGRAM_MCP[0], args=ENGRAM_MCP[1:], env=env, cwd=ROOT)
    with errlog.open("w") as stderr:
        async with (
            stdio_client(params, errlog=stderr) as (read, write),
            ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session,
        ):
            await asyncio.wait_for(session.initialize(), START_TIMEOUT_S)
            yield session


@contextlib.asynccontextmanager
async def over_http(env: dict[str, str], errlog: Path) -> AsyncIterator[ClientSession]:
    """``engram mcp --transport http --port 0`` in its own process; it prints its URL once it
    listens, and stops on SIGTERM."""
    with errlog.open("w") as stderr:
        server = await asyncio.create_subprocess_exec(
            *ENGRAM_MCP,
            "--transport",
            "http",
            "--port",
            "0",
            env=get_default_environment() | env,
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
        try:
            assert server.stdout is not None
            line = await asyncio.wait_for(server.stdout.readline(), START_TIMEOUT_S)
            announced = line.decode().strip()
            if not announced:
                announced = await asyncio.to_thread(errlog.read_text)
            assert announced.startswith("MCP server on http://127.0.0.1:"), announced
            url = announced.removeprefix("MCP server on ")
            async with (
                streamable_http_client(url) as (read, write),
                ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session,
            ):
                await asyncio.wait_for(session.initialize(), START_TIMEOUT_S)
                yield session
        finally:
            if server.returncode is None:
                server.terminate()
                try:
                    await asyncio.wait_for(server.wait(), 20)
                except TimeoutError:
                    server.kill()
                    await server.wait()


def observation(agent: str, content: str, **fields: Any) -> dict[str, Any]:
    return {"agent_id": agent, "content": content, "agent_type": "household", **fields}


async def test_over_stdio_an_agent_records_what_it_observes_and_recalls_it(
    mcp_env: dict[str, str], tmp_path: Path
) -> None:
    agent = f"MCP-{uuid.uuid4().hex[:6]}"
    flood = "Year 3: A major flood caused $60,000 in damages to my house"
    chat = "Year 3: A neighbour talked about the weather forecast"
    minor = "Year 3: A minor flood caused $8,000 damage to the garden"
    async with over_stdio(mcp_env, tmp_path / "stderr.log") as session:
        listed = (await session.list_tools()).tools
        recorded = [
            await session.call_tool(
                "publish_observation", observation(agent, flood, year=3, kind="flood.major")
            ),
            await session.call_tool(
                "publish_observation", observation(agent, chat, year=3, importance=0.2)
            ),
            await session.call_tool(
                "publish_observation", observation(agent, minor, year=3, importance=0.6)
            ),
        ]
        for result in recorded:
            assert not result.is_error, text_of(result)
        after = [result.structured_content["position"] for result in recorded]  # type: ignore[index]

        remembered = await session.call_tool(
            "retrieve_memory",
            {"agent_id": agent, "current_year": 4, "after": after, "wait_timeout_ms": PATIENT_MS},
        )
        similar = await session.call_tool(
            "recall_similar_experience",
            {"agent_id": agent, "query": "flood damage to the house", "after": after},
        )
        refused = await session.call_tool("retrieve_memory", {"agent_id": agent, "top_k": 50})

    assert {tool.name for tool in listed} == {
        "retrieve_memory",
        "recall_similar_experience",
        "publish_observation",
        "recall_fact",
        "recall_procedure",
        "lookup_plan",
        "select_tool",
        "give_feedback",
    }
    assert {m["content"]: m["store"] for m in results_of(remembered)} == {
        flood: "episodic",
        chat: "working",
        minor: "working",
    }
    response = RetrievalResponse.model_validate(remembered.structured_content)
    assert text_of(remembered) == format_for_prompt(response, with_time=True)
    assert text_of(remembered).splitlines()[0] == "=== YOUR MEMORY ==="

    # Every experience of importance 0.3 and above, in either store (the minor flood, 0.6, is
    # in working memory); the chat (0.2) is below seed 000's bar.
    assert {m["content"] for m in results_of(similar)} == {flood, minor}
    assert f"- {flood}" in text_of(similar)

    assert refused.is_error
    assert "top_k: Input should be less than or equal to 5" in text_of(refused)
    assert "Traceback" not in text_of(refused)


async def test_over_streamable_http_a_published_observation_is_found_at_once(
    mcp_env: dict[str, str], tmp_path: Path
) -> None:
    agent = f"MCP-{uuid.uuid4().hex[:6]}"
    content = "Year 5: The levee held and the street stayed dry"
    async with over_http(mcp_env, tmp_path / "stderr.log") as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        recorded = await session.call_tool(
            "publish_observation", observation(agent, content, year=5, importance=0.8)
        )
        assert not recorded.is_error, text_of(recorded)
        position = recorded.structured_content["position"]  # type: ignore[index]
        remembered = await session.call_tool(
            "retrieve_memory",
            {
                "agent_id": agent,
                "current_year": 5,
                "after": [position],
                "wait_timeout_ms": PATIENT_MS,
            },
        )
        unknown_topic = await session.call_tool(
            "retrieve_memory",
            {"agent_id": agent, "after": [{"topic": "no.such.topic", "partition": 0, "offset": 0}]},
        )

    assert listed["retrieve_memory"].input_schema["properties"]["top_k"]["maximum"] == 5
    assert listed["publish_observation"].annotations is not None
    assert listed["publish_observation"].annotations.read_only_hint is False
    assert position["topic"].endswith("agent.observations")
    assert [m["content"] for m in results_of(remembered)] == [content]
    assert text_of(remembered) == f"=== YOUR MEMORY ===\n- {content}"

    # The service's 422, in words for the model.
    assert unknown_topic.is_error
    assert "the memory service refused the request: after.0.topic" in text_of(unknown_topic)


def closed_port() -> int:
    return free_port()  # nothing listens there once the probe socket is closed


async def test_with_the_service_and_the_broker_down_every_call_is_a_tool_error(
    tmp_path: Path,
) -> None:
    service_port, broker_port = closed_port(), closed_port()
    env = {
        "ENGRAM_QUERY_URL": f"http://127.0.0.1:{service_port}",
        "ENGRAM_KAFKA_BOOTSTRAP": f"127.0.0.1:{broker_port}",
        "ENGRAM_KEYRING": "off",
        "ENGRAM_PUBLISH_TIMEOUT": "20",
        "ENGRAM_DATA_DIR": str(tmp_path),
    }
    async with over_stdio(env, tmp_path / "stderr.log") as session:
        retrieved = await session.call_tool("retrieve_memory", {"agent_id": "H001"})
        recalled = await session.call_tool(
            "recall_similar_experience", {"agent_id": "H001", "query": "flood"}
        )
        published = await session.call_tool(
            "publish_observation", {"agent_id": "H001", "content": "Rain all night"}
        )

    for result in (retrieved, recalled):
        assert result.is_error
        assert f"cannot reach the memory service at http://127.0.0.1:{service_port}" in (
            text_of(result)
        )
    assert published.is_error
    assert f"127.0.0.1:{broker_port}" in text_of(published)
    for result in (retrieved, recalled, published):
        assert "Traceback" not in text_of(result)
