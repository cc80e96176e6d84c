"""Every payload ever stored decodes, through the readers' own decoders and the upcasters, to a
valid event of the current version, and re-encodes stably.

``tests/fixtures/events/<type>/vN.json`` holds one payload per event type and schema version,
written once by ``make_payloads.py`` from events the production code made; the log keeps
records forever, so a payload of any version may still have to be read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from schemas.codec import (
    CURRENT_VERSIONS,
    decode_agent_event,
    decode_derived_event,
    decode_derived_record,
    decode_retrieval,
    decode_schedule,
    decode_tick,
    encode_event,
)
from schemas.deadletter import DeadLetter
from schemas.json_schema import EXPORTED

FIXTURES = Path(__file__).parents[2] / "fixtures" / "events"
STORED = sorted(FIXTURES.glob("*/v*.json"))

DECODERS: dict[str, Callable[[bytes], BaseModel]] = {
    "observation": decode_agent_event,
    "decision": decode_agent_event,
    "feedback": decode_agent_event,
    "memory.recorded": decode_derived_event,
    "memory.promoted": decode_derived_event,
    "memory.summarised": decode_derived_event,
    "memory.forgotten": decode_derived_event,
    "memory.consolidated": decode_derived_event,
    "memory.logged": decode_derived_record,
    "memory.agent_forgotten": decode_derived_event,
    "procedure.changed": decode_derived_event,
    "plan.changed": decode_derived_event,
    "fact.stated": decode_derived_event,
    "memory.rated": decode_derived_event,
    "fact.accessed": decode_derived_event,
    "schedule.tick": decode_tick,
    "agent.forget": decode_schedule,
    "memory.retrieved": decode_retrieval,
    # The codec has no reader for dead letters (nor a version of them in CURRENT_VERSIONS):
    # what reads them validates the model directly, so no upcaster would run.
    "deadletter": DeadLetter.model_validate_json,
}
"""What each topic's reader decodes a record with."""


def current_version(event_type: str) -> int:
    if event_type in CURRENT_VERSIONS:
        return CURRENT_VERSIONS[event_type]
    default: int = EXPORTED[event_type].model_fields["schema_version"].default
    return default


def fields(event: BaseModel) -> dict[str, Any]:
    return event.model_dump(mode="json")


def test_every_event_type_has_a_stored_payload_of_every_version() -> None:
    """A new type or a version bump needs its stored payload (run ``make_payloads.py``), and
    the payloads of older versions stay: they are what the upcasters are checked against."""
    assert set(EXPORTED) <= set(DECODERS), "every exported type has a reader here"
    assert set(DECODERS) <= set(EXPORTED) | set(CURRENT_VERSIONS), "and nothing else is read"
    assert {p.parent.name for p in STORED} == set(DECODERS)
    for name in DECODERS:
        versions = {int(p.stem.removeprefix("v")) for p in (FIXTURES / name).glob("v*.json")}
        assert versions == set(range(1, current_version(name) + 1)), name


@pytest.mark.parametrize("path", STORED, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_every_stored_payload_decodes_to_a_valid_current_event(path: Path) -> None:
    event_type = path.parent.name
    decode = DECODERS[event_type]
    stored = path.read_bytes()

    event = decode(stored)

    assert fields(event)["event_type"] == event_type
    assert fields(event)["schema_version"] == current_version(event_type)
    assert type(event).model_validate(fields(event)) == event, "valid as it stands"
    wire = encode_event(event)
    assert decode(wire) == event, "re-encoding loses nothing"
    assert encode_event(decode(wire)) == wire, "and is stable"
    if path.stem == f"v{current_version(event_type)}":
        assert set(orjson.loads(stored)) <= set(orjson.loads(wire)), "no stored field dropped"
