"""``engram mcp``: the memory tools served to LLM agents, a process of its own."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError

from streams.cli import deferred
from streams.cli.configuration import configure, unparsable
from streams.cli.console import fail, run, validation_lines
from streams.cli.signals import stop_on_signal

commands = typer.Typer()


@commands.command(
    "mcp",
    help=(
        "Serve the memory tools to LLM agents over MCP: retrieve_memory, "
        "recall_similar_experience, recall_fact, recall_procedure, lookup_plan and "
        "select_tool read; "
        "publish_observation and give_feedback write. Reads go to the query service "
        "(ENGRAM_QUERY_URL, else ENGRAM_URL; default http://127.0.0.1:8000), writes to "
        "the log (ENGRAM_KAFKA_BOOTSTRAP; unset: publishing is refused). stdio serves the one "
        "client that launched it; http serves streamable HTTP at /mcp."
    ),
)
def mcp_command(
    transport: Annotated[
        str, typer.Option(help="stdio (a client launches this command) or http.")
    ] = "stdio",
    host: Annotated[
        str | None, typer.Option(help="HTTP: address to listen on (env ENGRAM_MCP_HOST).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            min=0, max=65535, help="HTTP: port, 0 for any free (env ENGRAM_MCP_PORT; 8765)."
        ),
    ] = None,
    query_url: Annotated[
        str | None, typer.Option(help="The query service (env ENGRAM_QUERY_URL).")
    ] = None,
) -> None:
    tool_server = deferred.tool_server
    if transport not in ("stdio", "http"):
        fail(f"--transport must be stdio or http, not {transport!r}")
    overrides: dict[str, Any] = {"mcp_host": host, "mcp_port": port, "query_url": query_url}
    try:
        settings = tool_server.ToolServerSettings(
            **{k: v for k, v in overrides.items() if v is not None}
        )
    except ValidationError as exc:
        fail(f"invalid configuration:\n{validation_lines(exc)}")
    except SettingsError as exc:
        fail(unparsable(exc))
    configure(settings)

    def announce(url: str) -> None:
        print(f"MCP server on {url}", flush=True)  # stdout: a launcher reads it

    async def main() -> None:
        # uvicorn takes the signal for the HTTP server and raises it again once down (see
        # projections.service.mcp_server), and the loop sees both: one stop, not a second.
        stop = stop_on_signal(second_at_once=False)
        await tool_server.run_tool_server(
            settings,
            "http" if transport == "http" else "stdio",
            stop=stop,
            on_started=announce,
        )
        if stop.is_set() and transport == "stdio":
            # The SDK's stdin reader is blocked in a thread that only the client's next line
            # or EOF would end; the tools are closed, so the process ends without it.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    run(main)
