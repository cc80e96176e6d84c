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
    "Configuration comes from ENGRAM_* environment variables (see README). With none set, "
    "`engram up` and `engram demo` run the embedded dev stack; the other commands say which "
    "variable they need (`engram up` prints them all).\n\n"
    "Exit codes: 0 done; 1 not done (a declined confirmation, a forget no worker completed "
    "in time, `recall --again` results that differ); 2 refused (bad input or configuration: "
    "the same command would be refused again); 3 the active projection version needs another "
    "configuration; 70 a worker met a batch it cannot process and stopped (crash-only: it "
    "resumes from its last checkpoint when started again); 75 a broker, Redis or the query "
    "service could not be reached (a retry may succeed); 128 + N stopped by signal N.",
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
