"""The commands that read or write the log itself: ``export`` and ``import`` an archive, and
an agent's ``history`` as the log tells it."""

from __future__ import annotations

import asyncio
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from streams.cli import deferred
from streams.cli.configuration import (
    active_topics,
    active_version,
    bootstrap_of,
    load_settings,
    open_keyring,
)
from streams.cli.console import (
    UNREACHABLE,
    checked_agent_id,
    console,
    err,
    fail,
    friendly_errors,
    if_stopped,
    run,
    unreachable,
)
from streams.cli.progress import counted, sized_as_it_goes
from streams.settings import EngramSettings

if TYPE_CHECKING:
    from projections.history import AgentHistory
    from schemas.deadletter import DeadLetter
    from streams.eventlog.archive_files import TopicSummary

commands = typer.Typer()


@commands.command(
    "export",
    help=(
        "Write Engram's topics (ENGRAM_TOPIC_PREFIX) to DIRECTORY: one gzip JSON-lines file per "
        "partition, every record with its offset, and a manifest. Reads the log as it is "
        "when the export starts."
    ),
)
def export_command(
    directory: Annotated[
        Path,
        typer.Argument(
            help="Where to write the archive: a new or empty directory, or an earlier archive, "
            "which is replaced (anything else is refused)."
        ),
    ],
) -> None:
    settings = load_settings()
    bootstrap = bootstrap_of(settings)

    async def main() -> None:
        with (
            if_stopped(lambda: f"nothing was written: {directory} is as it was"),
            sized_as_it_goes("exporting") as (total, advance),
        ):
            summaries = await deferred.archive.export_log(
                bootstrap,
                deferred.topics.Topics(settings.topic_prefix).all(),
                directory,
                progress=advance,
                sized=total,
            )
        report("exported", summaries, directory)

    run(main)


async def _check_keys(settings: EngramSettings, directory: Path) -> None:
    """Refuse an archive sealed with keys this deployment's keyring does not hold: imported,
    its memories would be unreadable (the workers skip each such record), with nothing to say
    so but a log line per record. The keyring moves with the log, or the log stays sealed."""
    pairs = await asyncio.to_thread(deferred.archive.sealing_keys, directory)
    if not pairs:
        return
    keyring = await open_keyring(settings)
    if keyring is None:
        fail(
            "the archive's records are sealed, and this deployment has no keyring "
            "(ENGRAM_KEYRING=off): nothing could read them. Set ENGRAM_KEYRING to the keyring "
            "they were sealed with, or pass --keys-elsewhere to import them anyway"
        )
    try:
        found = await keyring.lookup(pairs)
    finally:
        await keyring.close()
    missing = sorted(pair for pair, key in found.items() if key is None)
    if missing:
        agent, key_id = missing[0]
        fail(
            f"{len(missing):,} of the {len(pairs):,} keys that sealed the archive's records "
            f"(first: {key_id} of {agent}) are not in this deployment's keyring, so what they "
            "sealed would be unreadable once imported. Bring the keyring with the archive: "
            "the source's ENGRAM_KEYRING (engram up keeps it in DATA_DIR/keyring; with "
            "ENGRAM_KEYRING=redis, the hashes {namespace}#keyring:keys and "
            "{namespace}#keyring:forgotten of its Redis), or pass --keys-elsewhere to import anyway"
        )


@commands.command(
    "import",
    help=(
        "Load an archive written by `engram export` into the broker at ENGRAM_KAFKA_BOOTSTRAP, "
        "every record at the partition and offset it had. The topics must be empty or absent, "
        "unless --resume continues an import of the same archive that stopped."
    ),
)
def import_command(
    directory: Annotated[Path, typer.Argument(help="An archive written by engram export.")],
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue an import of this archive that stopped half way: each partition "
            "goes on from where the target ends, once its last record there is found to be "
            "the archive's (a target that holds anything else is refused).",
        ),
    ] = False,
    keys_foreign: Annotated[
        bool,
        typer.Option(
            "--keys-elsewhere",
            help="Import although this deployment's keyring lacks keys that sealed the "
            "archive's records (they stay unreadable until a keyring holding them is used).",
        ),
    ] = False,
) -> None:
    settings = load_settings()
    bootstrap = bootstrap_of(settings)

    async def main() -> None:
        archive = deferred.archive
        summaries = archive.read_manifest(directory)
        prefix = archive.topic_prefix_of(summaries)
        if prefix is not None and prefix != settings.topic_prefix:
            fail(
                f"the archive's topics were written under the topic prefix {prefix!r} "
                f"({summaries[0].name}, ...), and Engram with ENGRAM_TOPIC_PREFIX="
                f"{settings.topic_prefix!r} would never read them: import with "
                f"ENGRAM_TOPIC_PREFIX={prefix!r}"
            )
        if not keys_foreign:
            await _check_keys(settings, directory)
        total = sum(s.total for s in summaries)
        there: list[int] = []
        written: list[int] = []

        def advance_both(n: int) -> None:
            written.append(n)
            advance(n)

        def left() -> str | None:
            done = sum(written)
            if not done:  # refused before a record was written: no --resume is needed
                return None
            return (
                f"the target holds at least {done:,} of the archive's {total:,} records; "
                f"`engram import --resume {directory}` continues from there"
            )

        with if_stopped(left), counted("importing", total) as advance:
            summaries = await archive.import_log(
                bootstrap,
                directory,
                progress=advance_both,
                replication=deferred.topic_admin.TopicReplication.from_settings(settings),
                resume=resume,
                present=there.append,
            )
        report("imported", summaries, directory)
        if sum(there):
            console.print(f"({sum(there):,} of them were there already: resumed)")

    run(main)


