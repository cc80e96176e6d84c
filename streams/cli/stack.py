"""The commands that run Engram: the embedded dev stack (``up``, ``demo``) and the cluster roles
(``worker``, ``project``, ``serve``), each until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from streams.cli import deferred
from streams.cli.configuration import (
    cluster_endpoints,
    configure,
    load_settings,
    record_dev_keyring,
    writable_data_dir,
)
from streams.cli.console import UNREACHABLE, console, err, fail, run
from streams.cli.progress import transfer
from streams.cli.signals import (
    stop_on_signal,
    unless_set,
    until_signalled_or_exited,
    until_signalled_or_left,
)
from streams.runtime.devstack.ports import port_taken
from streams.runtime.stall_report import reported_if_slow
from streams.settings import EngramSettings

if TYPE_CHECKING:
    from streams.eventlog.archive_files import TopicSummary
    from streams.runtime.devstack.stack import DevStack
    from streams.runtime.node import Endpoints, Node

commands = typer.Typer()
log = logging.getLogger("engram.cli")

LIVE_EMBEDDER = "live_embedder"
"""The archive's note naming the embedder of the live derived log."""

CRASH_ARCHIVE_TIMEOUT = 120.0
"""Longest `engram up` spends archiving its log when its processors exit it at once (s)."""

BROKERLESS_STOP = 5.0
"""Longest `engram up` waits for its processors to stop once its broker is gone (seconds)."""

EXIT_RESTART = 3
"""A process's exit code when the active projection version needs another configuration."""

STOP_REPORTED_AFTER_S = 30.0
"""A node still stopping this long after it was asked logs its threads and asyncio tasks
(:mod:`streams.runtime.stall_report`): a stop takes seconds, so it waits on something that
will not come, which the kill at the end of a grace period would leave unnamed."""


@commands.command(
    help=(
        "Start the embedded dev stack (broker, redis-server, Qdrant Edge, processors and "
        "query service in one process) and run until Ctrl-C."
    )
)
def up(
    port: Annotated[int, typer.Option(help="HTTP port of the query service.")] = 8000,
    data_dir: Annotated[Path | None, typer.Option(help="Where the stack keeps its files.")] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=16,
            help="Worker processes. Above 1, the workers run as processes of their own and "
            "this one writes episodic memory from the log (Qdrant Edge lives in one process).",
        ),
    ] = 1,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="Start with an empty log instead of restoring the archive of the last run "
            "(DATA_DIR/archive, which is replaced when this run stops).",
        ),
    ] = False,
) -> None:
    settings = load_settings(
        http_port=port,
        data_dir=data_dir,
        episodic_writer="projector" if workers > 1 else None,
    )
    configure(settings)
    run(lambda: _up(settings, workers=workers, fresh=fresh))


async def _up(settings: EngramSettings, *, workers: int, fresh: bool) -> None:
    # Before any child starts: a signal while the stack starts stops it once it is up.
    stop = stop_on_signal()
    # Before anything starts: a stack that could not archive its log at the end would lose it.
    deferred.archive.check_export_target(settings.data_dir / "archive")
    if settings.http_port and port_taken(settings.http_host, settings.http_port):
        fail(
            f"port {settings.http_port} on {settings.http_host} is in use (another `engram "
            "up`?): give this one another --port"
        )
    stack = deferred.devstack.DevStack(settings.data_dir)
    stop.at_once(stack.kill)
    endpoints = stack.start()
    last_words = _archive_and_kill(settings, stack, endpoints, settings.data_dir / "archive")
    unarchived = asyncio.Event()
    # The broker holds the log in memory: stopping at once before it is archived loses what
    # came since this run started.
    stop.caution(
        lambda: (
            "the stack is stopping and its log is not archived yet: stopping now loses what "
            "came since this run started"
            if unarchived.is_set() and stack.broker.running()
            else None
        )
    )
    try:
        with deferred.worker_app.before_a_crash_exit(last_words):
            await _run_stack(
                settings,
                stack,
                endpoints,
                workers=workers,
                fresh=fresh,
                stop=stop,
                unarchived=unarchived,
            )
    finally:
        stack.stop()


