"""The codec's dispatch on ``event_type`` knows every type of the unions it decodes, and refuses
any other as ``unknown_event_type``: a type added to a union without its decoder fails here,
and an unknown type is never decoded as another."""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

import orjson
import pytest
from pydantic import BaseModel

from schemas.agent_events import AgentEvent
from schemas.codec import CURRENT_VERSIONS, DecodeError, decode_agent_event, decode_derived_record
from schemas.memory_events import DerivedRecord, ForgetAgent, MemoryRetrieved, ScheduleTick

AGENT_MODELS: tuple[type[BaseModel], ...] = get_args(AgentEvent)
DERIVED_MODELS: tuple[type[BaseModel], ...] = get_args(DerivedRecord)


def event_type(model: type[BaseModel]) -> str:
    name = model.model_fields["event_type"].default
    assert isinstance(name, str)
    return name


def kind_of_failure(decode: Callable[[bytes], object], name: str) -> str:
    with pytest.raises(DecodeError) as caught:
        decode(orjson.dumps({"event_type": name}))
    return caught.value.kind


@pytest.mark.parametrize(
    "model",
    [*AGENT_MODELS, *DERIVED_MODELS, ScheduleTick, ForgetAgent, MemoryRetrieved],
    ids=lambda m: m.__name__,
)
def test_every_event_type_has_a_current_version(model: type[BaseModel]) -> None:
    assert event_type(model) in CURRENT_VERSIONS


@pytest.mark.parametrize("model", DERIVED_MODELS, ids=lambda m: m.__name__)
def test_every_derived_record_type_is_decoded_by_its_own_model(model: type[BaseModel]) -> None:
    """Known, so an empty payload is invalid (its fields missing), not of an unknown type."""
    assert kind_of_failure(decode_derived_record, event_type(model)) == "invalid"


@pytest.mark.parametrize("model", AGENT_MODELS, ids=lambda m: m.__name__)
def test_every_agent_event_type_is_decoded_by_its_own_model(model: type[BaseModel]) -> None:
    assert kind_of_failure(decode_agent_event, event_type(model)) == "invalid"


@pytest.mark.parametrize("name", ["memory.reinforced", "memory.retrieved", "observation"])
def test_a_type_the_derived_log_does_not_hold_is_refused(name: str) -> None:
    assert kind_of_failure(decode_derived_record, name) == "unknown_event_type"


@pytest.mark.parametrize("name", ["memory.reinforced", "memory.recorded", "schedule.tick"])
def test_a_type_the_agent_topics_do_not_hold_is_refused(name: str) -> None:
    assert kind_of_failure(decode_agent_event, name) == "unknown_event_type"
