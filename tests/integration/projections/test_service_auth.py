"""API keys through real HTTP: the query service and the MCP server, with a keys file, in front
of a real broker, Redis and Qdrant Edge.

The node runs for the module with ``ENGRAM_API_KEYS_FILE``; the MCP server runs in this process
(:func:`run_tool_server` over streamable HTTP) with the same file, and reaches the service with
a key of its own (``ENGRAM_API_KEY``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import TextContent

from projections.service.auth import digest
from projections.service.client import AsyncEngramClient, QueryError
from streams.integrations.tool_server import ToolServerSettings, run_tool_server
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import invoke, isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

READER = f"reader-{uuid.uuid4().hex}"
"""May read for agents H* only."""
PUBLISHER = f"publisher-{uuid.uuid4().hex}"
"""May read and publish for agents H* and team-a.*."""
SERVICE = f"mcp-service-{uuid.uuid4().hex}"
"""The MCP server's own key for the query service: read, every agent."""
ACCENTED = f"clé-{uuid.uuid4().hex}"
"""A key past ASCII (its digest taken of its UTF-8 bytes, as `printf %s KEY | sha256sum`)."""

START_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "api-keys.json"
    entries = [
        ("households", READER, ["H*"], ["read"]),
        ("planner", PUBLISHER, ["H*", "team-a.*"], ["read", "publish"]),
        ("mcp", SERVICE, ["*"], ["read"]),
        ("accented", ACCENTED, ["H*"], ["read"]),
    ]
    keys = [
        {"name": name, "sha256": digest(key), "agents": agents, "scopes": scopes}
        for name, key, agents, scopes in entries
    ]
    path.write_text(json.dumps({"keys": keys}))
    return path


@pytest.fixture(scope="module")
async def node(
    kafka_bootstrap: str,
    redis_server_url: str,
    keys_file: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Node]:
    prefix = f"auth{uuid.uuid4().hex[:8]}."
    data_dir = tmp_path_factory.mktemp("engram")
    settings = isolated_settings(prefix, data_dir, api_keys_file=keys_file)
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        yield node


@pytest.fixture
async def http(node: Node) -> AsyncIterator[httpx.AsyncClient]:
    assert node.http_url is not None
    async with httpx.AsyncClient(base_url=node.http_url, timeout=30.0) as client:
        yield client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_without_a_known_key_every_route_but_the_probes_is_401(
    http: httpx.AsyncClient,
) -> None:
    for headers in ({}, bearer("not-a-key"), {"Authorization": f"Basic {READER}"}):
        retrieved = await http.post("/v1/agents/H001/retrieve", json={}, headers=headers)
        history = await http.get("/v1/agents/H001/history", headers=headers)
        for answer in (retrieved, history):
            assert answer.status_code == 401, answer.text
            assert answer.headers["www-authenticate"] == 'Bearer realm="engram"'
    # 401 comes before the body is judged: no schema is revealed to a stranger.
    invalid = await http.post("/v1/agents/H001/retrieve", json={"top_k": "many"})
    assert invalid.status_code == 401
    assert (await http.get("/healthz")).status_code == 200
    assert (await http.get("/readyz")).status_code == 200
    assert (await http.get("/openapi.json")).status_code == 200


async def test_a_key_acts_only_for_its_agents(http: httpx.AsyncClient) -> None:
    allowed = await http.post("/v1/agents/H001/retrieve", json={}, headers=bearer(READER))
    assert allowed.status_code == 200, allowed.text
    history = await http.get("/v1/agents/H002/history", headers=bearer(READER))
    assert history.status_code == 200, history.text

    refused = await http.post("/v1/agents/team-a.bob/retrieve", json={}, headers=bearer(READER))
    assert refused.status_code == 403
    assert refused.json() == {"detail": "API key 'households' may not act for agent 'team-a.bob'"}
    assert "insufficient_scope" in refused.headers["www-authenticate"]
    other = await http.post("/v1/agents/team-a.bob/retrieve", json={}, headers=bearer(PUBLISHER))
    assert other.status_code == 200, other.text


async def test_the_python_client_presents_its_key(node: Node) -> None:
    assert node.http_url is not None
    async with AsyncEngramClient(node.http_url, api_key=READER) as client:
        await client.retrieve("H001")
        with pytest.raises(QueryError) as refused:
            await client.retrieve("X001")
    assert refused.value.status == 403
    async with AsyncEngramClient(node.http_url) as anonymous:
        with pytest.raises(QueryError) as unauthenticated:
            await anonymous.history("H001")
    assert unauthenticated.value.status == 401