async def _run_stack(
    settings: EngramSettings,
    stack: DevStack,
    endpoints: Endpoints,
    *,
    workers: int,
    fresh: bool,
    stop: asyncio.Event,
    unarchived: asyncio.Event | None = None,
) -> None:
    """The stack's processes, from the restored log until a signal, then the log archived;
    ``unarchived`` is set while the broker holds what the archive does not (from the end of
    the restore until the log is archived again)."""
    archive = settings.data_dir / "archive"
    for repaired in deferred.archive.recover_interrupted_export(archive):
        err.print(repaired)
    restoring = not fresh and (archive / "manifest.json").exists()
    if restoring:
        _check_archive_prefix(settings, archive)
    keyring = await record_dev_keyring(settings, endpoints.redis_url)
    if restoring:
        # The broker keeps its log in memory: the last run's log comes back from its
        # archive, and the processors rebuild the projections from it.
        await transfer(
            "restoring the log",
            deferred.archive.import_log(
                endpoints.kafka_bootstrap,
                archive,
                replication=deferred.topic_admin.TopicReplication.from_settings(settings),
            ),
        )
        await _live_embedder(settings, endpoints, deferred.archive.archive_notes(archive))
    local = settings.model_copy(update={"qdrant_path": stack.edge_path})
    # Above one worker, this process holds the Qdrant Edge shard (projector and query
    # service) and the workers run as processes of their own: Edge holds the GIL while
    # it writes, which would stall a worker sharing its process.
    try:
        node = await deferred.node.Node(
            local, endpoints, run_processors=workers == 1, run_projector=workers > 1
        ).start()
    except deferred.projection_switch.WrongConfigurationError as exc:
        fail(f"{exc}; or `engram up --fresh` to start with an empty log")
    stack.start_workers(workers if workers > 1 else 0, endpoints)
    if unarchived is not None:
        unarchived.set()
    _announce(node, stack, endpoints, keyring=keyring, workers=workers)
    children = stack.processes()
    lost: str | None = None
    try:
        code = await until_signalled_or_exited(list(children.values()), node, stop)
        if code is not None:
            gone = next(name for name, child in children.items() if child.poll() is not None)
            lost = f"{gone} exited with code {code}"
            err.print(f"[red]{escape(str(lost))}[/red]: stopping the stack", markup=True)
    finally:
        await _stop_and_archive(settings, stack, endpoints, node)
        if unarchived is not None:
            unarchived.clear()
    if lost is not None:
        fail(f"{lost}; the stack stopped")
    if node.left_reason is not None:
        # The stack's Redis, which holds the registry of versions, starts empty, and the
        # archive holds the live derived log only.
        fail(
            f"{node.left_reason}. The embedded stack keeps no projection version across a "
            "restart: `engram up` starts again on the live derived log of its archive",
            code=EXIT_RESTART,
        )


async def _stop_and_archive(
    settings: EngramSettings, stack: DevStack, endpoints: Endpoints, node: Node
) -> None:
    """The processors stopped, then the broker's log archived (while the broker is there)."""
    archive = settings.data_dir / "archive"
    if stack.broker.running():
        await node.stop()
    else:
        # Nothing is left to commit or flush to, and Faust's consumer would retry the
        # broker for a minute: the stores are closed, the rest goes with the process.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(BROKERLESS_STOP):
                await node.stop()
    stack.stop_workers()
    if stack.broker.running():
        await transfer(
            f"archiving the log to {archive}", _archive_log(settings, endpoints, archive)
        )
    else:
        err.print(
            "the broker is gone, and with it the log it held in memory since this run "
            f"started: {archive} is left as it was"
        )


