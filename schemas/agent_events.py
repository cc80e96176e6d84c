"""What agents publish: observations, decisions and feedback (schema version 2)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    model_validator,
)

from schemas.envelope import MAX_CONTENT_CHARS, NOT_WHITESPACE, Event, EventId, Tag

Content = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_CONTENT_CHARS, pattern=NOT_WHITESPACE)
]
"""Kept as given, but not whitespace alone: that was recorded as a memory of nothing."""


def _encodable(value: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Refuse at the door what the wire codec could not write (integers beyond 64 bits) or
    would write as something else: orjson writes Infinity and NaN as null, so a metadata value
    of 1e400 was recorded as null without a word."""
    try:
        orjson.dumps(value)
    except TypeError as exc:
        raise ValueError(f"not encodable as JSON: {exc}") from None
    where = _non_finite(value, "")
    if where is not None:
        key = where or "''"
        raise ValueError(f"{key}: not a finite number (JSON has no Infinity or NaN)")
    return value


def _non_finite(value: JsonValue, path: str) -> str | None:
    """The path of the first float that is infinite or NaN, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        items: Iterable[tuple[str, JsonValue]] = (
            (f"{path}.{k}" if path else k, v) for k, v in value.items()
        )
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((found for p, v in items if (found := _non_finite(v, p)) is not None), None)


JsonObject = Annotated[dict[str, JsonValue], AfterValidator(_encodable)]


class AgentEventBase(Event):
    """Fields shared by everything an agent publishes.

    ``source`` says how the agent learned it (personal, neighbor, community, abstract: seed 003);
    ``kind`` names an entry of the event-type importance table (``flood.major``: seed 004).
    An explicit ``importance`` always wins over any computed one.
    """

    schema_version: int = 2
    """Version 2 added ``reset_surprise`` and a fact's ``confidence`` (both optional)."""
    agent_type: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "default"
    content: Content
    source: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    kind: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    tags: tuple[Tag, ...] = Field(default=(), max_length=64)
    importance: float | None = Field(default=None, ge=0.0, le=1.0)
    metadata: JsonObject = Field(default_factory=dict)
    reset_surprise: bool = Field(
        default=False,
        description="This event begins a new episode: the agent's surprise strategy starts "
        "again from its initial state, as seed 003's reset_surprise() does, before it reads "
        "the event.",
    )


TYPE_FROM_TOPIC = (
    "May be left out: each agent topic carries one type (agent.observations observations, "
    "agent.decisions decisions, agent.feedback feedback); a record of another type there goes "
    "to the dead-letter topic."
)


Short = Annotated[str, StringConstraints(min_length=1, max_length=256)]

Skill = Annotated[str, StringConstraints(min_length=1, max_length=128)]
"""A decision's skill: the name of the procedure it creates or invokes (the agent's tool)."""


class FactStatement(BaseModel):
    """A fact about the world, "the what without the when" (seed 000's semantic memory): a later
    statement on the same subject and attribute supersedes this one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    subject: Short
    attribute: Short
    value: Annotated[str, StringConstraints(min_length=1, max_length=2048)]
    confidence: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="How certain the agent is of it (seed 000's store_fact: 1.0 unless said). "
        "Stating the fact again with another confidence revises it.",
    )


class PlanAction(BaseModel):
    """One step a decision took: the tool, what it was given, what came back (seed 002)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: Short
    input: Annotated[str, StringConstraints(max_length=4096)] = ""
    observation: Annotated[str, StringConstraints(max_length=4096)] = ""


MAX_PLAN_ACTIONS = 32
"""Steps a cached plan keeps: a plan is replayed by a model, whose context is the limit."""


class Observation(AgentEventBase):
    """Something the agent perceived: a flood, a neighbour elevating, a policy change."""

    event_type: Literal["observation"] = Field(
        default="observation",
        description=TYPE_FROM_TOPIC,
    )
    fact: FactStatement | None = Field(
        default=None,
        description="A fact the observation states; it supersedes the agent's earlier fact on "
        "the same subject and attribute.",
    )


class Decision(AgentEventBase):
    """An action the agent took, with the skill and its parameters (seed 004, section 10)."""

    event_type: Literal["decision"] = Field(
        default="decision",
        description=TYPE_FROM_TOPIC,
    )
    skill: Skill
    parameters: JsonObject = Field(default_factory=dict)
    prompt: Annotated[str, StringConstraints(min_length=1, max_length=4096)] | None = Field(
        default=None,
        description="The request the decision answered; with `actions`, the decision is cached "
        "as a plan keyed by it (seed 002).",
    )
    actions: tuple[PlanAction, ...] = Field(
        default=(), max_length=MAX_PLAN_ACTIONS, description="The steps the decision took."
    )


class Feedback(AgentEventBase):
    """A signal about an earlier event (a reward, an upvote, a claim outcome)."""

    event_type: Literal["feedback"] = Field(
        default="feedback",
        description=TYPE_FROM_TOPIC,
    )
    target_event_id: EventId
    signal: float = Field(ge=-1.0, le=1.0)

    @model_validator(mode="before")
    @classmethod
    def _describe_when_silent(cls, data: Any) -> Any:
        """Feedback often has no words of its own; the memory then says what it was."""
        if isinstance(data, dict) and not data.get("content"):
            data = {**data}
            signal = data.get("signal")
            shown = f"{signal:+.2f}" if isinstance(signal, int | float) else repr(signal)
            data["content"] = f"Feedback {shown} on event {data.get('target_event_id')}"
        return data


AgentEvent = Observation | Decision | Feedback

AGENT_EVENT_TYPES: dict[str, type[AgentEventBase]] = {
    "observation": Observation,
    "decision": Decision,
    "feedback": Feedback,
}


def agent_event_fields(event: AgentEvent) -> dict[str, Any]:
    """The fields a derived memory copies from its source event."""
    return {
        "agent_id": event.agent_id,
        "agent_type": event.agent_type,
        "occurred_at": event.occurred_at,
        "step": event.step,
        "year": event.year,
        "content": event.content,
        "tags": event.tags,
        "kind": event.kind,
    }
