"""The memory tools over the Model Context Protocol, with the ``mcp`` SDK's low-level server.

The low-level server, not ``MCPServer``: the tools are data (:mod:`projections.service.tools`),
each with its own pydantic input and output models, so the schemas the server lists are those
models' and every call is validated by them; ``MCPServer`` would derive both from function
signatures instead.

A call answers with the tool's text (for the model) and its structured output (matching the
listed ``outputSchema``, which the SDK's client checks). A failure the model can act on is a
tool result with ``isError`` and a message, never a traceback: the MCP specification asks
that tool errors, bad arguments included, come back as results the model sees, and only an
unknown tool name as a protocol error.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)
from mcp_types.jsonrpc import INVALID_PARAMS
from starlette.applications import Starlette

from projections.service.auth import ApiKey, ApiKeys, authorize
from projections.service.http_auth import API_KEY_SCOPE, AsgiApp, McpBearerAuth
from projections.service.tools import MemoryTool, ToolContext, ToolError, ToolRegistry

__all__ = ["MCP_PATH", "SERVER_NAME", "create_mcp_server", "http_app", "serve_http", "serve_stdio"]

log = logging.getLogger(__name__)

SERVER_NAME = "engram-memory"
MCP_PATH = "/mcp"

INSTRUCTIONS = (
    "Your memory. Before deciding, call retrieve_memory (or recall_similar_experience with a "
    "description of the situation) with your agent id; record what you observe with "
    "publish_observation. Memories carry the simulation year or step they happened in: pass "
    "the current one as current_year or current_step so their ages are right."
)


def tool_definition(tool: MemoryTool[Any]) -> Tool:
    """What ``tools/list`` says about ``tool``: its models' JSON Schemas and its hints."""
    return Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=tool.input_schema(),
        output_schema=tool.output_schema(),
        annotations=ToolAnnotations(
            title=tool.title,
            read_only_hint=tool.read_only,
            destructive_hint=False,
            idempotent_hint=tool.read_only,
            open_world_hint=False,
        ),
    )


def error_result(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=message)], is_error=True)


def create_mcp_server(
    registry: ToolRegistry,
    context: ToolContext,
    *,
    name: str = SERVER_NAME,
    version: str | None = None,
    api_keys: ApiKeys | None = None,
) -> Server[Any]:
    """A server offering ``registry``'s tools, each call run against ``context``.

    The tool list is fixed when the server is made: register every tool first. With
    ``api_keys`` (HTTP only: :func:`http_app` authenticates the request), a call needs a key
    with the ``read`` scope for a read-only tool and ``publish`` for the others, for the
    ``agent_id`` the call names; a refusal is a tool error the model reads."""
    definitions = [tool_definition(tool) for tool in registry]
    schemas = {tool.name: tool.input_schema() for tool in registry}

    async def list_tools(
        _ctx: ServerRequestContext[Any], _params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=definitions)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        tool = registry.get(params.name)
        if tool is None:
            known = ", ".join(registry.names())
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r}; the tools are {known}")
        if api_keys is not None:
            refusal = _refusal(tool, _request_key(ctx), params.arguments)
            if refusal is not None:
                return error_result(refusal)
        try:
            result = await tool.call(context, params.arguments)
        except ToolError as exc:
            return error_result(str(exc))
        except Exception as exc:  # the model gets a sentence; the operator gets the traceback
            log.exception("tool %s failed", tool.name)
            return error_result(
                f"{tool.name} failed unexpectedly ({type(exc).__name__}); the memory server "
                "logged the details"
            )
        return CallToolResult(
            content=[TextContent(text=result.text)],
            structured_content=result.structured.model_dump(mode="json"),
        )

    return Server(
        name,
        version=version or _package_version(),
        title="Engram memory",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _request_key(ctx: ServerRequestContext[Any]) -> ApiKey | None:
    request = ctx.request
    scope = getattr(request, "scope", None)
    key = scope.get(API_KEY_SCOPE) if isinstance(scope, dict) else None
    return key if isinstance(key, ApiKey) else None


def _refusal(
    tool: MemoryTool[Any], key: ApiKey | None, arguments: dict[str, Any] | None
) -> str | None:
    """Why ``key`` may not make this call, or None."""
    if key is None:
        return "not authenticated: this memory server needs an API key (Authorization: Bearer)"
    agent_id = (arguments or {}).get("agent_id")
    decision = authorize(
        key,
        "read" if tool.read_only else "publish",
        agent_id if isinstance(agent_id, str) else None,
    )
    if decision.allowed:
        return None
    log.info("refused %s: %s", tool.name, decision.reason)
    return f"refused: {decision.reason}"


async def serve_stdio(server: Server[Any]) -> None:
    """Serves one client on this process's stdin and stdout until it closes them; nothing
    else may write to stdout meanwhile (logs go to stderr)."""
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_app(
    server: Server[Any], *, host: str, api_keys: ApiKeys | None = None
) -> Starlette | McpBearerAuth:
    """Streamable HTTP at :data:`MCP_PATH`. ``host`` is where it listens: on a loopback
    address the SDK refuses requests whose Host or Origin is another site (DNS rebinding).
    ``api_keys``: a request without a known key is answered 401 before the SDK sees it."""
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    if api_keys is None:
        return app
    return McpBearerAuth(cast(AsgiApp, app), api_keys, path=MCP_PATH)


async def serve_http(
    server: Server[Any],
    *,
    host: str,
    port: int,
    on_started: Callable[[str], Awaitable[None] | None] | None = None,
    stop: asyncio.Event | None = None,
    api_keys: ApiKeys | None = None,
) -> None:
    """Serves streamable HTTP until ``stop`` is set (or the task is cancelled).

    ``port`` 0 takes a free one; ``on_started`` is called with the endpoint's URL once the
    socket listens."""
    config = uvicorn.Config(
        http_app(server, host=host, api_keys=api_keys),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    # Not an EmbeddedServer: the SDK's event streams (sse-starlette) end only when uvicorn's
    # own signal handler runs, so this server keeps it; it stops serving on the first signal
    # and raises it again for ``engram mcp`` once down.
    web = uvicorn.Server(config)
    serving = asyncio.create_task(_serve(web, f"{host}:{port}"))
    stopped = asyncio.create_task((stop or asyncio.Event()).wait())
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_S):
            while not web.started:
                if serving.done():
                    serving.result()
                    raise OSError(f"the MCP server stopped while starting on {host}:{port}")
                await asyncio.sleep(0.02)
        if on_started is not None:
            bound = web.servers[0].sockets[0].getsockname()[1]
            shown = f"[{host}]" if ":" in host else host
            announced = on_started(f"http://{shown}:{bound}{MCP_PATH}")
            if announced is not None:
                await announced
        await asyncio.wait({serving, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            serving.result()
    finally:
        stopped.cancel()
        web.should_exit = True
        try:
            await asyncio.wait_for(serving, timeout=10.0)
        except (TimeoutError, asyncio.CancelledError, OSError):
            serving.cancel()


STARTUP_TIMEOUT_S = 30.0


async def _serve(web: uvicorn.Server, where: str) -> None:
    """uvicorn exits the process (``SystemExit``) when it cannot bind: an ``OSError`` here."""
    try:
        await web.serve()
    except SystemExit:
        raise OSError(
            f"the MCP server cannot listen on {where} (uvicorn's error above says why: a port "
            "in use, an address not of this machine, a port below 1024)"
        ) from None


def _package_version() -> str:
    try:
        return importlib.metadata.version("engram")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