def _check_archive_prefix(settings: EngramSettings, archive: Path) -> None:
    """An archive of another topic prefix would be restored into topics this run never reads,
    and at its stop its own log, of its prefix only, would replace the archive: the earlier
    log lost."""
    prefix = deferred.archive.topic_prefix_of(deferred.archive.read_manifest(archive))
    if prefix is not None and prefix != settings.topic_prefix:
        fail(
            f"{archive} holds the log of topic prefix {prefix!r}, and this run has "
            f"ENGRAM_TOPIC_PREFIX={settings.topic_prefix!r}: its stop would archive its own log "
            f"over it. Start with ENGRAM_TOPIC_PREFIX={prefix!r}, or another --data-dir"
        )


async def _archive_log(
    settings: EngramSettings, endpoints: Endpoints, archive: Path
) -> list[TopicSummary]:
    """The log to the archive, with what a restart needs of the stack's Redis, which starts
    empty: the embedder of the live derived log, so that a restart with another embedder is
    refused rather than writing a second vector space beside the restored one."""
    notes = {}
    with contextlib.suppress(Exception):  # Redis gone: the log is archived all the same
        embedder = await _live_embedder(settings, endpoints, {})
        if embedder is not None:
            notes[LIVE_EMBEDDER] = embedder
    return await deferred.archive.export_log(
        endpoints.kafka_bootstrap,
        deferred.topics.Topics(settings.topic_prefix).all(),
        archive,
        notes=notes,
    )


async def _live_embedder(
    settings: EngramSettings, endpoints: Endpoints, notes: dict[str, str]
) -> str | None:
    """The live derived log's embedder in the stack's Redis, recorded there first from the
    archive's ``notes`` where they name one."""
    versions = deferred.projection_versions.ProjectionVersions.from_url(
        endpoints.redis_url, settings.redis_namespace, settings.qdrant_collection
    )
    try:
        return await versions.live_embedder(claim=notes.get(LIVE_EMBEDDER))
    finally:
        await versions.close()


def _archive_and_kill(
    settings: EngramSettings, stack: DevStack, endpoints: Endpoints, archive: Path
) -> Callable[[], None]:
    """What the stack does when its processors, which run in this process, exit it at once on
    a batch they cannot process (crash-only, exit code 70): archive the log, as at any stop,
    then stop the broker and Redis, which run in sessions of their own and would outlive it.
    The exit holds the event loop, so the archive is written from a thread of its own."""

    def last_words() -> None:
        err.print(
            f"[red]the processors stopped[/red]: archiving the log to {escape(str(archive))}",
            markup=True,
        )
        job = _archive_log(settings, endpoints, archive)
        writer = threading.Thread(target=asyncio.run, args=(job,), daemon=True)
        writer.start()
        writer.join(CRASH_ARCHIVE_TIMEOUT)
        if writer.is_alive():
            err.print(f"the archive took longer than {CRASH_ARCHIVE_TIMEOUT:g}s: left as it was")
        # What the processors' threads would log of the broker going away says nothing more.
        logging.disable(logging.CRITICAL)
        stack.kill()
        err.print("the stack stopped (exit code 70): the line above the archive says why")

    return last_words


def _announce(
    node: Node, stack: DevStack, endpoints: Endpoints, *, keyring: str, workers: int
) -> None:
    """Where everything is, and how to publish to it."""
    console.print("[green]Engram is up[/green]", markup=True)
    console.print(f"  query service   {node.http_url}  (docs: {node.http_url}/docs)")
    console.print(f"  kafka bootstrap {endpoints.kafka_bootstrap}")
    console.print(f"  redis           {endpoints.redis_url}")
    console.print(f"  qdrant edge     {stack.edge_path}")
    console.print(f"  keyring         {keyring}")
    console.print(f"  workers         {workers} process(es)")
    console.print("In another shell, the other commands reach this stack with:")
    # One line however narrow the terminal: it is meant to be copied.
    console.print(f"  export {stack_variables(node, stack, endpoints)}", soft_wrap=True)
    console.print("  engram publish H001 'Year 1: ...'; engram retrieve H001")
    console.print("Ctrl-C stops.")


