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
from pydantic import BaseModel, ConfigDict, Field

from projections.service.http_auth import Guarded
from schemas.envelope import AGENT_ID_RULE, AgentId
from schemas.memory_events import CognitiveSystem, SurpriseReading

ReadSurprise = Callable[[str], Awaitable[SurpriseReading | None]]


class AgentSurprise(BaseModel):
    model_config = ConfigDict(frozen=True)

    agent_id: str
    system: CognitiveSystem = Field(
        description="seed 003's get_cognitive_system(): SYSTEM_2 (deliberation) while arousal "
        "is at or above the agent type's threshold, else SYSTEM_1 (habit)."
    )
    arousal: float = Field(description="The latest surprise (0.0 before any reading).")
    trace: SurpriseReading | None = Field(
        description="seed 003's get_surprise_trace(): the latest reading, what the strategy "
        "observed, expected and how probable it found it, with its state; None before the "
        "agent's first reading."
    )


def surprise_of(agent_id: str, reading: SurpriseReading | None) -> AgentSurprise:
    if reading is None:
        return AgentSurprise(agent_id=agent_id, system="SYSTEM_1", arousal=0.0, trace=None)
    return AgentSurprise(
        agent_id=agent_id, system=reading.system, arousal=reading.arousal, trace=reading
    )


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
