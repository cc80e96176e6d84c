"""The read model of one memory, as the projections store it and retrieval scores it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from schemas.memory_events import Destination, MemoryRecorded


class StoredMemory(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    memory_id: str
    agent_id: str
    agent_type: str = "default"
    content: str
    importance: float
    destination: Destination
    seq: int
    occurred_at: datetime
    step: int | None = None
    year: int | None = None
    tags: tuple[str, ...] = ()
    kind: str | None = None
    source_event_id: str
    source_event_type: str
    similarity: float | None = None
    """Cosine similarity to the query vector, when the store was searched with one."""

    @classmethod
    def from_recorded(cls, event: MemoryRecorded) -> StoredMemory:
        return cls(
            memory_id=event.memory_id,
            agent_id=event.agent_id,
            agent_type=event.agent_type,
            content=event.content,
            importance=event.importance,
            destination=event.destination,
            seq=event.seq,
            occurred_at=event.occurred_at,
            step=event.step,
            year=event.year,
            tags=event.tags,
            kind=event.kind,
            source_event_id=event.source_event_id,
            source_event_type=event.source_event_type,
        )

    def payload(self) -> dict[str, Any]:
        """JSON-ready fields, without the query-time similarity."""
        return self.model_dump(mode="json", exclude={"similarity"})
