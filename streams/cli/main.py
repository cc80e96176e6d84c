"""The ``engram`` command line: the dev stack, the cluster roles, publishing and retrieval."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console

from streams.runtime.settings import EngramSettings

if TYPE_CHECKING:
    from rich.progress import Progress
    from rich.table import Table

    from projections.history import AgentHistory
    from streams.eventlog.archive import TopicSummary

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
schemas_app = typer.Typer(help="Event contracts.", no_args_is_help=True)
app.add_typer(schemas_app, name="schemas")

console = Console()
err = Console(stderr=True)
log = logging.getLogger("engram.cli")


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def validation_lines(exc: ValidationError) -> str:
    """One line per problem, naming the field: what a person needs, without pydantic's URLs."""
    return "\n".join(
        f"  {'.'.join(str(p) for p in err['loc']) or '(input)'}: {err['msg']}"
        for err in exc.errors(include_url=False)
    )


def load_settings(**overrides: Any) -> EngramSettings:
    try:
        return EngramSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        fail(f"invalid configuration:\n{validation_lines(exc)}")


@contextlib.contextmanager
def friendly_errors() -> Iterator[None]:
    """Known failures become one readable line and exit code 2, never a traceback."""
    from projections.interfaces import ProjectionError
    from projections.service.client import QueryError
    from streams.eventlog.archive import ArchiveError
    from streams.eventlog.publisher import PublishError
    from streams.privacy.keyring import KeyringError
    from streams.rebuild.projection_switch import WrongConfigurationError
    from streams.rebuild.replay import SwitchError
    from streams.runtime.devstack.broker import BrokerStartError
    from streams.runtime.devstack.redis_server import RedisServerError

    known = (
        WrongConfigurationError,
        SwitchError,
        PublishError,
        QueryError,
        ProjectionError,
        BrokerStartError,
        RedisServerError,
        ArchiveError,
        KeyringError,
    )
    try:
        yield
    except typer.Exit:
        raise
    except known as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(f"invalid input:\n{validation_lines(exc)}")
    except (TimeoutError, OSError, ValueError, RuntimeError) as exc:
        fail(f"{type(exc).__name__}: {exc}")


async def until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def until_signalled_or_exited(children: list[Any], node: Any = None) -> int | None:
    """Until SIGINT/SIGTERM (None), until a child process exits (its exit code), or until
    ``node`` will not follow the active projection version (None; ``node.left_reason``)."""
    signalled = asyncio.create_task(until_signalled())
    try:
        while not signalled.done():
            await asyncio.wait({signalled}, timeout=1.0)
            if node is not None and node.left.is_set():
                return None
            for child in children:
                code = child.poll()
                if code is not None:
                    return int(code)
        return None
    finally:
        signalled.cancel()


def run(main: Callable[[], Awaitable[None]]) -> None:
    with friendly_errors():
        asyncio.run(main())  # type: ignore[arg-type]


def configure(settings: EngramSettings) -> None:
    from streams.runtime.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)


