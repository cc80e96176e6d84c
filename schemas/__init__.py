"""Event contracts of Engram: what agents publish and what the processors derive.

The wire format is JSON (orjson); every event names its ``event_type`` and ``schema_version``
explicitly so that identity never depends on a Python import path.
"""

from schemas.agent_events import AgentEvent, Decision, Feedback, Observation
from schemas.codec import (
    DecodeError,
    decode_agent_event,
    decode_derived_event,
    encode_event,
)
from schemas.deadletter import DeadLetter
from schemas.memory_events import (
    Destination,
    ImportanceInputs,
    MemoryForgotten,
    MemoryRecorded,
    SourcePosition,
)
from schemas.topics import Topics

__all__ = [
    "AgentEvent",
    "DeadLetter",
    "Decision",
    "DecodeError",
    "Destination",
    "Feedback",
    "ImportanceInputs",
    "MemoryForgotten",
    "MemoryRecorded",
    "Observation",
    "SourcePosition",
    "Topics",
    "decode_agent_event",
    "decode_derived_event",
    "encode_event",
]