@commands.command(
    "dead-letters",
    help=(
        "Show the latest records the processors could not use (memory.deadletter), newest "
        "first: where each was published, why it was refused, and its first bytes. Such a "
        "record is kept, never lost: publish it again, mended."
    ),
)
def dead_letters_command(
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="How many to show.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print them as JSON lines.")] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds to read the log for.")] = 30.0,
) -> None:
    settings = load_settings()
    bootstrap = bootstrap_of(settings)

    async def main() -> None:
        # The live log's, and (given Redis, which says) those of the derived log a
        # reprocessed version continues once it is active.
        topics = [deferred.topics.Topics(settings.topic_prefix).deadletter]
        if settings.redis_url:
            active = (await active_topics(settings, settings.redis_url)).deadletter
            topics += [active] if active not in topics else []
        found = await deferred.dead_letters.latest_dead_letters(
            bootstrap, topics, limit=limit, timeout=timeout
        )
        if as_json:
            for letter in found.latest:
                typer.echo(letter.model_dump_json())
            return
        if found.unreadable:
            err.print(f"{found.unreadable:,} records on {', '.join(topics)} are no dead letters")
        if not found.total:
            console.print(f"no dead letters on {', '.join(topics)}")
            return
        print_dead_letters(found.latest, found.total)

    run(main)


def print_dead_letters(latest: list[DeadLetter], total: int) -> None:
    """One block a letter, newest first: when and where, the kind, the reason, the first bytes
    (a table squeezed the reasons into a narrow column)."""
    console.print(f"the latest {len(latest)} of {total:,} dead letters, newest first")
    for letter in latest:
        when = letter.failed_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        where = f"{letter.topic}:{letter.partition}:{letter.offset}"
        console.print(
            f"\n[bold]{when}[/bold]  {escape(where)}  [yellow]{escape(letter.error_kind)}[/yellow]",
            markup=True,
        )
        console.print(f"  {letter.reason[:500]}", markup=False)
        console.print(f"  {repr(letter.original_value()[:100])[2:-1]}", markup=False)


def report(verb: str, summaries: list[TopicSummary], directory: Path) -> None:
    for summary in summaries:
        if summary.total:
            console.print(f"  {summary.name:32} {summary.total:>10,} records")
    total = sum(s.total for s in summaries)
    console.print(f"{verb} {total:,} records ({directory})")


@commands.command(
    help=(
        "Show what happened to an agent's memories, read from the log: recorded, promoted, "
        "summarised, forgotten, year-end consolidations and retrievals, oldest first."
    )
)
def history(
    agent_id: Annotated[str, typer.Argument(help="Whose history.")],
    limit: Annotated[
        int, typer.Option(min=1, max=10_000, help="How many of the latest entries to show.")
    ] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print the history as JSON.")] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds to read the log for.")] = 30.0,
) -> None:
    settings = load_settings()
    checked_agent_id(agent_id)
    bootstrap = bootstrap_of(settings)

    async def main() -> None:
        # As the query service reads it: the active version's derived log and agent index
        # (the base ones stop at a switch: a reprocessed version's history was the old log's).
        topics, index = deferred.topics.Topics(settings.topic_prefix), None
        if settings.redis_url:
            active, topics = await active_version(settings, settings.redis_url)
            index = deferred.agent_index.AgentIndex.from_url(
                settings.redis_url, active.redis_namespace
            )
        keyring = await open_keyring(settings)
        try:
            timeline = await deferred.history_reader.read_agent_history(
                bootstrap,
                topics,
                agent_id,
                settings.partitions,
                limit=limit,
                timeout=timeout,
                sealer=deferred.sealing.RecordSealer(keyring),
                index=index,
            )
        finally:
            if keyring is not None:
                await keyring.close()
            if index is not None:
                await index.close()
        if as_json:
            typer.echo(timeline.model_dump_json(indent=2))
        elif not timeline.total:
            console.print(f"no records of {agent_id} in the log")
        else:
            console.print(history_table(timeline))

    with friendly_errors():
        try:
            asyncio.run(main())
        except deferred.agent_history.LogUnavailableError as exc:
            fail(str(exc), UNREACHABLE if unreachable(exc) else 2)


def history_table(timeline: AgentHistory) -> Table:
    """The history as a person reads it: one row per entry, oldest first."""
    counts = ", ".join(f"{n} {kind}" for kind, n in timeline.counts.items() if n)
    table = Table(
        title=f"{timeline.agent_id}: {timeline.total} entries" + (f" ({counts})" if counts else ""),
        caption=(
            f"the latest {len(timeline.entries)} of {timeline.total}; --limit shows more"
            if timeline.truncated
            else None
        ),
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("when (UTC)", no_wrap=True)
    table.add_column("simulation", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("memory", no_wrap=True)
    table.add_column("what", ratio=1, min_width=24, overflow="fold")
    for entry in timeline.entries:
        sim = "" if entry.year is None else f"year {entry.year}"
        if entry.step is not None:
            sim = f"{sim} step {entry.step}".strip()
        # A retrieval is named by its event id (`engram recall AGENT --again ID`).
        text = f"{entry.text} (id {entry.event_id})" if entry.kind == "retrieved" else entry.text
        table.add_row(
            entry.at.astimezone(UTC).strftime("%Y-%m-%d\n%H:%M:%S"),
            sim,
            entry.kind,
            (entry.memory_id or "")[:8],
            text,
        )
    return table