def stack_variables(node: Node, stack: DevStack, endpoints: Endpoints) -> str:
    """The variables that point every other command at this stack: without ``ENGRAM_URL`` a
    stack started with ``--port`` was out of reach of ``engram retrieve`` (it asked port 8000),
    and without ``ENGRAM_QDRANT_PATH`` the version commands looked for another Edge shard."""
    return " ".join(
        f"{name}={shlex.quote(str(value))}"
        for name, value in (
            ("ENGRAM_KAFKA_BOOTSTRAP", endpoints.kafka_bootstrap),
            ("ENGRAM_REDIS_URL", endpoints.redis_url),
            ("ENGRAM_URL", node.http_url),
            ("ENGRAM_QDRANT_PATH", stack.edge_path),
        )
    )


@commands.command(
    help=(
        "Run the flood households of seed 004 through the embedded stack and show what "
        "each household recalls before each decision, then the Year-11 trace of seed 003."
    )
)
def demo(
    households: Annotated[int, typer.Option(min=1, max=50)] = 4,
    years: Annotated[int, typer.Option(min=1, max=30)] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the simulated town.")] = 4,
) -> None:
    settings = load_settings(http_port=0, log_level="warning")
    # A directory of its own, so that the demo runs beside an `engram up` on the same data
    # directory (one stack per directory) and never touches its archive or keyring.
    settings = settings.model_copy(update={"data_dir": settings.data_dir / "demo"})
    configure(settings)
    run(lambda: _demo(settings, households=households, years=years, seed=seed))


async def _demo(settings: EngramSettings, *, households: int, years: int, seed: int) -> None:
    # Before any child starts: a signal while the stack starts stops the demo once the node
    # is up (see stop_on_signal), one during the demo cancels it.
    stop = stop_on_signal()
    with console.status("starting the embedded stack (broker, redis-server, Qdrant Edge)"):
        stack = deferred.devstack.DevStack(settings.data_dir)
        stop.at_once(stack.kill)
        endpoints = stack.start()
    try:
        # The processors' crash exit would leave the broker and redis-server running.
        with deferred.worker_app.before_a_crash_exit(stack.kill):
            ended = await _demo_with_node(stack, endpoints, settings, stop, households, years, seed)
    finally:
        stack.stop()
    if not ended:
        by = stop.signal or signal.SIGTERM
        name = "Ctrl-C" if by == signal.SIGINT else by.name
        fail(f"stopped by {name} before the demo ended", code=128 + by)


async def _demo_with_node(
    stack: DevStack,
    endpoints: Endpoints,
    settings: EngramSettings,
    stop: asyncio.Event,
    households: int,
    years: int,
    seed: int,
) -> bool:
    """The demo on a node of the started stack; whether it ended before a signal."""
    await record_dev_keyring(settings, endpoints.redis_url)
    local = settings.model_copy(update={"qdrant_path": stack.edge_path})
    with console.status("starting processors and the query service"):
        node = await deferred.node.Node(local, endpoints).start()
    try:
        demo = _demo_on(node, settings, endpoints, households=households, years=years, seed=seed)
        return await unless_set(stop, demo)
    finally:
        await node.stop()


async def _demo_on(
    node: Node,
    settings: EngramSettings,
    endpoints: Endpoints,
    *,
    households: int,
    years: int,
    seed: int,
) -> None:
    assert node.pipeline is not None
    assert node.http_url is not None
    async with (
        deferred.publisher.AsyncPublisher(
            endpoints.kafka_bootstrap,
            topics=deferred.topics.Topics(settings.topic_prefix),
            linger=0.005,
            keyring=node.keyring,
        ) as publisher,
        deferred.query_client.AsyncEngramClient(node.http_url) as client,
    ):
        outcome = await deferred.demo.run_demo(
            publisher,
            client,
            node.pipeline.stats,
            households=households,
            years=years,
            seed=seed,
            console=console,
        )
    console.print(
        f"{outcome.events_published} events published, "
        f"{node.pipeline.stats.memories} memories recorded."
    )


