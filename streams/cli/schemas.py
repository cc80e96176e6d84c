"""``engram schemas``: the event contracts, for producers written in other languages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from streams.cli import deferred
from streams.cli.console import fail

commands = typer.Typer(help="Event contracts.", no_args_is_help=True)


@commands.command("export")
def export_schemas(
    directory: Annotated[Path, typer.Argument(help="Where to write the JSON Schema files.")],
) -> None:
    """Write the JSON Schema of every event type, for producers in other languages."""
    try:
        written = deferred.json_schema.export_json_schemas(directory)
    except OSError as exc:
        fail(f"cannot write the schemas to {directory}: {exc.strerror or exc}")
    for path in written:
        typer.echo(str(path))
