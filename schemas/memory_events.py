"""What the processors derive: memories recorded and memories forgotten (schema version 1).

Projections are functions of these events alone (DESIGN.md, invariant 7), so they carry
everything a projection needs, the embedding included: a replay never re-embeds.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field

from schemas.envelope import Event, EventId, Tag

Destination = Literal["working", "episodic"]

MEMORY_NAMESPACE = uuid.UUID("3f0c8a52-6d0b-4b8e-9a51-2a4f9f5c0e11")
"""Namespace of the deterministic ids: the same source event always yields the same memory id."""


def memory_id_for(source_event_id: str) -> str:
    """The memory id (and Qdrant point id) of the memory recorded from one agent event."""
    return str(uuid.uuid5(MEMORY_NAMESPACE, source_event_id))


def derived_event_id(source_event_id: str, what: str) -> str:
    return str(uuid.uuid5(MEMORY_NAMESPACE, f"{what}:{source_event_id}"))


def encode_vector(vector: Sequence[float] | np.ndarray) -> str:
    """A vector as it travels: base64 of little-endian float32 (4x smaller than JSON floats)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(encoded: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(encoded.encode("ascii")), dtype="<f4")


def _check_vector(value: str) -> str:
    if len(value) % 4:
        raise ValueError("embedding must be base64 of float32 values")
    return value


Embedding = Annotated[str, AfterValidator(_check_vector)]
"""Kept encoded on the model: a hot path that only forwards a vector never unpacks it."""


class SourcePosition(BaseModel):
    """Where the source event sits in the log; projections record it as their applied position."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)


class ImportanceInputs(BaseModel):
    """Why a memory got its importance: the audit trail of the score (seeds 003 and 004)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["explicit", "event_table", "emotion_source"]
    table_key: str | None = None
    emotion: str | None = None
    emotion_weight: float | None = None
    source: str | None = None
    source_weight: float | None = None


class MemoryRecorded(Event):
    """A memory entered working or episodic memory."""

    event_type: Literal["memory.recorded"] = "memory.recorded"
    memory_id: str
    agent_type: str
    source_event_id: EventId
    source_event_type: str
    source_position: SourcePosition | None = None
    seq: int = Field(ge=0, description="Per-agent order of recording, for FIFO and recency.")
    content: str
    tags: tuple[Tag, ...] = ()
    kind: str | None = None
    importance: float = Field(ge=0.0, le=1.0)
    destination: Destination
    scoring: ImportanceInputs
    embedding: Embedding
    embedder: str
    config_version: str

    def vector(self) -> np.ndarray:
        return decode_vector(self.embedding)


ForgetReason = Literal["capacity"]


class MemoryForgotten(Event):
    """A memory left a projection. It stays in the log; only the read models drop it."""

    event_type: Literal["memory.forgotten"] = "memory.forgotten"
    memory_id: str
    destination: Destination
    reason: ForgetReason
    caused_by: EventId = Field(description="The event whose recording pushed this memory out.")
    source_position: SourcePosition | None = None
    config_version: str


DerivedEvent = MemoryRecorded | MemoryForgotten

__all__ = [
    "AwareDatetime",
    "DerivedEvent",
    "Destination",
    "Embedding",
    "ImportanceInputs",
    "MemoryForgotten",
    "MemoryRecorded",
    "SourcePosition",
    "decode_vector",
    "derived_event_id",
    "encode_vector",
    "memory_id_for",
]
