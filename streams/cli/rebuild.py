"""Building a new projection version from the log: ``replay`` (the derived log, into new or
existing stores, then the switch) and ``reprocess`` (the raw events, with the configuration
set now, into a derived log and a version of their own)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from streams.cli import deferred
from streams.cli.configuration import configure, load_settings, open_keyring
from streams.cli.console import console, fail, friendly_errors, if_stopped, run
from streams.cli.progress import sized_as_it_goes
from streams.cli.version_stores import VersionStores, version_stores
from streams.settings import EngramSettings, processing_config

if TYPE_CHECKING:
    from projections.versions import ProjectionVersion, ProjectionVersions
    from projections.working.agent_index import AgentIndex
    from streams.privacy.keyring import Keyring
    from streams.privacy.sealing import RecordSealer
    from streams.rebuild.replay import Replay, ReplayReport
    from streams.rebuild.reprocess import Reprocess, ReprocessReport

commands = typer.Typer()


@commands.command(
    help=(
        "Rebuild the projections from the log into a new version, then switch every running "
        "process to it. Reads memory.items and memory.lifecycle (from the start, or from "
        "--since) and applies them in large batches to a new Redis namespace and Qdrant "
        "collection ({namespace}.{version}, {collection}_{version}) while the system keeps "
        "serving the active one; then pauses the writers for the last records, points "
        "every worker and query service at the new version in one step, and lets them go on. "
        "--into applies into an existing version instead (to catch it up, or to switch back "
        "to it); --drop-old deletes the version that was active once nobody uses it."
    )
)
def replay(
    version: Annotated[
        str | None, typer.Option(help="Name of the new version (default: the next vN).")
    ] = None,
    into: Annotated[
        str | None,
        typer.Option(help="Apply into this existing version ('active' for the active one)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Only records written at or after this ISO 8601 time (with --into)."),
    ] = None,
    switch: Annotated[
        bool, typer.Option("--switch/--no-switch", help="Switch to the version when built.")
    ] = True,
    drop_old: Annotated[
        bool, typer.Option(help="Delete the previously active version after the switch.")
    ] = False,
    batch_size: Annotated[
        int, typer.Option(min=1, max=200_000, help="Events per write to each store.")
    ] = 20_000,
    fence_timeout: Annotated[
        float, typer.Option(min=1.0, help="Longest wait for the writers to pause (seconds).")
    ] = 30.0,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="With --version: if that version exists (an earlier run of this replay "
            "stopped, or a Job retried it), catch it up and switch to it instead of refusing; "
            "if it is active already, do nothing. Safe to run again and again.",
        ),
    ] = False,
) -> None:
    settings = load_settings()
    if since is not None and into is None:
        fail("--since needs --into: a new version built from a later point would miss memories")
    if version is not None and into is not None:
        fail("give either --version (a new version) or --into (an existing one)")
    if resume and version is None:
        fail("--resume needs --version: the name of the version a retried replay continues")
    moment = _parse_since(since)
    stores = version_stores(settings)
    configure(settings)

    async def main() -> None:
        keyring = await open_keyring(settings)
        try:
            target = await _replay_target(stores.versions, into)
            resumed = await _resumable(stores.versions, version) if resume else None
            if resumed == "done":
                console.print(f"version {version} is active already: nothing to resume")
                return
            if resumed is not None:
                console.print(f"resuming version {resumed.label}")
                target = resumed
            job = _replay_job(settings, stores, keyring, batch_size, fence_timeout)
            begun: list[ReplayReport] = []
            left = _replay_left(begun, existing=target is not None)
            with if_stopped(left), sized_as_it_goes("replaying") as (total, advance):
                result = await job.run(
                    name=None if resumed is not None else version,
                    into=target,
                    since=moment,
                    switch=switch,
                    total=total,
                    advance=advance,
                    begun=begun.append,
                )
            if resumed is not None and not result.switched and resumed.name is not None:
                await stores.versions.set_state(resumed.name, "ready")
            _print_replayed(result)
            if drop_old and result.previous is not None:
                await _drop_when_unused(stores, result.previous)
        finally:
            await stores.versions.close()
            if keyring is not None:
                await keyring.close()

    run(main)


def _replay_job(
    settings: EngramSettings,
    stores: VersionStores,
    keyring: Keyring | None,
    batch_size: int,
    fence_timeout: float,
) -> Replay:
    return deferred.replay.Replay(
        stores.bootstrap,
        deferred.topics.Topics(settings.topic_prefix),
        range(settings.partitions),
        group_id=f"{settings.topic_prefix}{settings.app_id}",
        versions=stores.versions,
        open_stores=stores.open_stores,
        batch_size=batch_size,
        fence_timeout=fence_timeout,
        sealer=deferred.sealing.RecordSealer(keyring),
        open_index=_index_opener(settings, stores),
    )


def _index_opener(
    settings: EngramSettings, stores: VersionStores
) -> Callable[[ProjectionVersion], AgentIndex]:
    """The agent index of a version a replay or a reprocess builds."""

    def open_index(version: ProjectionVersion) -> AgentIndex:
        return deferred.agent_index.AgentIndex.from_url(
            stores.redis_url, version.redis_namespace, cap=settings.agent_index_cap
        )

    return open_index


def _parse_since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        fail(f"--since takes an ISO 8601 time such as 2026-11-22T10:00:00+00:00, not {value!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


async def _replay_target(
    versions: ProjectionVersions, into: str | None
) -> ProjectionVersion | None:
    """The existing version ``--into`` names (None: a new one), if a replay may write it."""
    target = None
    if into is not None:
        known = {i.version.name: i.version for i in await versions.versions()}
        target = await versions.active() if into == "active" else known.get(into)
        if target is None:
            fail(f"no projection version {into!r} (`engram versions` lists them)")
    for name in {(await versions.active()).name, target.name if target else None}:
        if await versions.derived_log(name) is not None:
            # A replay reads the live derived log; this version continues its own.
            fail(
                f"projection version {name} was reprocessed and continues a derived "
                "log of its own; engram replay rebuilds only from the live one"
            )
    return target


async def _resumable(
    versions: ProjectionVersions, name: str | None
) -> ProjectionVersion | Literal["done"] | None:
    """The version ``--version NAME --resume`` continues: None when there is none yet (the
    replay creates it), "done" when it is active already, else the version an earlier run
    built part of (never a reprocessed or a retired one)."""
    info = next((i for i in await versions.versions() if i.version.name == name), None)
    if info is None:
        return None
    if info.active:
        return "done"
    if info.derived_log is not None or info.state == "retired":
        what = "was reprocessed" if info.derived_log is not None else "is retired"
        fail(f"projection version {name} {what}: a replay does not resume it")
    return info.version


def _replay_left(begun: list[ReplayReport], *, existing: bool) -> Callable[[], str | None]:
    """What a replay stopped half way leaves, once it has a version (``begun``), and how to
    finish it: the version it wrote is not served, and the one active before still is (the
    fence is lowered on the way out)."""

    def left() -> str | None:
        if not begun:
            return None
        report = begun[0]
        label = report.version.label
        if report.switched:
            return f"version {label} is built and serves"
        if existing:
            return (
                f"version {label} is partly caught up and not switched to; "
                "the same command again finishes it"
            )
        return (
            f"version {label} is partly built and not served (the active version still is): "
            f"`engram replay --version {label} --resume` finishes it, "
            f"`engram versions drop {label}` deletes it"
        )

    return left


def _print_replayed(result: ReplayReport) -> None:
    rate = result.events / max(result.seconds, 1e-9)
    console.print(
        f"replayed {result.events:,} events into version {result.version.label} in "
        f"{result.seconds:.1f}s ({rate:,.0f}/s, {result.passes} passes)"
    )
    if result.switched:
        before = result.previous.label if result.previous else result.version.label
        console.print(
            f"switched {before} -> {result.version.label}; writers paused "
            f"{result.pause_seconds:.2f}s for the last {result.fenced_events:,} events"
        )


async def _drop_when_unused(stores: VersionStores, version: ProjectionVersion) -> None:
    await deferred.projection_versions.wait_until_unused(stores.versions, version, timeout=60.0)
    await stores.drop(version)
    console.print(f"dropped version {version.label}")


@commands.command(
    help=(
        "Re-derive every memory from the raw agent events (agent topics, memory.schedule, "
        "memory.access) with the configuration set now (ENGRAM_* importance profiles, "
        "thresholds, lifecycle rules, embedder, summariser) into a derived log of its own "
        "({prefix}{version}.memory.items, ...) and a new projection version. It does not "
        "switch: `engram versions activate VERSION` does, and then workers started with this "
        "configuration continue the version's derived log from where the reprocess stopped."
    )
)
def reprocess(
    version: Annotated[
        str | None, typer.Option(help="Name of the new version (default: the next vN).")
    ] = None,
    batch_size: Annotated[
        int,
        typer.Option(
            min=1,
            max=200_000,
            help="Raw records per batch past the live derived log's last marker (before it, "
            "the batches the live workers derived).",
        ),
    ] = 5_000,
) -> None:
    settings = load_settings()
    with friendly_errors():
        stores = version_stores(settings)
        reprocess_job = _reprocess_job(settings, stores, batch_size)
    configure(settings)

    async def main() -> None:
        keyring = await open_keyring(settings)
        try:
            job = reprocess_job(deferred.sealing.RecordSealer(keyring))
            console.print(
                f"configuration version {job.config_version} (embedder {job.embedder.id})"
            )
            begun: list[ReprocessReport] = []
            with (
                if_stopped(partial(_reprocess_left, begun)),
                sized_as_it_goes("reprocessing") as (total, advance),
            ):
                result = await job.run(
                    name=version, total=total, advance=advance, begun=begun.append
                )
            _print_reprocessed(result)
        finally:
            await stores.versions.close()
            if keyring is not None:
                await keyring.close()

    run(main)


def _reprocess_job(
    settings: EngramSettings, stores: VersionStores, batch_size: int
) -> Callable[[RecordSealer], Reprocess]:
    """The reprocess the configuration asks for, given how to seal (once the keyring is open);
    a configuration that names an unknown embedder or summariser fails here, before any work."""
    config = processing_config(settings)
    embedder = deferred.embedding.embedder_from_name(
        settings.embedder,
        minilm_precision=settings.minilm_precision,
        minilm_runtime=settings.minilm_runtime,
    )
    api_key = settings.summariser_api_key
    summariser = deferred.chat_summariser.summariser_from_url(
        settings.summariser_url,
        settings.summariser_model,
        api_key.get_secret_value() if api_key else None,
        settings.summariser_timeout,
    )

    def job(sealer: RecordSealer) -> Reprocess:
        return deferred.reprocess.Reprocess(
            stores.bootstrap,
            deferred.topics.Topics(settings.topic_prefix),
            settings.partitions,
            versions=stores.versions,
            open_stores=stores.open_stores,
            config=config,
            embedder=embedder,
            summariser=summariser,
            batch_size=batch_size,
            producer_linger=settings.producer_linger,
            app_id=settings.app_id,
            sealer=sealer,
            replication=deferred.topic_admin.TopicReplication.from_settings(settings),
            open_index=_index_opener(settings, stores),
        )

    return job


def _reprocess_left(begun: list[ReprocessReport]) -> str | None:
    """What a reprocess stopped half way leaves: a version that is not ready (no process
    follows it), and its derived log, part written. It starts again from the beginning."""
    if not begun:
        return None
    label = begun[0].version.label
    return (
        f"version {label} is partly derived and not ready: "
        f"`engram versions drop {label} --with-log` deletes it and its derived log, "
        "then `engram reprocess` starts again"
    )


def _print_reprocessed(result: ReprocessReport) -> None:
    rate = result.records / max(result.seconds, 1e-9)
    label, derived = result.version.label, result.derived_topics
    console.print(
        f"reprocessed {result.records:,} raw records in {result.seconds:.1f}s "
        f"({rate:,.0f}/s): {result.memories:,} memories, "
        f"{result.lifecycle_events:,} lifecycle events, "
        f"{result.dead_letters:,} dead letters, configuration {result.config_version}"
    )
    console.print(
        f"in the live workers' {result.live_batches:,} batches, then "
        f"{result.unmarked:,} raw records they had not derived yet"
    )
    console.print(f"derived log: {derived.items}, {derived.lifecycle}, {derived.deadletter}")
    console.print(
        f"projection version {label} (Redis {result.version.redis_namespace}, "
        f"Qdrant {result.version.qdrant_collection}) is ready, not switched to: the "
        "running workers still use the old configuration. To serve it: "
        f"`engram versions activate {label}` (the running workers then exit), and run "
        f"the workers with configuration {result.config_version}; they continue the "
        f"derived log as consumer group {result.group}"
    )