@app.command(
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

    async def main() -> None:
        from schemas.topics import Topics
        from streams.eventlog.archive import export_log, import_log
        from streams.runtime.devstack.stack import DevStack
        from streams.runtime.node import Node

        stack = DevStack(settings.data_dir)
        endpoints = stack.start()
        archive = settings.data_dir / "archive"
        topics = Topics(settings.topic_prefix)
        try:
            keyring = await record_dev_keyring(settings, endpoints.redis_url)
            if not fresh and (archive / "manifest.json").exists():
                # The broker keeps its log in memory: the last run's log comes back from its
                # archive, and the processors rebuild the projections from it.
                await transfer("restoring the log", import_log(endpoints.kafka_bootstrap, archive))
            local = settings.model_copy(update={"qdrant_path": stack.edge_path})
            # Above one worker, this process holds the Qdrant Edge shard (projector and query
            # service) and the workers run as processes of their own: Edge holds the GIL while
            # it writes, which would stall a worker sharing its process.
            node = await Node(
                local, endpoints, run_processors=workers == 1, run_projector=workers > 1
            ).start()
            stack.start_workers(workers if workers > 1 else 0, endpoints)
            console.print("[green]Engram is up[/green]")
            console.print(f"  query service   {node.http_url}  (docs: {node.http_url}/docs)")
            console.print(f"  kafka bootstrap {endpoints.kafka_bootstrap}")
            console.print(f"  redis           {endpoints.redis_url}")
            console.print(f"  qdrant edge     {stack.edge_path}")
            console.print(f"  keyring         {keyring}")
            console.print(f"  workers         {workers} process(es)")
            console.print(
                "Publish with: ENGRAM_KAFKA_BOOTSTRAP="
                f"{endpoints.kafka_bootstrap} ENGRAM_REDIS_URL={endpoints.redis_url} "
                "engram publish H001 'Year 1: ...'"
            )
            console.print("Ctrl-C stops.")
            try:
                lost = await until_signalled_or_exited(stack.workers, node)
            finally:
                await node.stop()
                stack.stop_workers()
                await transfer(
                    f"archiving the log to {archive}",
                    export_log(endpoints.kafka_bootstrap, topics.all(), archive),
                )
            if lost is not None:
                fail(f"a worker process exited with code {lost}; stopping the stack")
            if node.left_reason is not None:
                fail(node.left_reason, code=EXIT_RESTART)
        finally:
            stack.stop()

    run(main)


@app.command(
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
    configure(settings)

    async def main() -> None:
        from projections.service.client import AsyncEngramClient
        from schemas.topics import Topics
        from streams.demo import run_demo
        from streams.eventlog.publisher import AsyncPublisher
        from streams.runtime.devstack.stack import DevStack
        from streams.runtime.node import Node

        with console.status("starting the embedded stack (broker, redis-server, Qdrant Edge)"):
            stack = DevStack(settings.data_dir)
            endpoints = stack.start()
        try:
            await record_dev_keyring(settings, endpoints.redis_url)
            local = settings.model_copy(update={"qdrant_path": stack.edge_path})
            with console.status("starting processors and the query service"):
                node = await Node(local, endpoints).start()
            try:
                assert node.pipeline is not None
                assert node.http_url is not None
                async with (
                    AsyncPublisher(
                        endpoints.kafka_bootstrap,
                        topics=Topics(settings.topic_prefix),
                        linger=0.005,
                        keyring=node.keyring,
                    ) as publisher,
                    AsyncEngramClient(node.http_url) as client,
                ):
                    outcome = await run_demo(
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
            finally:
                await node.stop()
        finally:
            stack.stop()

    run(main)


async def open_keyring(settings: EngramSettings, redis_url: str | None = None) -> Any:
    """The deployment's keyring (``ENGRAM_KEYRING``; see
    :func:`streams.privacy.keyring.open_keyring`)."""
    from streams.privacy.keyring import open_keyring as opened

    return await opened(
        settings.keyring,
        redis_url=redis_url or settings.redis_url,
        namespace=settings.redis_namespace,
        default_dir=settings.keyring_dir(),
    )


async def record_dev_keyring(settings: EngramSettings, redis_url: str) -> str:
    """The dev stack's keyring is a directory that outlives its Redis (the log is restored on
    the next ``engram up``, its keys must be there too); its Redis records where it is, so
    every process pointed at that Redis opens the same one."""
    from streams.privacy.keyring import record_location

    location = settings.keyring or f"file:{settings.keyring_dir().resolve()}"
    await record_location(redis_url, settings.redis_namespace, location)
    return location


def _cluster_endpoints(settings: EngramSettings, *, kafka: bool = True) -> Any:
    from streams.runtime.node import Endpoints

    if (kafka and not settings.kafka_bootstrap) or not settings.redis_url:
        needed = "ENGRAM_KAFKA_BOOTSTRAP and ENGRAM_REDIS_URL" if kafka else "ENGRAM_REDIS_URL"
        fail(
            f"cluster mode needs {needed} (and ENGRAM_QDRANT_URL or ENGRAM_QDRANT_PATH); "
            "for a local try, use `engram up`"
        )
    return Endpoints(kafka_bootstrap=settings.kafka_bootstrap or "", redis_url=settings.redis_url)


EXIT_RESTART = 3
"""A process's exit code when the active projection version needs another configuration."""


async def until_signalled_or_left(node: Any) -> str | None:
    """Until SIGINT/SIGTERM (None), or until ``node`` will not follow the active projection
    version (why, naming the configuration to restart with)."""
    signalled = asyncio.create_task(until_signalled())
    left = asyncio.create_task(node.left.wait())
    try:
        await asyncio.wait({signalled, left}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
        left.cancel()
    return node.left_reason if left.done() and not left.cancelled() else None


def run_node(settings: EngramSettings, **roles: bool) -> None:
    """One cluster role (or several) against the configured backends, until SIGINT/SIGTERM,
    or until the active projection version needs another configuration (exit code 3)."""
    configure(settings)
    kafka = roles.get("run_processors", True) or roles.get("run_projector", False)
    endpoints = _cluster_endpoints(settings, kafka=kafka)

    async def main() -> None:
        from streams.runtime.node import Node

        node = await Node(settings, endpoints, **roles).start()
        if node.http_url is not None:
            console.print(f"query service on {node.http_url}")
        try:
            reason = await until_signalled_or_left(node)
            log.info(
                "%s: stopping; work in flight is finished, flushed and committed first",
                "signalled" if reason is None else "the active projection version moved",
            )
        finally:
            await node.stop()
        if reason is not None:
            log.warning("stopped: %s", reason)
            raise typer.Exit(EXIT_RESTART)
        log.info("stopped")

    run(main)


@app.command(
    help=("Run the stream processors against the configured cluster (scale out by replicas).")
)
def worker() -> None:
    run_node(load_settings(), run_service=False)


@app.command(
    help=(
        "Apply memory.items and memory.lifecycle to episodic memory, for workers running with "
        "ENGRAM_EPISODIC_WRITER=projector (run exactly one)."
    )
)
def project() -> None:
    run_node(load_settings(), run_processors=False, run_service=False, run_projector=True)


@app.command(help=("Run the query service against the configured Redis and Qdrant."))
def serve(port: Annotated[int | None, typer.Option(help="HTTP port.")] = None) -> None:
    run_node(load_settings(http_port=port), run_processors=False)


@app.command(help=("Publish one agent event and print where it landed (topic, partition, offset)."))
def publish(
    agent_id: Annotated[str, typer.Argument(help="The agent the event belongs to.")],
    content: Annotated[str, typer.Argument(help="What happened, in words.")],
    event_type: Annotated[str, typer.Option("--type", help="observation|decision|feedback")] = (
        "observation"
    ),
    skill: Annotated[str | None, typer.Option(help="Decisions: the skill taken.")] = None,
    target: Annotated[str | None, typer.Option(help="Feedback: the event id it is about.")] = None,
    signal_value: Annotated[float | None, typer.Option("--signal", help="Feedback: -1..1")] = None,
    importance: Annotated[float | None, typer.Option(help="Explicit importance 0..1.")] = None,
    kind: Annotated[str | None, typer.Option(help="Event-type table key, e.g. flood.major")] = None,
    source: Annotated[str | None, typer.Option(help="personal|neighbor|community|abstract")] = None,
    tags: Annotated[str | None, typer.Option(help="Comma-separated tags.")] = None,
    agent_type: Annotated[str, typer.Option(help="Profile in agent_types.yaml.")] = "default",
    year: Annotated[int | None, typer.Option()] = None,
    step: Annotated[int | None, typer.Option()] = None,
) -> None:
    settings = load_settings()
    bootstrap = bootstrap_of(settings)
    fields: dict[str, Any] = {
        "agent_id": agent_id,
        "content": content,
        "importance": importance,
        "kind": kind,
        "source": source,
        "agent_type": agent_type,
        "year": year,
        "step": step,
        "tags": tuple(t.strip() for t in tags.split(",") if t.strip()) if tags else (),
    }
    fields = {k: v for k, v in fields.items() if v is not None}

    async def main() -> None:
        from schemas.agent_events import AgentEvent, Decision, Feedback, Observation
        from schemas.topics import Topics
        from streams.eventlog.publisher import AsyncPublisher

        event: AgentEvent
        if event_type == "observation":
            event = Observation(**fields)
        elif event_type == "decision":
            if not skill:
                fail("a decision needs --skill")
            event = Decision(skill=skill, **fields)
        elif event_type == "feedback":
            if target is None or signal_value is None:
                fail("feedback needs --target and --signal")
            event = Feedback(target_event_id=target, signal=signal_value, **fields)
        else:
            fail(f"--type must be observation, decision or feedback, not {event_type!r}")
        topics = Topics(settings.topic_prefix)
        keyring = await open_keyring(settings)
        try:
            async with AsyncPublisher(bootstrap, topics=topics, keyring=keyring) as publisher:
                position = await publisher.publish(event)
        finally:
            if keyring is not None:
                await keyring.close()
        console.print_json(
            data={
                "event_id": event.event_id,
                "topic": position.topic,
                "partition": position.partition,
                "offset": position.offset,
            }
        )

    run(main)


@app.command(help=("Retrieve an agent's memories from the query service, with score breakdowns."))
def retrieve(
    agent_id: Annotated[str, typer.Argument(help="Whose memories.")],
    query: Annotated[str | None, typer.Option(help="Query text.")] = None,
    top_k: Annotated[int, typer.Option(min=1, max=100)] = 5,
    mode: Annotated[
        str,
        typer.Option(
            help="two_phase | weighted | saliency | basic | constrained | generative | "
            "relevance (needs --query). See README, 'Retrieval for agents'."
        ),
    ] = "two_phase",
    year: Annotated[int | None, typer.Option(help="Current simulation year.")] = None,
    step: Annotated[int | None, typer.Option(help="Current simulation step.")] = None,
    tags: Annotated[
        str | None, typer.Option(help="Context tags of the weighted mode, comma-separated.")
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="constrained: MILLER_STANDARD (default) | COWAN_CONSERVATIVE | "
            "EXTENDED_CONTEXT | MINIMAL."
        ),
    ] = None,
    arousal: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="constrained: arousal; unset: the agent's own."),
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            help="Filter: only memories of this kind (working, episodic, summary_l1, "
            "summary_l2, fact, procedure). Repeatable."
        ),
    ] = None,
    tagged: Annotated[
        str | None,
        typer.Option(help="Filter: only memories with any of these tags, comma-separated."),
    ] = None,
    min_importance: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="Filter: importance at least this.")
    ] = None,
    year_from: Annotated[int | None, typer.Option(help="Filter: from this year on.")] = None,
    year_to: Annotated[int | None, typer.Option(help="Filter: up to this year.")] = None,
    step_from: Annotated[int | None, typer.Option(min=0, help="Filter: from this step on.")] = None,
    step_to: Annotated[int | None, typer.Option(min=0, help="Filter: up to this step.")] = None,
    weight: Annotated[
        list[str] | None,
        typer.Option(
            help="weighted: recency, importance, context, relevance or interference=W (seed "
            "003's 0.3/0.5/0.2/0/0 for the rest); generative: recency, importance, relevance "
            "or recency_decay=W. Repeatable."
        ),
    ] = None,
    prompt: Annotated[
        bool,
        typer.Option(
            "--prompt", help="Print the memories as an LLM prompt block, not the JSON answer."
        ),
    ] = False,
    after: Annotated[
        list[str] | None,
        typer.Option(
            help="Read your writes: wait until this position (topic:partition:offset, from what "
            "`engram publish` prints) is applied. Repeatable."
        ),
    ] = None,
    wait_timeout_ms: Annotated[
        int | None, typer.Option(min=0, max=30_000, help="Longest wait for --after (ms).")
    ] = None,
    url: Annotated[str, typer.Option(envvar="ENGRAM_URL", help="Query service URL.")] = (
        "http://127.0.0.1:8000"
    ),
) -> None:
    from projections.service.client import EngramClient

    positions: list[dict[str, Any]] = []
    for text in after or []:
        topic, _, rest = text.rpartition(":")
        topic, _, partition = topic.rpartition(":")
        if not (topic and partition.isdigit() and rest.isdigit()):
            fail(f"--after: {text!r} is not topic:partition:offset")
        positions.append({"topic": topic, "partition": int(partition), "offset": int(rest)})
    params: dict[str, Any] = {
        "top_k": top_k,
        "mode": mode,
        "query": query,
        "current_year": year,
        "current_step": step,
        "tags": [t.strip() for t in tags.split(",")] if tags else [],
        "wait_timeout_ms": wait_timeout_ms,
        "profile": profile,
        "arousal": arousal,
    }
    if weight:
        if mode not in ("weighted", "generative"):
            fail("--weight applies to --mode weighted or generative")
        weights: dict[str, float] = {}
        for text in weight:
            name, _, value = text.partition("=")
            try:
                weights[name.strip()] = float(value)
            except ValueError:
                fail(f"--weight: {text!r} is not name=number")
        params["weights" if mode == "weighted" else "generative"] = weights
    memory_filter: dict[str, Any] = {
        "kinds": kind or [],
        "tags": [t.strip() for t in tagged.split(",")] if tagged else [],
        "min_importance": min_importance,
        "year_from": year_from,
        "year_to": year_to,
        "step_from": step_from,
        "step_to": step_to,
    }
    if any(value not in (None, []) for value in memory_filter.values()):
        params["filter"] = {k: v for k, v in memory_filter.items() if v not in (None, [])}
    from pydantic import ValidationError

    from projections.service.client import format_for_prompt

    with friendly_errors():
        try:
            with EngramClient(url) as client:
                response = client.retrieve(
                    agent_id,
                    after=positions,
                    **{k: v for k, v in params.items() if v is not None},
                )
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "request"
            fail(f"invalid retrieval: {where}: {first['msg'].removeprefix('Value error, ')}")
        except Exception as exc:  # httpx transport errors
            import httpx

            if isinstance(exc, httpx.HTTPError):
                fail(f"cannot reach the query service at {url}: {exc}")
            raise
    if prompt:
        print(format_for_prompt(response, with_time=True, with_store=True))
    else:
        console.print_json(response.model_dump_json())


