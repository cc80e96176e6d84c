"""``engram versions``: the projection versions, which one is active and who uses each;
activating a reprocessed one, and dropping one nobody uses."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Column, Table

from streams.cli import deferred
from streams.cli.configuration import load_settings
from streams.cli.console import console, fail, print_whole, run
from streams.cli.version_stores import version_stores

if TYPE_CHECKING:
    from projections.versions import ProjectionVersions, VersionInfo

commands = typer.Typer(
    help="Projection versions: list them, activate a reprocessed one, or drop one nobody uses.",
    no_args_is_help=False,
)


@commands.callback(invoke_without_command=True)
def versions_list(ctx: typer.Context) -> None:
    """List the projection versions, which one is active, and who uses each."""
    if ctx.invoked_subcommand is not None:
        return
    versions = version_stores(load_settings()).versions

    async def main() -> None:
        try:
            infos = await versions.versions()
            members = await versions.members()
        finally:
            await versions.close()
        table = Table(
            "version",
            "state",
            "created",
            "redis namespace",
            "qdrant collection",
            # A reprocessed version's configuration; "live": it applies the live derived log.
            Column("derived by", no_wrap=True, min_width=12),
            "used by",
        )
        for info in infos:
            name = info.version.name
            users = [f"{m.role}" for m in members if m.uses(name)]
            created = (
                datetime.fromtimestamp(info.created_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
                if info.created_at
                else "-"
            )
            table.add_row(
                info.version.label + (" *" if info.active else ""),
                info.state,
                created,
                info.version.redis_namespace,
                info.version.qdrant_collection,
                info.derived_log.config_version if info.derived_log else "live",
                ", ".join(sorted(users)) or "-",
            )
        print_whole(table)

    run(main)


@commands.command(
    "activate",
    help=(
        "Serve a reprocessed version: point every process at it. Running workers (and query "
        "services with another embedder) then finish their batch, commit and exit with code "
        "3, asking to be restarted with the version's configuration; workers started with it "
        "continue the version's derived log from where the reprocess stopped. A replayed "
        "version is caught up and switched to with `engram replay --into NAME` instead."
    ),
)
def versions_activate(
    name: Annotated[str, typer.Argument(help="A version built by engram reprocess.")],
) -> None:
    versions = version_stores(load_settings()).versions

    async def main() -> None:
        try:
            info = await _inactive_version(versions, name, "is active already")
            derived = info.derived_log
            if derived is None:
                fail(
                    f"version {name!r} applies the live derived log and may be behind it: "
                    f"`engram replay --into {name}` catches it up and switches to it"
                )
            if info.state == "building":
                fail(f"version {name!r} is still being built (or its reprocess died)")
            stack = await versions.embedded()
            if stack is not None:
                fail(
                    f"this is the embedded stack of `engram up` ({stack}): its processors "
                    "write the live derived log and would stop (exit code 3) rather than "
                    f"serve {name!r}, and its Redis, with every version, starts empty at the "
                    "next run. A reprocessed version is served by a cluster's workers run "
                    "with its configuration (deploy/README.md, 'Reprocess with a new "
                    "configuration')"
                )
            previous = await versions.activate(name)
            before = previous.label if previous is not None else "-"
            console.print(
                f"switched {before} -> {name}. Run the workers with configuration "
                f"{derived.config_version} (embedder {derived.embedder}); they continue "
                f"{derived.topic_prefix}memory.items as consumer group {derived.group}. "
                "Workers with another configuration exit, and refuse to start."
            )
        finally:
            await versions.close()

    run(main)


async def _inactive_version(versions: ProjectionVersions, name: str, if_active: str) -> VersionInfo:
    """The registered version ``name``, or one line saying why not."""
    info = {i.version.name: i for i in await versions.versions()}.get(name)
    if info is None:
        fail(f"no projection version {name!r} (`engram versions` lists them)")
    if info.active:
        fail(f"version {name!r} {if_active}")
    return info


@commands.command("drop")
def versions_drop(
    name: Annotated[str, typer.Argument(help="The version to delete (not the active one).")],
    timeout: Annotated[
        float, typer.Option(min=0.0, help="Longest wait for processes to let go of it.")
    ] = 30.0,
    with_log: Annotated[
        bool | None,
        typer.Option(
            "--with-log/--keep-log",
            help="For a reprocessed version: delete its derived log (its own memory.items, "
            "memory.lifecycle, memory.deadletter and memory.snapshots topics) too, or keep "
            "it. One of the two is required there: the log can be derived again from the raw "
            "events, but a summariser that is a language model may not write the same words.",
        ),
    ] = None,
) -> None:
    """Delete a version's Redis keys and Qdrant collection, once no running process uses it."""
    stores = version_stores(load_settings())

    async def main() -> None:
        try:
            info = await _inactive_version(
                stores.versions, name, "is active; replay into another one first"
            )
            log_topics = _derived_log_topics(info)
            if log_topics and with_log is None:
                fail(
                    f"version {name!r} has a derived log of its own ({', '.join(log_topics)}): "
                    "say --with-log to delete it too, or --keep-log to keep it"
                )
            await deferred.projection_versions.wait_until_unused(
                stores.versions, info.version, timeout=timeout
            )
            if log_topics and with_log:
                # Before the version is forgotten: if this fails, the command can run again.
                deleted = await deferred.topic_admin.delete_topics(
                    stores.bootstrap, log_topics, timeout=max(timeout, 1.0)
                )
                console.print(f"deleted its derived log: {', '.join(deleted) or 'no topics'}")
            await stores.drop(info.version)
            console.print(f"dropped version {name}")
            if log_topics and not with_log:
                console.print(f"kept its derived log: {', '.join(log_topics)}")
        finally:
            await stores.versions.close()

    run(main)


def _derived_log_topics(info: VersionInfo) -> list[str]:
    """The topics of a reprocessed version's own derived log (none for a replayed one, which
    applies the live log)."""
    if info.derived_log is None:
        return []
    topics = deferred.topics.Topics(derived_prefix=info.derived_log.topic_prefix)
    return [topics.items, topics.lifecycle, topics.deadletter, topics.snapshots]
