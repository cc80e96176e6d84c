"""The ``engram`` command line: the typer app, one group of commands per module of
:mod:`streams.cli`, assembled in the order ``engram --help`` lists them."""

from __future__ import annotations

import typer

from streams.cli import (
    eventlog,
    learned,
    mcp,
    memory,
    privacy,
    rebuild,
    recall,
    schemas,
    stack,
    versions,
)

app = typer.Typer(
    name="engram",
    help="Engram: event-sourced memory for AI agents. Every memory is an event on a Kafka log; "
    "Redis (working memory) and Qdrant (episodic memory) hold projections rebuilt from it.\n\n"
    "Configuration comes from ENGRAM_* environment variables (see README); with none set, "
    "commands use the embedded dev stack.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for group in (stack, memory, learned, recall, mcp, rebuild, privacy, eventlog):
    app.add_typer(group.commands)
app.add_typer(schemas.commands, name="schemas")
app.add_typer(versions.commands, name="versions")


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
