"""The agent event a learned event comes from: its envelope and a deterministic id."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from processors.embedding import Embedder
from schemas.agent_events import AgentEvent
from schemas.memory_events import SourcePosition, derived_event_id, memory_id_for


@dataclass(frozen=True)
class Cause:
    event: AgentEvent
    position: SourcePosition | None
    config_version: str
    embedder: Embedder

    def event_id(self, what: str) -> str:
        """The same for the same agent event and change: a redelivery logs the same ids."""
        return derived_event_id(memory_id_for(self.event.agent_id, self.event.event_id), what)

    def envelope(self) -> dict[str, Any]:
        event = self.event
        return {
            "agent_id": event.agent_id,
            "occurred_at": event.occurred_at,
            "step": event.step,
            "year": event.year,
            "caused_by": event.event_id,
            "source_position": self.position,
            "config_version": self.config_version,
        }
