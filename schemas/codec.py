"""One codec for the wire: orjson bytes in and out, with upcasting of old schema versions.

Decoding never raises anything but :class:`DecodeError`, whose ``kind`` is what the dead-letter
record reports, so a poison record is always classified and never crashes a processor.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from schemas.agent_events import AGENT_EVENT_TYPES, AgentEvent
from schemas.errors import EngramError
from schemas.learned_events import (
    FactAccessed,
    FactStated,
    MemoryRated,
    PlanChanged,
    ProcedureChanged,
)
from schemas.memory_events import (
    AgentForgotten,
    ConsolidationCompleted,
    DerivedEvent,
    DerivedRecord,
    DerivedUpTo,
    ForgetAgent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
    ScheduleTick,
)
from schemas.readable_errors import readable_reason

_M = TypeVar("_M", bound=BaseModel)

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

CURRENT_VERSIONS: dict[str, int] = {
    "observation": 2,
    "decision": 2,
    "feedback": 2,
    "memory.recorded": 2,
    "memory.promoted": 1,
    "memory.summarised": 1,
    "memory.forgotten": 2,
    "memory.consolidated": 1,
    "memory.retrieved": 2,
    "schedule.tick": 1,
    "agent.forget": 1,
    "memory.agent_forgotten": 2,
    "memory.logged": 1,
    "procedure.changed": 1,
    "plan.changed": 1,
    "fact.stated": 2,
    "memory.rated": 1,
    "fact.accessed": 1,
}


def _forgotten_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 did not say where the agent's next life starts."""
    return {**payload, "next_seq": None}


def _unchanged(payload: dict[str, Any]) -> dict[str, Any]:
    """A version that only added optional fields: the old payload reads as it is."""
    return payload


UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("memory.agent_forgotten", 1): _forgotten_v1_to_v2,
    ("memory.recorded", 1): _unchanged,
    ("observation", 1): _unchanged,
    ("decision", 1): _unchanged,
    ("feedback", 1): _unchanged,
    ("fact.stated", 1): _unchanged,
    ("memory.forgotten", 1): _unchanged,
    ("memory.retrieved", 1): _unchanged,
}
"""``(event_type, version) -> step to version + 1``. Register one for every bump of a version."""

_DERIVED_TYPES: dict[str, type[DerivedRecord]] = {
    "memory.recorded": MemoryRecorded,
    "memory.promoted": MemoryPromoted,
    "memory.summarised": MemorySummarised,
    "memory.forgotten": MemoryForgotten,
    "memory.consolidated": ConsolidationCompleted,
    "memory.agent_forgotten": AgentForgotten,
    "memory.logged": DerivedUpTo,
    "procedure.changed": ProcedureChanged,
    "plan.changed": PlanChanged,
    "fact.stated": FactStated,
    "memory.rated": MemoryRated,
    "fact.accessed": FactAccessed,
}
"""``event_type`` -> model of every :data:`DerivedRecord`; a type missing here is refused as
``unknown_event_type``, never decoded as another (a unit test holds it to the union)."""


class DecodeError(EngramError, ValueError):
    """A record that cannot become an event; ``kind`` classifies it for the dead-letter topic."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def encode_event(event: BaseModel) -> bytes:
    """Compact JSON, straight from pydantic's serializer: the same bytes as ``orjson`` of
    ``model_dump(mode="json")`` without building the dict in between (every derived event
    is encoded on the hot path)."""
    encoded: bytes = event.__pydantic_serializer__.to_json(event)
    return encoded


def _shown(value: object, chars: int = 80) -> str:
    """``repr(value)``, cut: a reason quotes what it refuses, not a megabyte of it."""
    shown = repr(value)
    return shown if len(shown) <= chars else f"{shown[:chars]}... ({len(shown):,} characters)"


def upcast(payload: dict[str, Any]) -> dict[str, Any]:
    """Bring a payload of an old schema version up to the current one, step by step."""
    event_type = payload.get("event_type")
    if not isinstance(event_type, str) or event_type not in CURRENT_VERSIONS:
        raise DecodeError("unknown_event_type", f"unknown event_type {_shown(event_type)}")
    version = payload.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise DecodeError(
            "invalid", f"schema_version must be a positive integer, not {_shown(version)}"
        )
    current = CURRENT_VERSIONS[event_type]
    if version > current:
        raise DecodeError(
            "future_version",
            f"{event_type} schema_version {version} is newer than this processor knows "
            f"({current}); upgrade Engram to read it",
        )
    while version < current:
        step = UPCASTERS.get((event_type, version))
        if step is None:
            raise DecodeError("invalid", f"no upcaster for {event_type} v{version}")
        payload = step(payload)
        version += 1
        payload["schema_version"] = version
    return payload


def _load_object(raw: bytes) -> dict[str, Any]:
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("not_json", f"not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise DecodeError("invalid", f"expected a JSON object, got {type(payload).__name__}")
    return payload


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"])[:200] or "(root)"
        parts.append(f"{where}: {readable_reason(err)}")
    more = exc.error_count() - 5
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


RECORD_NAMESPACE = uuid.UUID("a7d3c1e4-5b2f-4c8e-9f10-6e2b8d4a7c35")
"""Namespace of the event ids given to records that came without one."""


@dataclass(frozen=True)
class RecordOrigin:
    """Where a record sits in the log, and the time the log gave it.

    A producer that is not Engram's publisher may leave out ``event_id`` and ``occurred_at``
    (the exported JSON Schema makes them optional). Both are then taken from the record itself,
    never from the processor: a uuid of its position and its timestamp. A redelivery or a
    reprocess of the same record so gives it the same identity and the same age, which a fresh
    uuid or the parse time would not."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None

    @property
    def event_id(self) -> str:
        return str(uuid.uuid5(RECORD_NAMESPACE, f"{self.topic}/{self.partition}/{self.offset}"))

    @property
    def occurred_at(self) -> datetime | None:
        """The record's timestamp as a time; a :class:`DecodeError` past the last date Python
        knows (year 9999): any client may set the timestamp, and the ``ValueError`` it raised
        there ended the worker on every attempt, so no later record was processed."""
        if self.timestamp_ms is None or self.timestamp_ms < 0:
            return None
        try:
            return datetime.fromtimestamp(self.timestamp_ms / 1000, UTC)
        except (ValueError, OverflowError, OSError):
            raise DecodeError(
                "invalid",
                f"the record gives no occurred_at, and its timestamp in the log "
                f"({self.timestamp_ms} ms) is past any date",
            ) from None