def run_node(settings: EngramSettings, **roles: bool) -> None:
    """One cluster role (or several) against the configured backends, until SIGINT/SIGTERM,
    or until the active projection version needs another configuration (exit code 3)."""
    configure(settings)
    kafka = roles.get("run_processors", True) or roles.get("run_projector", False)
    endpoints = cluster_endpoints(settings, kafka=kafka)
    if kafka or not (settings.qdrant_url or settings.qdrant_path):
        writable_data_dir(settings)

    async def main() -> None:
        stop = stop_on_signal()  # before the node starts: see stop_on_signal
        node = await deferred.node.Node(settings, endpoints, **roles).start()
        metrics = None
        if node.http_url is not None:
            console.print(f"query service on {node.http_url}")
        elif settings.metrics and settings.health_port is None:
            # With ENGRAM_HEALTH_PORT, /metrics is served beside the probes there.
            server = deferred.metrics_server.MetricsServer(
                node.metrics, host=settings.http_host, port=settings.metrics_port
            )
            try:
                metrics = await server.start()
            except OSError as error:
                # Metrics are for watching the work, not a reason to stop it (two workers on
                # one host, say, would share the default port).
                log.warning("no /metrics: %s; set ENGRAM_METRICS_PORT (0: any free port)", error)
            except BaseException:
                await node.stop()
                raise
        try:
            reason = await until_signalled_or_left(node, stop)
            log.info(
                "%s: stopping; work in flight is finished, flushed and committed first",
                "signalled" if reason is None else "the active projection version moved",
            )
        finally:
            with reported_if_slow(STOP_REPORTED_AFTER_S, _still_stopping):
                if metrics is not None:
                    await metrics.stop()
                _exit_unless_gone_within(settings.stop_limit)
                await node.stop()
        if reason is not None:
            log.warning("stopped: %s", reason)
            raise typer.Exit(EXIT_RESTART)
        log.info("stopped")

    run(main)


def _exit_unless_gone_within(seconds: float) -> None:
    """Exit 75 if the process is still here ``seconds`` from now, from a thread of its own:
    with its broker gone, Faust's stop waited in its consumer thread's last commit (blocking
    the event loop), or that thread (no daemon) kept the process from exiting after the node
    had stopped, and the worker never exited by itself. Crash-only, as a batch that cannot
    finish: nothing more is committed, and what the worker held is redelivered."""

    def give_up() -> None:
        log.error(
            "not stopped within ENGRAM_STOP_TIMEOUT=%g s (a broker out of reach?): exiting "
            "without committing; what this worker held is redelivered",
            seconds,
        )
        logging.shutdown()
        os._exit(UNREACHABLE)

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True  # a process that ends first ends it
    timer.start()


def _still_stopping(report: str) -> None:
    log.warning("stopping is taking over %.0f s; waiting in:\n%s", STOP_REPORTED_AFTER_S, report)


@commands.command(
    help=("Run the stream processors against the configured cluster (scale out by replicas).")
)
def worker() -> None:
    run_node(load_settings(), run_service=False)


@commands.command(
    help=(
        "Apply memory.items and memory.lifecycle to episodic memory, for workers running with "
        "ENGRAM_EPISODIC_WRITER=projector (run exactly one)."
    )
)
def project() -> None:
    run_node(load_settings(), run_processors=False, run_service=False, run_projector=True)


@commands.command(
    help=(
        "Run the query service against the configured Redis and Qdrant. With "
        "ENGRAM_API_KEYS_FILE every request but the probes needs an API key; without it the "
        "service is unauthenticated and should listen on 127.0.0.1 (the default)."
    )
)
def serve(
    port: Annotated[int | None, typer.Option(help="HTTP port (env ENGRAM_HTTP_PORT).")] = None,
    host: Annotated[
        str | None, typer.Option(help="Address to listen on (env ENGRAM_HTTP_HOST; 127.0.0.1).")
    ] = None,
) -> None:
    run_node(load_settings(http_port=port, http_host=host), run_processors=False)