@app.command(
    "mcp",
    help=(
        "Serve the memory tools to LLM agents over MCP: retrieve_memory, "
        "recall_similar_experience and publish_observation. Reads go to the query service "
        "(ENGRAM_QUERY_URL, else ENGRAM_URL; default http://127.0.0.1:8000), observations to "
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
    from streams.integrations.tool_server import ToolServerSettings, run_tool_server

    if transport not in ("stdio", "http"):
        fail(f"--transport must be stdio or http, not {transport!r}")
    overrides: dict[str, Any] = {"mcp_host": host, "mcp_port": port, "query_url": query_url}
    try:
        settings = ToolServerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        fail(f"invalid configuration:\n{validation_lines(exc)}")
    configure(settings)

    def announce(url: str) -> None:
        print(f"MCP server on {url}", flush=True)  # stdout: a launcher reads it

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_tool_server(
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


async def transfer(what: str, job: Awaitable[list[TopicSummary]]) -> list[TopicSummary]:
    """Run an export or import, then say how many records of how many topics it moved."""
    started = time.perf_counter()
    with console.status(f"{what}..."):
        summaries = await job
    records = sum(s.total for s in summaries)
    took = time.perf_counter() - started
    console.print(
        f"{what}: {records:,} records of {sum(1 for s in summaries if s.total)} topics "
        f"in {took:.1f}s"
    )
    return summaries


def record_progress(description: str, total: int | None) -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn() if total else TextColumn("{task.completed:,} records"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=False,
    )


@contextlib.contextmanager
def counted(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar of records (records/s, ETA) and the callback that advances it."""
    with record_progress(description, total) as progress:
        task = progress.add_task(description, total=total, rate="")

        def advance(n: int) -> None:
            progress.update(task, advance=n, rate=_rate(progress, task))

        yield advance


def bootstrap_of(settings: EngramSettings) -> str:
    """The configured broker, or the one-line error of commands that read or write the log."""
    if not settings.kafka_bootstrap:
        fail("set ENGRAM_KAFKA_BOOTSTRAP (engram up prints it)")
    return settings.kafka_bootstrap


def _rate(progress: Progress, task: Any) -> str:
    speed = progress.tasks[task].speed
    return f"{speed:,.0f} records/s" if speed else ""


def _projection_parts(settings: EngramSettings) -> tuple[str, str, Any, Any, Any]:
    """The broker, Redis, registry of versions, and openers of a version's stores and of its
    dropping, from configuration; a one-line error if the cluster is not configured."""
    if not settings.kafka_bootstrap or not settings.redis_url:
        fail("set ENGRAM_KAFKA_BOOTSTRAP and ENGRAM_REDIS_URL (engram up prints both)")
    from processors.embedding import embedder_from_name
    from projections.episodic.factory import drop_episodic_store, open_episodic_store
    from projections.versions import ProjectionVersion, ProjectionVersions
    from projections.working.redis_store import RedisWorkingMemory

    bootstrap, redis_url = settings.kafka_bootstrap, settings.redis_url
    dim = embedder_from_name(settings.embedder).dim
    api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    edge_dir = None if settings.qdrant_url else settings.edge_path()
    versions = ProjectionVersions.from_url(
        redis_url, settings.redis_namespace, settings.qdrant_collection
    )

    async def open_stores(version: ProjectionVersion) -> tuple[Any, Any]:
        working = RedisWorkingMemory.from_url(redis_url, version.redis_namespace)
        episodic = await open_episodic_store(
            qdrant_url=settings.qdrant_url,
            qdrant_path=edge_dir,
            collection=version.qdrant_collection,
            dim=dim,
            api_key=api_key,
        )
        return working, episodic

    async def drop(version: ProjectionVersion) -> None:
        working = RedisWorkingMemory.from_url(redis_url, version.redis_namespace)
        try:
            await working.clear()
        finally:
            await working.close()
        await drop_episodic_store(
            qdrant_url=settings.qdrant_url,
            qdrant_path=edge_dir,
            collection=version.qdrant_collection,
            api_key=api_key,
        )
        if version.name is not None:
            await versions.forget(version.name)

    return bootstrap, redis_url, versions, open_stores, drop


def _parse_since(value: str | None) -> Any:
    if value is None:
        return None
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        fail(f"--since takes an ISO 8601 time such as 2026-11-22T10:00:00+00:00, not {value!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@app.command(
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
) -> None:
    settings = load_settings()
    if since is not None and into is None:
        fail("--since needs --into: a new version built from a later point would miss memories")
    if version is not None and into is not None:
        fail("give either --version (a new version) or --into (an existing one)")
    moment = _parse_since(since)
    bootstrap, _, versions, open_stores, drop = _projection_parts(settings)
    configure(settings)

    async def main() -> None:
        from schemas.topics import Topics
        from streams.privacy.sealing import RecordSealer
        from streams.rebuild.replay import Replay, wait_until_unused

        keyring = await open_keyring(settings)
        try:
            target = None
            if into is not None:
                known = {i.version.name: i.version for i in await versions.versions()}
                target = await versions.active() if into == "active" else known.get(into)
                if target is None:
                    fail(f"no projection version {into!r} (engram versions lists them)")
            for name in {(await versions.active()).name, target.name if target else None}:
                if await versions.derived_log(name) is not None:
                    # A replay reads the live derived log; this version continues its own.
                    fail(
                        f"projection version {name} was reprocessed and continues a derived "
                        "log of its own; engram replay rebuilds only from the live one"
                    )
            job = Replay(
                bootstrap,
                Topics(settings.topic_prefix),
                range(settings.partitions),
                group_id=f"{settings.topic_prefix}{settings.app_id}",
                versions=versions,
                open_stores=open_stores,
                batch_size=batch_size,
                fence_timeout=fence_timeout,
                sealer=RecordSealer(keyring),
            )
            with record_progress("replaying", 1) as progress:
                task = progress.add_task("replay", total=None, rate="")

                def total(n: int) -> None:
                    progress.update(task, total=max(n, 1))

                def advance(n: int) -> None:
                    progress.update(task, advance=n, rate=_rate(progress, task))

                result = await job.run(
                    name=version,
                    into=target,
                    since=moment,
                    switch=switch,
                    total=total,
                    advance=advance,
                )
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
            if drop_old and result.previous is not None:
                await wait_until_unused(versions, result.previous, timeout=60.0)
                await drop(result.previous)
                console.print(f"dropped version {result.previous.label}")
        finally:
            await versions.close()
            if keyring is not None:
                await keyring.close()

    run(main)


@app.command(
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
        int, typer.Option(min=1, max=200_000, help="Raw records per processed batch.")
    ] = 5_000,
) -> None:
    settings = load_settings()
    with friendly_errors():
        from processors.embedding import embedder_from_name
        from streams.integrations.chat_summariser import summariser_from_url
        from streams.runtime.node import processing_config

        bootstrap, _, versions, open_stores, _ = _projection_parts(settings)
        config = processing_config(settings)
        embedder = embedder_from_name(settings.embedder)
        summariser = summariser_from_url(
            settings.summariser_url,
            settings.summariser_model,
            settings.summariser_api_key.get_secret_value() if settings.summariser_api_key else None,
            settings.summariser_timeout,
        )
    configure(settings)

    async def main() -> None:
        from schemas.topics import Topics
        from streams.privacy.sealing import RecordSealer
        from streams.rebuild.reprocess import Reprocess

        keyring = await open_keyring(settings)
        try:
            job = Reprocess(
                bootstrap,
                Topics(settings.topic_prefix),
                settings.partitions,
                versions=versions,
                open_stores=open_stores,
                config=config,
                embedder=embedder,
                summariser=summariser,
                batch_size=batch_size,
                producer_linger=settings.producer_linger,
                app_id=settings.app_id,
                sealer=RecordSealer(keyring),
            )
            console.print(f"configuration version {job.config_version} (embedder {embedder.id})")
            with record_progress("reprocessing", 1) as progress:
                task = progress.add_task("reprocess", total=None, rate="")

                def total(n: int) -> None:
                    progress.update(task, total=max(n, 1))

                def advance(n: int) -> None:
                    progress.update(task, advance=n, rate=_rate(progress, task))

                result = await job.run(name=version, total=total, advance=advance)
            rate = result.records / max(result.seconds, 1e-9)
            label, derived = result.version.label, result.derived_topics
            console.print(
                f"reprocessed {result.records:,} raw records in {result.seconds:.1f}s "
                f"({rate:,.0f}/s): {result.memories:,} memories, "
                f"{result.lifecycle_events:,} lifecycle events, "
                f"{result.dead_letters:,} dead letters, configuration {result.config_version}"
            )
            console.print(
                f"derived log: {derived.items}, {derived.lifecycle}, {derived.deadletter}"
            )
            console.print(
                f"projection version {label} (Redis {result.version.redis_namespace}, "
                f"Qdrant {result.version.qdrant_collection}) is ready, not switched to: the "
                "running workers still use the old configuration. To serve it: "
                f"`engram versions activate {label}` (the running workers then exit), and run "
                f"the workers with configuration {result.config_version}; they continue the "
                f"derived log as consumer group {result.group}"
            )
        finally:
            await versions.close()
            if keyring is not None:
                await keyring.close()

    run(main)


versions_app = typer.Typer(
    help="Projection versions: list them, activate a reprocessed one, or drop one nobody uses.",
    no_args_is_help=False,
)
app.add_typer(versions_app, name="versions")


@versions_app.callback(invoke_without_command=True)
def versions_list(ctx: typer.Context) -> None:
    """List the projection versions, which one is active, and who uses each."""
    if ctx.invoked_subcommand is not None:
        return
    settings = load_settings()
    _, _, versions, _, _ = _projection_parts(settings)

    async def main() -> None:
        from datetime import UTC, datetime

        from rich.table import Column, Table

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
        console.print(table)

    run(main)


@versions_app.command("activate")
def versions_activate(
    name: Annotated[str, typer.Argument(help="A version built by engram reprocess.")],
) -> None:
    """Serve a reprocessed version: point every process at it. Running workers (and query
    services with another embedder) then finish their batch, commit and exit with code 3,
    asking to be restarted with the version's configuration; workers started with it continue
    the version's derived log from where the reprocess stopped. A replayed version is caught
    up and switched to with `engram replay --into NAME` instead."""
    settings = load_settings()
    _, _, versions, _, _ = _projection_parts(settings)

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


async def _inactive_version(versions: Any, name: str, if_active: str) -> Any:
    """The registered version ``name``, or one line saying why not."""
    info = {i.version.name: i for i in await versions.versions()}.get(name)
    if info is None:
        fail(f"no projection version {name!r} (engram versions lists them)")
    if info.active:
        fail(f"version {name!r} {if_active}")
    return info


@versions_app.command("drop")
def versions_drop(
    name: Annotated[str, typer.Argument(help="The version to delete (not the active one).")],
    timeout: Annotated[
        float, typer.Option(min=0.0, help="Longest wait for processes to let go of it.")
    ] = 30.0,
) -> None:
    """Delete a version's Redis keys and Qdrant collection, once no running process uses it."""
    settings = load_settings()
    _, _, versions, _, drop = _projection_parts(settings)

    async def main() -> None:
        from streams.rebuild.replay import wait_until_unused

        try:
            info = await _inactive_version(
                versions, name, "is active; replay into another one first"
            )
            await wait_until_unused(versions, info.version, timeout=timeout)
            await drop(info.version)
            console.print(f"dropped version {name}")
        finally:
            await versions.close()

    run(main)


@app.command(
    "forget-agent",
    help=(
        "Forget an agent: erase its memories from every projection version and delete its "
        "sealing keys, so its events on every topic (and in every export) can no longer be "
        "read, and a replay cannot bring them back. Runs in log order through the worker that "
        "owns the agent; this command waits until that worker has done it."
    ),
)
def forget_agent(
    agent_id: Annotated[str, typer.Argument(help="The agent to forget.")],
    reason: Annotated[
        str | None, typer.Option(help="Why (kept on the request in the log, max 500 chars).")
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=0.0, help="Longest wait for a worker to complete it (seconds).")
    ] = 60.0,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    from schemas.envelope import AgentId

    settings = load_settings()
    with friendly_errors():
        TypeAdapter(AgentId).validate_python(agent_id)
        if reason is not None and len(reason) > 500:
            raise ValueError("--reason is at most 500 characters")
    bootstrap, redis_url, versions, open_stores, _ = _projection_parts(settings)
    if not yes and not typer.confirm(
        f"Forget {agent_id} for good (its memories and every readable copy of its events)?"
    ):
        fail("not forgotten", code=1)
    configure(settings)

    async def main() -> None:
        from projections.working.redis_store import RedisWorkingMemory
        from schemas.topics import Topics
        from streams.privacy.forgetting import ForgetTimeoutError, describe, forget_agent

        edge_dir = None if settings.qdrant_url else settings.edge_path()

        async def open_inactive(version: Any) -> tuple[Any, Any]:
            if edge_dir is not None and not (edge_dir / version.qdrant_collection).exists():
                # Never used here: opening it would make an empty shard of ~143 MB.
                return RedisWorkingMemory.from_url(redis_url, version.redis_namespace), None
            working, episodic = await open_stores(version)
            return working, episodic

        keyring = await open_keyring(settings)
        try:
            report = await forget_agent(
                agent_id,
                bootstrap=bootstrap,
                topics=Topics(settings.topic_prefix),
                keyring=keyring,
                versions=versions,
                open_working=lambda v: RedisWorkingMemory.from_url(redis_url, v.redis_namespace),
                open_inactive=open_inactive,
                reason=reason,
                timeout=timeout,
            )
        except ForgetTimeoutError as exc:
            pending = exc.args[0]
            fail(
                f"the request to forget {agent_id} is in the log at "
                f"{describe(pending)['request']} but no worker completed it within "
                f"{timeout:g}s (are the workers running?). It completes when a worker reaches "
                "it; run this command again to check.",
                code=1,
            )
        finally:
            await versions.close()
            if keyring is not None:
                await keyring.close()
        summary = describe(report)
        if as_json:
            console.print_json(data=summary)
            return
        console.print(f"[green]forgot {agent_id}[/green]")
        for name, value in summary.items():
            console.print(f"  {name:<22} {value}")
        if not report.sealed:
            console.print(
                "[yellow]no keyring (ENGRAM_KEYRING=off): the agent's events stay readable "
                "in the log; only the projections were erased[/yellow]"
            )
        elif not report.key_ids:
            console.print(
                "[yellow]the agent had no sealing key: its events were published unsealed "
                "and stay readable in the log; the projections were erased[/yellow]"
            )

    run(main)


@app.command(
    "export",
    help=(
        "Write Engram's topics (ENGRAM_TOPIC_PREFIX) to DIRECTORY: one gzip JSON-lines file per "
        "partition, every record with its offset, and a manifest. Reads the log as it is "
        "when the export starts."
    ),
)
def export_command(
    directory: Annotated[Path, typer.Argument(help="Where to write the archive (replaced).")],
) -> None:
    settings = load_settings()
    bootstrap = bootstrap_of(settings)

    async def main() -> None:
        from schemas.topics import Topics
        from streams.eventlog.archive import export_log

        with counted("exporting", None) as advance:
            summaries = await export_log(
                bootstrap, Topics(settings.topic_prefix).all(), directory, progress=advance
            )
        report("exported", summaries, directory)

    run(main)


@app.command(
    "import",
    help=(
        "Load an archive written by `engram export` into the broker at ENGRAM_KAFKA_BOOTSTRAP, "
        "every record at the partition and offset it had. The topics must be empty or absent."
    ),
)
def import_command(
    directory: Annotated[Path, typer.Argument(help="An archive written by engram export.")],
) -> None:
    settings = load_settings()
    bootstrap = bootstrap_of(settings)

    async def main() -> None:
        from streams.eventlog.archive import import_log, read_manifest

        total = sum(s.total for s in read_manifest(directory))
        with counted("importing", total) as advance:
            summaries = await import_log(bootstrap, directory, progress=advance)
        report("imported", summaries, directory)

    run(main)


def report(verb: str, summaries: list[TopicSummary], directory: Path) -> None:
    for summary in summaries:
        if summary.total:
            console.print(f"  {summary.name:32} {summary.total:>10,} records")
    total = sum(s.total for s in summaries)
    console.print(f"{verb} {total:,} records ({directory})")


@app.command(
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
    bootstrap = bootstrap_of(settings)

    async def main() -> None:
        from schemas.topics import Topics
        from streams.eventlog.history import read_agent_history
        from streams.privacy.sealing import RecordSealer

        keyring = await open_keyring(settings)
        try:
            timeline = await read_agent_history(
                bootstrap,
                Topics(settings.topic_prefix),
                agent_id,
                settings.partitions,
                limit=limit,
                timeout=timeout,
                sealer=RecordSealer(keyring),
            )
        finally:
            if keyring is not None:
                await keyring.close()
        if as_json:
            typer.echo(timeline.model_dump_json(indent=2))
        elif not timeline.total:
            console.print(f"no records of {agent_id} in the log")
        else:
            console.print(history_table(timeline))

    with friendly_errors():
        from projections.history import LogUnavailableError

        try:
            asyncio.run(main())
        except LogUnavailableError as exc:
            fail(str(exc))


def history_table(timeline: AgentHistory) -> Table:
    """The history as a person reads it: one row per entry, oldest first."""
    from datetime import UTC

    from rich import box
    from rich.table import Table

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
    table.add_column("what", ratio=1, min_width=24)
    for entry in timeline.entries:
        sim = "" if entry.year is None else f"year {entry.year}"
        if entry.step is not None:
            sim = f"{sim} step {entry.step}".strip()
        table.add_row(
            entry.at.astimezone(UTC).strftime("%Y-%m-%d\n%H:%M:%S"),
            sim,
            entry.kind,
            (entry.memory_id or "")[:8],
            entry.text,
        )
    return table


@schemas_app.command("export")
def export_schemas(
    directory: Annotated[Path, typer.Argument(help="Where to write the JSON Schema files.")],
) -> None:
    """Write the JSON Schema of every event type, for producers in other languages."""
    from schemas.json_schema import export_json_schemas

    for path in export_json_schemas(directory):
        typer.echo(str(path))


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
