"""``engram recall``: a retrieval from the memory as it stood at a point of the log
(``--as-of``), or a recorded retrieval run again beside its record (``--again``).

Both rebuild the agent's memory from its partition of the derived log into scratch stores
(:mod:`streams.rebuild.as_of`), in this process: they need the broker and the Redis
(``ENGRAM_KAFKA_BOOTSTRAP``, ``ENGRAM_REDIS_URL``), not the query service. Exit codes: 0 (for
``--again``: the recomputed answer is the recorded one), 1 (``--again``: they differ), 2 (an
error: a bad point, an unknown retrieval, an unreachable server).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich import box
from rich.table import Table

from streams.cli import deferred
from streams.cli.configuration import active_topics, configure, load_settings, open_keyring
from streams.cli.console import checked_agent_id, console, err, fail, invalid_retrieval, run
from streams.cli.memory import (
    Arousal,
    AsPrompt,
    ContextTags,
    Days,
    Kinds,
    MinImportance,
    Mode,
    Now,
    OccurredAfter,
    OccurredBefore,
    Profile,
    Query,
    Scope,
    Step,
    StepFrom,
    StepTo,
    Tagged,
    TopK,
    Weights,
    Year,
    YearFrom,
    YearTo,
    print_answer,
    retrieval_params,
)
from streams.cli.progress import sized_as_it_goes
from streams.settings import EngramSettings

if TYPE_CHECKING:
    from projections.retrieval.models import RetrievalRequest
    from streams.rebuild.as_of import LogRecaller, Recalled, Repeated
    from streams.rebuild.log_cut import LogPoint

commands = typer.Typer()

DIFFERENT = 1
"""The exit code of ``--again`` when the recomputed answer differs from the record."""

AsOf = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        help="A point of the log: an ISO 8601 time (the batches logged by then), "
        "topic:partition:offset of a published record (the memory once it was derived), or "
        "of memory.items / memory.lifecycle (once that batch counted).",
    ),
]
Again = Annotated[
    str | None,
    typer.Option(
        "--again",
        help="The event id of a recorded retrieval (`engram history AGENT` lists them), or "
        "'last' for the agent's latest: run it again on the memory as it stood then and "
        "compare.",
    ),
]


@commands.command(
    help=(
        "Answer a retrieval from an agent's memory as it stood at a point of the log, "
        "rebuilt from the log (--as-of, with the options of `engram retrieve`), or run a "
        "recorded retrieval again and show its recorded and recomputed results side by side "
        "(--again; exit code 1 when they differ). Reads the agent's partition of the derived "
        "log: the cost grows with that partition."
    )
)
def recall(
    agent_id: Annotated[str, typer.Argument(help="Whose memory.")],
    as_of: AsOf = None,
    again: Again = None,
    query: Query = None,
    top_k: TopK = None,
    mode: Mode = None,
    scope: Scope = None,
    year: Year = None,
    step: Step = None,
    time: Now = None,
    days: Days = None,
    tags: ContextTags = None,
    profile: Profile = None,
    arousal: Arousal = None,
    kind: Kinds = None,
    tagged: Tagged = None,
    min_importance: MinImportance = None,
    year_from: YearFrom = None,
    year_to: YearTo = None,
    step_from: StepFrom = None,
    step_to: StepTo = None,
    occurred_after: OccurredAfter = None,
    occurred_before: OccurredBefore = None,
    weight: Weights = None,
    prompt: AsPrompt = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="--again: print the comparison as JSON.")
    ] = False,
    timeout: Annotated[
        float, typer.Option(min=1.0, help="Longest the recall may take (seconds).")
    ] = 120.0,
) -> None:
    if (as_of is None) == (again is None):
        fail("give --as-of POINT or --again RETRIEVAL_ID")
    params = retrieval_params(
        query=query,
        top_k=top_k,
        mode=mode,
        scope=scope,
        year=year,
        step=step,
        time=time,
        days=days,
        tags=tags,
        profile=profile,
        arousal=arousal,
        kind=kind,
        tagged=tagged,
        min_importance=min_importance,
        year_from=year_from,
        year_to=year_to,
        step_from=step_from,
        step_to=step_to,
        occurred_after=occurred_after,
        occurred_before=occurred_before,
        weight=weight,
    )
    checked_agent_id(agent_id)
    settings = load_settings()
    if not settings.kafka_bootstrap or not settings.redis_url:
        fail("set ENGRAM_KAFKA_BOOTSTRAP and ENGRAM_REDIS_URL (engram up prints both)")
    configure(settings)
    if again is not None:
        if params != retrieval_params() or prompt:
            fail("--again runs the recorded request: give no retrieval options")
        _again(settings, agent_id, again, as_json, timeout)
    else:
        assert as_of is not None
        _as_of(settings, agent_id, _point(as_of), _request(params), prompt, timeout)


def _point(text: str) -> LogPoint:
    try:
        return deferred.log_cut.parse_point(text)
    except ValueError as exc:
        fail(f"--as-of: {exc}")


def _request(params: dict[str, Any]) -> RetrievalRequest:
    try:
        return deferred.retrieval_models.RetrievalRequest.model_validate(
            {k: v for k, v in params.items() if v is not None}
        )
    except ValidationError as exc:
        invalid_retrieval(exc)


def _as_of(
    settings: EngramSettings,
    agent_id: str,
    point: LogPoint,
    request: RetrievalRequest,
    prompt: bool,
    timeout: float,
) -> None:
    async def main() -> None:
        async with _recaller(settings, timeout) as recaller:
            with sized_as_it_goes("reading the log") as (total, advance):
                recalled = await recaller.recall(
                    agent_id, request, point, total=total, advance=advance
                )
        err.print(_rebuilt(agent_id, recalled))
        print_answer(recalled.response, prompt)

    run(main)


def _again(
    settings: EngramSettings, agent_id: str, event_id: str, as_json: bool, timeout: float
) -> None:
    async def main() -> None:
        async with _recaller(settings, timeout) as recaller:
            with sized_as_it_goes("reading the log") as (total, advance):
                repeated = await recaller.again(agent_id, event_id, total=total, advance=advance)
        if as_json:
            typer.echo(_comparison_json(repeated))
        else:
            console.print(_side_by_side(repeated))
            err.print(_rebuilt(agent_id, repeated.recalled))
        if not repeated.comparison.identical:
            raise typer.Exit(DIFFERENT)

    run(main)


@contextlib.asynccontextmanager
async def _recaller(settings: EngramSettings, timeout: float) -> AsyncIterator[LogRecaller]:
    """A :class:`LogRecaller` over the configured broker and Redis, on the derived log of the
    active projection version."""
    bootstrap, redis_url = settings.kafka_bootstrap or "", settings.redis_url or ""
    topics = await active_topics(settings, redis_url)
    keyring = await open_keyring(settings)
    try:
        recaller: LogRecaller = deferred.as_of.LogRecaller(
            bootstrap,
            lambda: topics,
            settings.partitions,
            redis_url,
            settings.redis_namespace,
            deferred.embedding.embedder_from_name(
                settings.embedder,
                minilm_precision=settings.minilm_precision,
                minilm_runtime=settings.minilm_runtime,
            ),
            dense_share=settings.dense_share,
            candidate_limit=settings.retrieval_candidates,
            relevance_candidate_limit=settings.relevance_candidates,
            sealer=deferred.sealing.RecordSealer(keyring),
            timeout=timeout,
        )
        yield recaller
    finally:
        if keyring is not None:
            await keyring.close()


def _rebuilt(agent_id: str, recalled: Recalled) -> str:
    """One line: the point, the batches it let in, and the cost."""
    cut = recalled.cut
    if cut.last_batch is None:
        upto = "no batch" if cut.marked else "each event by its log time"
    else:
        logged = _ms_time(cut.last_batch_ms)
        where = f"{cut.last_batch.topic}:{cut.last_batch.partition}:{cut.last_batch.offset}"
        upto = f"{cut.batches} batches, the last marked at {where} ({logged})"
    return (
        f"{agent_id} as of {recalled.point}: {upto}; {len(cut.events)} events of the agent "
        f"applied, {len(recalled.held)} memories held; {recalled.records_read:,} records read "
        f"in {recalled.seconds:.2f} s"
    )


def _ms_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _side_by_side(repeated: Repeated) -> Table:
    record, where = repeated.record, repeated.where
    verdict = "identical" if repeated.comparison.identical else "DIFFERENT"
    table = Table(
        title=f"retrieval {record.event_id} of {record.agent_id} ({where.topic}:"
        f"{where.partition}:{where.offset}), served {record.occurred_at.isoformat()}, mode "
        f"{record.mode}: {verdict}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in ("memory", "recorded rank", "recorded score", "recomputed rank"):
        table.add_column(column, no_wrap=True)
    table.add_column("recomputed score", no_wrap=True)
    table.add_column("difference", ratio=1, min_width=20)
    for row in repeated.comparison.rows:
        table.add_row(
            row.memory_id[:8],
            _shown(row.recorded_rank),
            _shown(row.recorded_score),
            _shown(row.recomputed_rank),
            _shown(row.recomputed_score),
            row.note or "same",
        )
    return table


def _shown(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def _comparison_json(repeated: Repeated) -> str:
    cut = repeated.recalled.cut
    return json.dumps(
        {
            "event_id": repeated.record.event_id,
            "agent_id": repeated.record.agent_id,
            "position": repeated.where.model_dump(),
            "served_at": repeated.record.occurred_at.isoformat(),
            "request": repeated.request.model_dump(mode="json", exclude_none=True),
            "rebuilt_at": {
                "batches": cut.batches,
                "last_batch": None if cut.last_batch is None else cut.last_batch.model_dump(),
                "last_batch_logged_at": _ms_time(cut.last_batch_ms),
            },
            **repeated.comparison.model_dump(mode="json"),
        },
        indent=2,
    )
