"""The HTTP query service: retrieval as a tool (seed 004, section 8) plus health and readiness.

``create_app`` builds the application around an engine it is given; nothing is built at import
time, so tests and the embedded dev stack each wire their own stores.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from projections.interfaces import ProjectionError
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.models import RetrievalRequest, RetrievalResponse
from schemas.envelope import AgentId

log = logging.getLogger(__name__)

Readiness = Callable[[], Awaitable[dict[str, str]]]
"""Returns ``{backend: "ok" | reason}``; the service is ready when every value is ``"ok"``."""

AGENT_ID_RULE = "1-200 characters: letters, digits and _ . : @ - (no spaces or slashes)"
"""What ``schemas.envelope.AgentId`` accepts, in words, for the docs and the 422 message."""

DESCRIPTION = """\
Retrieval over an agent's memories, as projected from the Engram event log.

* **two_phase** (seed 004): working memories first, most recent first, then an episodic
  supplement ranked by `0.95^age x importance`.
* **weighted** (seed 003, v2): `S = Wr*R + Wi*I + Wc*C + Wrel*Rel - Wint*Int`, defaults
  0.3 / 0.5 / 0.2 / 0 / 0.

Every result carries the breakdown of its score.
"""


class Health(BaseModel):
    status: Literal["alive"] = "alive"


class ReadinessReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: Literal["ready", "not_ready"]
    checks: dict[str, str] = Field(description='Per backend: "ok" or why it is not ready.')


class ServiceError(BaseModel):
    detail: str


def create_app(
    engine: RetrievalEngine,
    *,
    readiness: Readiness | None = None,
    readiness_timeout_s: float = 2.0,
    title: str = "Engram query service",
    version: str | None = None,
) -> FastAPI:
    """The query service over ``engine``. ``readiness`` defaults to pinging the engine's
    stores; a check that fails, or does not answer within ``readiness_timeout_s``, makes
    ``/readyz`` answer 503, so an orchestrator stops routing traffic here."""
    check = readiness or engine.readiness
    app = FastAPI(title=title, version=version or _package_version(), description=DESCRIPTION)

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

    @app.post(
        "/v1/agents/{agent_id}/retrieve",
        tags=["retrieval"],
        summary="Retrieve an agent's most relevant memories",
        description="Ranks the agent's working and episodic memories and returns the best "
        "`top_k`, each with its score breakdown.",
        responses={503: {"model": ServiceError, "description": "A memory store cannot be read."}},
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
        return await engine.retrieve(agent_id, request)

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

    return app


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
        if loc == ("path", "agent_id") and kind == "string_pattern_mismatch":
            reason = f"must be {AGENT_ID_RULE}"
        elif kind == "value_error":
            reason = reason.removeprefix("Value error, ")
        field = ".".join(str(part) for part in loc[1:]) or (str(loc[0]) if loc else "request")
        message = f"{field}: {reason}"
    return {"loc": list(loc), "msg": message, "type": kind}


def _package_version() -> str:
    try:
        return importlib.metadata.version("engram")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