@pytest.mark.parametrize(
    "args",
    [
        ["retrieve", "H001"],
        ["procedures", "H001"],
        ["facts", "H001"],
        ["plan", "H001", "x"],
        ["select-tool", "H001", "x"],
    ],
)
async def test_the_command_line_presents_its_key(node: Node, args: list[str]) -> None:
    """`engram procedures`, `facts` and `plan` took no key: always 401 from such a service."""
    assert node.http_url is not None
    env = {"ENGRAM_URL": node.http_url}
    anonymous = await invoke(args, env)
    assert anonymous.exit_code == 2, anonymous.output
    assert "401" in anonymous.output
    keyed = await invoke(args, env | {"ENGRAM_API_KEY": READER})
    assert keyed.exit_code == 0, keyed.output


async def test_a_key_past_ascii_authenticates(node: Node) -> None:
    """The client failed to encode it (UnicodeEncodeError), and the server, which reads a
    header as Latin-1, digested other characters than the key's: always 401."""
    assert node.http_url is not None
    async with AsyncEngramClient(node.http_url, api_key=ACCENTED) as client:
        await client.retrieve("H001")
        with pytest.raises(QueryError) as refused:
            await client.retrieve("X001")
    assert refused.value.status == 403  # known, and held to its agents


async def test_the_openapi_document_declares_the_bearer_scheme(http: httpx.AsyncClient) -> None:
    document = (await http.get("/openapi.json")).json()
    assert document["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    retrieve = document["paths"]["/v1/agents/{agent_id}/retrieve"]["post"]
    assert retrieve["security"] == [{"ApiKey": []}]
    assert {"401", "403"} <= set(retrieve["responses"])
    assert "security" not in document["paths"]["/healthz"]["get"]


@pytest.fixture
async def mcp_url(
    node: Node, kafka_bootstrap: str, redis_server_url: str, keys_file: Path
) -> AsyncIterator[str]:
    assert node.http_url is not None
    settings = ToolServerSettings(
        query_url=node.http_url,
        api_key=SERVICE,
        api_keys_file=keys_file,
        mcp_port=0,
        kafka_bootstrap=kafka_bootstrap,
        redis_url=redis_server_url,
        topic_prefix=node.settings.topic_prefix,
        redis_namespace=node.settings.redis_namespace,
        data_dir=node.settings.data_dir,
    )
    stop = asyncio.Event()
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        run_tool_server(settings, "http", stop=stop, on_started=started.set_result)
    )
    try:
        yield await asyncio.wait_for(started, START_TIMEOUT_S)
    finally:
        stop.set()
        await asyncio.wait_for(serving, 30)


def text_of(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_the_mcp_endpoint_is_401_without_a_known_key(mcp_url: str) -> None:
    async with httpx.AsyncClient() as client:
        for headers in ({}, bearer("not-a-key")):
            answer = await client.post(mcp_url, json={}, headers=headers)
            assert answer.status_code == 401
            assert answer.headers["www-authenticate"] == 'Bearer realm="engram"'


async def call(url: str, key: str, tool: str, arguments: dict[str, Any]) -> Any:
    async with (
        create_mcp_http_client(headers=bearer(key)) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await asyncio.wait_for(session.initialize(), START_TIMEOUT_S)
        return await session.call_tool(tool, arguments)


async def test_mcp_tools_need_the_scope_and_the_agent(mcp_url: str) -> None:
    observation = {"agent_id": "H042", "content": "Year 1: the river rose", "year": 1}
    read_only = await call(mcp_url, READER, "publish_observation", observation)
    assert read_only.is_error
    assert text_of(read_only) == "refused: API key 'households' lacks the 'publish' scope"

    elsewhere = await call(
        mcp_url, PUBLISHER, "publish_observation", {**observation, "agent_id": "X1"}
    )
    assert elsewhere.is_error
    assert "may not act for agent 'X1'" in text_of(elsewhere)

    published = await call(mcp_url, PUBLISHER, "publish_observation", observation)
    assert not published.is_error, text_of(published)
    # The read goes to the query service with the MCP server's own key.
    retrieved = await call(mcp_url, READER, "retrieve_memory", {"agent_id": "H042"})
    assert not retrieved.is_error, text_of(retrieved)
    refused = await call(mcp_url, READER, "retrieve_memory", {"agent_id": "team-a.x"})
    assert refused.is_error
    assert "may not act for agent 'team-a.x'" in text_of(refused)
