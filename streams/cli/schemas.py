"""``engram schemas``: the event contracts, for producers written in other languages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from streams.cli import deferred

commands = typer.Typer(help="Event contracts.", no_args_is_help=True)


@commands.command("export")
def export_schemas(
    directory: Annotated[Path, typer.Argument(help="Where to write the JSON Schema files.")],
) -> None:
    """Write the JSON Schema of every event type, for producers in other languages."""
    for path in deferred.json_schema.export_json_schemas(directory):
        typer.echo(str(path))
