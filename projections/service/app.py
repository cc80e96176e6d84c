"""The HTTP query service: retrieval as a tool (seed 004, section 8), an agent's memory
history, plus health and readiness.

``create_app`` builds the application around an engine it is given; nothing is built at import
time, so tests and the embedded dev stack each wire their own stores, their own log reader and
their own recorder of retrievals.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from projections.history import MAX_HISTORY_LIMIT, AgentHistory, LogUnavailableError
from projections.interfaces import ProjectionError
from projections.learned.reads import LearnedMemory
from projections.retrieval.as_of import (
    AsOfNotInLog,
    AsOfNotInLogError,
    AsOfUnknownTopicError,
    LogRecall,
)
from projections.retrieval.engine import (
    PositionsNotAppliedError,
    PositionsNotInLogError,
    RetrievalEngine,
    UnknownTopicError,
)
from projections.retrieval.models import (
    NotInLog,
    RetrievalRequest,
    RetrievalResponse,
    WaitTimedOut,
)
from projections.service.access_records import (
    Recorder,
    RetrievalAudit,
    recorder,
    retrieval_record,
)
from projections.service.access_records import (
    RetrievalHook as RetrievalHook,  # the node's type of the hook it passes: re-exported
)
from projections.service.auth import ApiKeys
from projections.service.http_auth import Guarded, ServiceError
from projections.service.learned_routes import add_learned_routes
from projections.service.metrics import ServiceMetrics
from projections.service.openapi import document_with_topics
from projections.service.surprise_route import add_surprise_route
from schemas.envelope import AGENT_ID_RULE, AgentId
from schemas.readable_errors import readable_reason

log = logging.getLogger(__name__)

Readiness = Callable[[], Awaitable[dict[str, str]]]
"""Returns ``{backend: "ok" | reason}``; the service is ready when every value is ``"ok"``."""

HistoryReader = Callable[[str, int], Awaitable[AgentHistory]]
"""``(agent_id, limit) -> history``; raises :class:`LogUnavailableError` or ``TimeoutError``
when the log cannot be read."""

RetrievalTrace = Callable[
    [str, RetrievalRequest], AbstractContextManager[Callable[[RetrievalResponse], None]]
]
"""A span around a retrieval of an agent, told its answer (streams.runtime.tracing)."""

DEFAULT_HISTORY_LIMIT = 100


DESCRIPTION = """\
Retrieval over an agent's memories, as projected from the Engram event log.

* **two_phase** (seed 004): working memories first, most recent first, then an episodic
  supplement ranked by `0.95^age x importance`.
* **weighted** (seed 003, v2): `S = Wr*R + Wi*I + Wc*C + Wrel*Rel - Wint*Int`, defaults
  0.3 / 0.5 / 0.2 / 0 / 0.
* **saliency** (seed 003, v1): `importance x e^(-0.1 x age)`.
* **basic** (seed 003): the 5 most recent plus the 2 highest by decayed importance.
* **constrained** (seed 003, 5.1): as basic, the recent count interpolated by arousal between
  the `profile`'s System 1 and System 2 counts.
* **generative** (generative agents): recency + importance + relevance to `query`, each
  min-max normalised.