def _complete_from_record(
    payload: dict[str, Any], expected_type: str | None, origin: RecordOrigin | None
) -> dict[str, Any]:
    """Fill what a record may leave out from where it is: its topic says its type (a type that
    contradicts the topic is refused later, by name), its position and timestamp its identity
    and time (:class:`RecordOrigin`)."""
    if "event_type" not in payload and expected_type is not None:
        payload["event_type"] = expected_type
    if origin is not None:
        if "event_id" not in payload:
            payload["event_id"] = origin.event_id
        if "occurred_at" not in payload and (at := origin.occurred_at) is not None:
            payload["occurred_at"] = at.isoformat()
    return payload


def decode_agent_event(
    raw: bytes, *, expected_type: str | None = None, origin: RecordOrigin | None = None
) -> AgentEvent:
    """Bytes from an agent topic to a validated event, or :class:`DecodeError`.

    ``expected_type`` is the type the topic carries, ``origin`` where the record was read: what
    the record leaves out of the envelope is taken from them (:func:`_complete_from_record`)."""
    payload = upcast(_complete_from_record(_load_object(raw), expected_type, origin))
    event_type = payload["event_type"]
    if event_type not in AGENT_EVENT_TYPES:
        raise DecodeError("unknown_event_type", f"{event_type!r} is not an agent event")
    if expected_type is not None and event_type != expected_type:
        raise DecodeError(
            "wrong_topic", f"a {event_type} event on the topic for {expected_type} events"
        )
    try:
        # The concrete model, not the union adapter: a third of the cost on the hot path.
        event: AgentEvent = AGENT_EVENT_TYPES[event_type].model_validate(payload)  # type: ignore[assignment]
        return event
    except ValidationError as exc:
        raise DecodeError("invalid", _validation_message(exc)) from None


def decode_derived_record(raw: bytes) -> DerivedRecord:
    """Bytes from ``memory.items`` or ``memory.lifecycle`` to a derived event or a batch's
    "logged up to" marker."""
    payload = upcast(_load_object(raw))
    model = _DERIVED_TYPES.get(payload["event_type"])
    if model is None:
        raise DecodeError("unknown_event_type", f"{payload['event_type']!r} is not derived")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise DecodeError("invalid", _validation_message(exc)) from None


def decode_derived_event(raw: bytes) -> DerivedEvent:
    """Bytes from ``memory.items`` or ``memory.lifecycle`` to a derived event; a marker is
    refused (``kind`` "marker"): readers that meet markers use :func:`decode_derived_record`."""
    record = decode_derived_record(raw)
    if isinstance(record, DerivedUpTo):
        raise DecodeError("marker", "a memory.logged marker, not a derived event")
    return record


def _decode_as(raw: bytes, model: type[_M], event_type: str) -> _M:
    return _decode_one_of(raw, {event_type: model}, f"{event_type} events")


def _decode_one_of(raw: bytes, models: Mapping[str, type[_M]], where: str) -> _M:
    """The record as the model of its ``event_type`` among ``models``; any other type is on
    the wrong topic (``where`` names what the topic holds)."""
    payload = upcast(_load_object(raw))
    model = models.get(payload["event_type"])
    if model is None:
        raise DecodeError("wrong_topic", f"a {payload['event_type']} event where {where} go")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise DecodeError("invalid", _validation_message(exc)) from None


def decode_tick(raw: bytes) -> ScheduleTick:
    """Bytes from ``memory.schedule`` to a tick, or :class:`DecodeError`."""
    return _decode_as(raw, ScheduleTick, "schedule.tick")


def decode_schedule(raw: bytes) -> ScheduleTick | ForgetAgent:
    """Bytes from ``memory.schedule`` (ticks and forget-agent commands), or :class:`DecodeError`."""
    models: dict[str, type[ScheduleTick | ForgetAgent]] = {
        "schedule.tick": ScheduleTick,
        "agent.forget": ForgetAgent,
    }
    return _decode_one_of(raw, models, "ticks and commands")


def decode_retrieval(raw: bytes) -> MemoryRetrieved:
    """Bytes from ``memory.access`` to a retrieval record, or :class:`DecodeError`."""
    return _decode_as(raw, MemoryRetrieved, "memory.retrieved")
