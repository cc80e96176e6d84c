"""An agent's cognitive system and surprise trace as the query service answers it (seed 003's
``get_cognitive_system()`` and ``get_surprise_trace()``), apart from the route that serves it,
so the Python client reads the answer without loading FastAPI (~0.3 s of its import)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from schemas.memory_events import CognitiveSystem, SurpriseReading

__all__ = ["AgentSurprise", "surprise_of"]


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