* **relevance**: relevance to `query` alone (cosine blended with BM25).
* **recent** (seed 000's recent episodes): the memories of events that occurred within the
  last `days` (default 7) before `current_time` (default now), newest first, `top_k` 10 unless
  given.

`filter` (tags, kinds, minimum importance, year and step ranges) applies in every mode. Every
result carries the breakdown of its score, and every answered retrieval is recorded on
`memory.access`.

**Read your writes**: give `after` the positions publishing returned, and the retrieval waits
(at most `wait_timeout_ms`) until both stores have applied them; past that it answers 504.
A position the log does not hold (past the end of its partition, or on a partition that does
not exist) answers 409 at once: it was not returned by publishing to this log, and no wait
would see it applied. The topics a position may name are listed in this document.

**Modes' own fields**: `weights` (weighted), `profile` and `arousal` (constrained),
`generative` (generative) and `days` (recent) are refused with any other mode; mode relevance
needs a `query`, and mode recent takes no `current_year` or `current_step`; the request schema
states these rules, so a request it admits is never refused.

**As of a point of the log**: give `as_of` a time or a position and the answer comes from
the agent's memory as it stood then, rebuilt from its partition of the derived log (a read
of that partition per request; the answer is not recorded on `memory.access`). A point the
log does not hold (a time in the future, a position past the end or not derived yet) answers
409 at once.
"""

NOT_IN_LOG_STATUS = 409
"""Why 409: the request is well formed but names positions the current state of the log does
not hold; unlike a 504, retrying it unchanged cannot succeed (positions come from publishing)."""

WAIT_TIMEOUT_STATUS = 504
"""Why 504: the service depends on the processors (upstream of it) to apply the positions, and
they did not within the time limit; the request was fine and may succeed when retried. 409
would say the request conflicts with the resource and should be changed, and 503 is what this
service answers when a store cannot be read at all."""


class Health(BaseModel):
    status: Literal["alive"] = "alive"


class ReadinessReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: Literal["ready", "not_ready"]
    checks: dict[str, str] = Field(description='Per backend: "ok" or why it is not ready.')


def create_app(
    engine: RetrievalEngine,
    *,
    readiness: Readiness | None = None,
    readiness_timeout_s: float = 2.0,
    on_retrieval: RetrievalHook | None = None,
    on_retrieval_timeout_s: float = 1.0,
    history: HistoryReader | None = None,
    recall: LogRecall | None = None,
    title: str = "Engram query service",
    version: str | None = None,
    api_keys: ApiKeys | None = None,
    metrics: ServiceMetrics | None = None,
    learned: LearnedMemory | None = None,
    trace_retrieval: RetrievalTrace | None = None,
) -> FastAPI:
    """The query service over ``engine``. ``readiness`` defaults to pinging the engine's
    stores; a check that fails, or does not answer within ``readiness_timeout_s``, makes
    ``/readyz`` answer 503, so an orchestrator stops routing traffic here.

    ``on_retrieval`` gets a :class:`~schemas.memory_events.MemoryRetrieved` for each
    answered retrieval and each facts read with a query (:mod:`.access_records`); one that
    fails or takes longer than ``on_retrieval_timeout_s`` is counted and logged, and the
    read is answered anyway. ``history`` reads an agent's history from the log; without
    it the history route answers 503. ``recall`` answers retrievals with ``as_of``; without
    it they answer 503. ``learned`` answers the procedures, facts and plans routes; without it
    they answer 503.

    ``api_keys``: every route but the probes needs a key with the ``read`` scope for the
    agent of its path (401 without a known key, 403 otherwise); None: no authentication.
    ``metrics``: retrieval latencies and read-your-writes waits are counted there, and
    ``/metrics`` serves its registry (open, like the probes: it names no agent).
    ``trace_retrieval``: a span around each retrieval, told the answer; None: no tracing.
    """
    app = FastAPI(title=title, version=version or _package_version(), description=DESCRIPTION)
    app.openapi = document_with_topics(  # type: ignore[method-assign]
        app, engine.source_topics, None if recall is None else recall.point_topics
    )
    audit = RetrievalAudit()
    app.state.retrieval_audit = audit
    _add_error_handlers(app, metrics)
    guard = Guarded(api_keys)
    record = recorder(on_retrieval, on_retrieval_timeout_s, audit)
    _add_retrieval_route(app, engine, record, recall, guard, metrics, trace_retrieval)
    _add_history_route(app, history, guard)
    add_learned_routes(app, learned, guard, record)
    add_surprise_route(app, engine.surprise, guard)
    _add_probe_routes(app, readiness or engine.readiness, readiness_timeout_s)
    if metrics is not None:
        _add_metrics_route(app, metrics)
    return app


def _add_metrics_route(app: FastAPI, metrics: ServiceMetrics) -> None:
    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _add_error_handlers(app: FastAPI, metrics: ServiceMetrics | None) -> None:
    """Known failures become answers a client can act on: 422 naming the field, 409 for
    positions the log does not hold, 503 when a store cannot be read, 504 when the writes to
    wait for were not applied in time."""

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            status_code=422, content={"detail": [_readable(e) for e in error.errors()]}
        )

    @app.exception_handler(ProjectionError)
    async def _store_unavailable(_: Request, error: ProjectionError) -> JSONResponse:
        log.warning("memory store unavailable: %s", error)
        return JSONResponse(
            status_code=503,
            content={"detail": f"memory store unavailable: {error}"},
        )

    @app.exception_handler(UnknownTopicError)
    async def _unknown_topic(_: Request, error: UnknownTopicError) -> JSONResponse:
        loc = ["body", "after", error.index, "topic"]
        message = f"after.{error.index}.topic: {error}"
        return JSONResponse(
            status_code=422,
            content={"detail": [{"loc": loc, "msg": message, "type": "value_error"}]},
        )

    @app.exception_handler(PositionsNotInLogError)
    async def _not_in_log(_: Request, error: PositionsNotInLogError) -> JSONResponse:
        body = NotInLog(detail=str(error), missing=error.missing)
        return JSONResponse(status_code=NOT_IN_LOG_STATUS, content=body.model_dump(mode="json"))

    @app.exception_handler(AsOfUnknownTopicError)
    async def _as_of_unknown_topic(_: Request, error: AsOfUnknownTopicError) -> JSONResponse:
        loc = ["body", "as_of", "topic"]
        message = f"as_of.topic: {error}"
        return JSONResponse(
            status_code=422,
            content={"detail": [{"loc": loc, "msg": message, "type": "value_error"}]},
        )

    @app.exception_handler(AsOfNotInLogError)
    async def _as_of_not_in_log(_: Request, error: AsOfNotInLogError) -> JSONResponse:
        body = AsOfNotInLog(detail=str(error), log_end=error.log_end)
        return JSONResponse(status_code=NOT_IN_LOG_STATUS, content=body.model_dump(mode="json"))

    @app.exception_handler(PositionsNotAppliedError)
    async def _not_applied(_: Request, error: PositionsNotAppliedError) -> JSONResponse:
        log.warning("read-your-writes wait timed out: %s", error)
        if metrics is not None:
            metrics.ryw_timeouts.inc()
        body = WaitTimedOut(
            detail=str(error), pending=error.pending, waited_ms=error.waited_s * 1000.0
        )
        return JSONResponse(status_code=WAIT_TIMEOUT_STATUS, content=body.model_dump(mode="json"))


def _add_retrieval_route(
    app: FastAPI,
    engine: RetrievalEngine,
    record: Recorder,
    recall: LogRecall | None,
    guard: Guarded,
    metrics: ServiceMetrics | None,
    trace_retrieval: RetrievalTrace | None,
) -> None:
    @app.post(
        "/v1/agents/{agent_id}/retrieve",
        dependencies=guard.dependencies("read"),
        tags=["retrieval"],
        summary="Retrieve an agent's most relevant memories",
        description="Ranks the agent's working and episodic memories and returns the best "
        "`top_k`, each with its score breakdown.",
        responses={
            NOT_IN_LOG_STATUS: {
                "model": NotInLog | AsOfNotInLog,
                "description": "Positions of `after` the log does not hold: past the end of "
                "their partition, or on a partition that does not exist; or a point of "
                "`as_of` it does not hold (yet).",
            },
            503: {
                "model": ServiceError,
                "description": "A memory store cannot be read; for `as_of`, the event log.",
            },
            WAIT_TIMEOUT_STATUS: {
                "model": WaitTimedOut,
                "description": "The positions of `after` were not applied within "
                "`wait_timeout_ms`.",
            },
            **guard.responses(),
        },
    )
    async def retrieve(
        agent_id: Annotated[
            AgentId,
            Path(
                description=f"The agent whose memories are searched: {AGENT_ID_RULE}.",
                examples=["H001"],
            ),
        ],
        request: RetrievalRequest,
    ) -> RetrievalResponse:
        if trace_retrieval is None:
            return await measured(agent_id, request)
        with trace_retrieval(agent_id, request) as answered:
            response = await measured(agent_id, request)
            answered(response)
            return response

    async def measured(agent_id: str, request: RetrievalRequest) -> RetrievalResponse:
        if metrics is None:
            return await answer(agent_id, request)
        started = time.perf_counter()
        if request.after:
            metrics.ryw_waits.inc()
        try:
            return await answer(agent_id, request)
        finally:
            mode = "as_of" if request.as_of is not None else request.mode
            metrics.retrieval_seconds.labels(mode).observe(time.perf_counter() - started)

    async def answer(agent_id: str, request: RetrievalRequest) -> RetrievalResponse:
        # Pinned before it is answered and recorded: the record replays the same moment.
        request = request.pinned(datetime.now(UTC))
        if request.as_of is not None:
            return await _recalled(recall, agent_id, request)
        response = await engine.retrieve(agent_id, request)
        await record(agent_id, lambda: retrieval_record(agent_id, request, response))
        return response


async def _recalled(
    recall: LogRecall | None, agent_id: str, request: RetrievalRequest
) -> RetrievalResponse:
    """The answer from the memory at ``request.as_of``; not recorded (an audit is not a use)."""
    if recall is None:
        raise HTTPException(503, "as_of unavailable: this service reads no event log")
    try:
        return await recall(agent_id, request)
    except (LogUnavailableError, TimeoutError) as error:
        log.warning("event log unavailable for as_of: %s", error)
        raise HTTPException(503, f"event log unavailable: {error}") from error


def _add_history_route(app: FastAPI, history: HistoryReader | None, guard: Guarded) -> None:
    @app.get(
        "/v1/agents/{agent_id}/history",
        dependencies=guard.dependencies("read"),
        tags=["history"],
        summary="What happened to an agent's memories, from the log",
        description="The agent's memories recorded, promoted, summarised and forgotten, its "
        "year-end consolidations and its retrievals, oldest first: the latest `limit` entries, "
        "with counts over the whole history. An agent with no records has an empty history.",
        responses={
            503: {"model": ServiceError, "description": "The event log cannot be read."},
            **guard.responses(),
        },
    )
    async def agent_history(
        agent_id: Annotated[
            AgentId,
            Path(description=f"The agent: {AGENT_ID_RULE}.", examples=["H001"]),
        ],
        limit: Annotated[
            int,
            Query(ge=1, le=MAX_HISTORY_LIMIT, description="How many of the latest entries."),
        ] = DEFAULT_HISTORY_LIMIT,
    ) -> AgentHistory:
        if history is None:
            raise HTTPException(503, "event log unavailable: this service reads no event log")
        try:
            return await history(agent_id, limit)
        except (LogUnavailableError, TimeoutError) as error:
            log.warning("event log unavailable: %s", error)
            raise HTTPException(503, f"event log unavailable: {error}") from error


def _add_probe_routes(app: FastAPI, check: Readiness, readiness_timeout_s: float) -> None:
    @app.get("/healthz", tags=["probes"], summary="The process is alive")
    async def healthz() -> Health:
        return Health()

    @app.get(
        "/readyz",
        tags=["probes"],
        summary="The memory stores answer",
        response_model=ReadinessReport,
        responses={503: {"model": ReadinessReport, "description": "A backend is not ready."}},
    )
    async def readyz() -> JSONResponse:
        try:
            async with asyncio.timeout(readiness_timeout_s):
                checks = await check()
        except TimeoutError:
            checks = {"readiness": f"no answer within {readiness_timeout_s} s"}
        except Exception as error:  # a probe must answer, whatever the check raised
            log.warning("readiness check failed", exc_info=True)
            checks = {"readiness": str(error) or type(error).__name__}
        ready = all(status == "ok" for status in checks.values())
        report = ReadinessReport(status="ready" if ready else "not_ready", checks=checks)
        return JSONResponse(status_code=200 if ready else 503, content=report.model_dump())


def _readable(error: Mapping[str, Any]) -> dict[str, Any]:
    """FastAPI's error entry (``loc``, ``msg``, ``type``) with the field named in ``msg`` and
    without the echoed input, which may be large or private."""
    loc = tuple(error.get("loc", ()))
    kind = error.get("type", "value_error")
    reason = str(error.get("msg", "invalid"))
    if kind == "json_invalid":
        cause = error.get("ctx", {}).get("error", "")
        message = f"body: not valid JSON ({cause})" if cause else "body: not valid JSON"
    else:
        reason = readable_reason(error)
        field = ".".join(str(part) for part in loc[1:]) or (str(loc[0]) if loc else "request")
        message = f"{field}: {reason}"
    return {"loc": list(loc), "msg": message, "type": kind}


def _package_version() -> str:
    try:
        return importlib.metadata.version("engram")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
