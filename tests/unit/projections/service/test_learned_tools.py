"""The ``select_tool`` MCP tool: through the MCP SDK's client connected in process to the
server, whose query service is the real app over a :class:`FieldStore`. A selection tells the
model which tool to use and how to teach it; a miss tells it that no known tool fits and to
define a new one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from mcp import Client

from projections.learned.reads import ToolChoice
from projections.service.client import AsyncEngramClient
from projections.service.learned_tools import NEW_TOOL_ADVICE
from projections.service.mcp_server import create_mcp_server
from projections.service.tools import ToolContext, memory_tools
from tests.unit.projections.learned.learning_agents import (
    ATTRIBUTE_DESCRIPTION,
    ATTRIBUTE_TOOL,
    HEALTH,
    SPEED,
    FieldStore,
    seed_tools,
)
from tests.unit.projections.test_memory_tools import text_of
from tests.unit.projections.test_service_validation import app_over

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def connected(store: FieldStore) -> AsyncIterator[Client]:
    """Not a fixture: the SDK client's task group must close in the task that opened it."""
    transport = httpx.ASGITransport(app=app_over(learned=store.memory()))
    async with (
        AsyncEngramClient("http://engram.test", transport=transport) as service,
        Client(create_mcp_server(memory_tools(), ToolContext(service))) as client,
    ):
        yield client


async def call(store: FieldStore, arguments: dict[str, Any]) -> tuple[ToolChoice, str]:
    async with connected(store) as mcp:
        result = await mcp.call_tool("select_tool", arguments)
    assert not result.is_error, text_of(result)
    return ToolChoice.model_validate(result.structured_content), text_of(result)


@pytest.fixture
def store() -> FieldStore:
    store = FieldStore()
    seed_tools(store)
    return store


async def test_a_selection_names_the_tool_and_how_to_teach_it(store: FieldStore) -> None:
    choice, text = await call(store, {"agent_id": "P1", "prompt": SPEED})
    assert choice.selected is not None
    assert choice.selected.name == ATTRIBUTE_TOOL
    assert text.startswith(f"Use the tool {ATTRIBUTE_TOOL} (similarity 0.47 to your request;")
    assert ATTRIBUTE_DESCRIPTION in text
    assert f"exclude=['{ATTRIBUTE_TOOL}']" in text
    assert "No known tool" not in text


async def test_a_miss_tells_the_model_to_define_a_new_tool(store: FieldStore) -> None:
    choice, text = await call(store, {"agent_id": "P1", "prompt": HEALTH})
    assert choice.reason == "below_threshold"
    assert text == (
        f"No known tool fits this request (the closest, {ATTRIBUTE_TOOL}, is 0.28 similar, "
        f"below 0.4). {NEW_TOOL_ADVICE}"
    )
    assert "new skill" in NEW_TOOL_ADVICE


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"agent_id": "P1", "prompt": SPEED, "exclude": [ATTRIBUTE_TOOL]}, "you excluded every"),
        ({"agent_id": "P2", "prompt": SPEED}, "you have no tools yet"),
    ],
)
async def test_with_nothing_to_compare_the_miss_says_why(
    store: FieldStore, arguments: dict[str, Any], why: str
) -> None:
    choice, text = await call(store, arguments)
    assert choice.reason in {"all_excluded", "no_tools"}
    assert text.startswith(f"No known tool fits this request ({why}")
    assert text.endswith(NEW_TOOL_ADVICE)


async def test_the_tool_is_listed_read_only_with_its_input(store: FieldStore) -> None:
    async with connected(store) as mcp:
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        refused = await mcp.call_tool(
            "select_tool", {"agent_id": "P1", "prompt": SPEED, "exclude": [""]}
        )
    listed = tools["select_tool"]
    assert listed.annotations is not None
    assert listed.annotations.read_only_hint is True
    schema = listed.input_schema
    assert schema["required"] == ["agent_id", "prompt"]
    assert set(schema["properties"]) == {"agent_id", "prompt", "exclude"}
    assert refused.is_error
    assert "exclude.0: String should have at least 1 character" in text_of(refused)


async def test_a_query_service_url_that_is_not_http_is_a_tool_error_in_words() -> None:
    def unsupported(request: httpx.Request) -> httpx.Response:
        raise httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'.")

    async with (
        AsyncEngramClient("http://engram.test", transport=httpx.MockTransport(unsupported)) as s,
        Client(create_mcp_server(memory_tools(), ToolContext(s))) as mcp,
    ):
        result = await mcp.call_tool("select_tool", {"agent_id": "H001", "prompt": "speed"})
    assert result.is_error
    assert "the memory service cannot be called: the query service URL" in text_of(result)
