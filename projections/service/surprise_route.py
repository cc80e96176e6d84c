"""Seed 003's SurprisePlugin reads over HTTP: an agent's cognitive system and surprise trace.

``get_cognitive_system()`` and ``get_surprise_trace()`` of seed 003 (section 2b, P1) read the
agent's latest surprise reading, which the processor carries on each recording and Redis keeps
per agent. Without one (no strategy for the agent type, or nothing read yet) the answer is the
seed's safe defaults: arousal 0.0, System 1, no trace.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import FastAPI, Path

from projections.service.http_auth import Guarded
from projections.surprise import AgentSurprise, surprise_of
from schemas.envelope import AGENT_ID_RULE, AgentId
from schemas.memory_events import SurpriseReading

ReadSurprise = Callable[[str], Awaitable[SurpriseReading | None]]


def add_surprise_route(app: FastAPI, read: ReadSurprise, guard: Guarded) -> None:
    @app.get(
        "/v1/agents/{agent_id}/surprise",
        dependencies=guard.dependencies("read"),
        responses=guard.responses(),
        tags=["surprise"],
        summary="The agent's cognitive system and surprise trace (seed 003)",
        description="The agent's latest surprise reading: System 1 or 2, its arousal, and the "
        "trace of what its surprise strategy observed and expected. Without a reading yet, "
        "seed 003's safe defaults: System 1, arousal 0, no trace.",
    )
    async def surprise(
        agent_id: Annotated[
            AgentId, Path(description=f"The agent: {AGENT_ID_RULE}.", examples=["H001"])
        ],
    ) -> AgentSurprise:
        return surprise_of(agent_id, await read(agent_id))
