"""The envelope every event carries: identity, owner, time and version."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

AGENT_ID_PATTERN = r"^[A-Za-z0-9_.:@\-]+$"
AgentId = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=AGENT_ID_PATTERN)]
"""Agent ids become Redis keys and Qdrant payload values, so whitespace and slashes are refused."""

AGENT_ID_RULE = "1-200 characters: letters, digits and _ . : @ - (no spaces or slashes)"
"""What :data:`AgentId` accepts, in words, for the docs and the messages that refuse one."""

EventId = Annotated[str, StringConstraints(min_length=1, max_length=128)]
NOT_WHITESPACE = (
    "[^\\t-\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
)
"""A character stripping keeps: not Unicode White_Space, which pydantic strips. Spelled out
rather than ``\\S``, whose meaning differs between regex dialects (a JSON Schema's is ECMA's)."""

Tag = Annotated[
    str,
    StringConstraints(min_length=1, max_length=64, strip_whitespace=True, pattern=NOT_WHITESPACE),
]
"""Stripped of surrounding whitespace; the pattern tells a schema's reader that whitespace
alone is not a tag, as the length after stripping does here."""

TIME_BOUND = 2**53
"""Years and steps lie within plus or minus 2^53: exact in a double (a JSON parser's number, a
Lua script's, a Qdrant range), far beyond any simulation, and inside the 64-bit integers a
worker's JSON decoder reads. Unbounded, a publisher would accept a year the worker then has to
dead-letter."""

SimulationTime = Annotated[int, Field(ge=-TIME_BOUND, le=TIME_BOUND)]


def _is_number_text(value: str) -> bool:
    try:
        float(value)  # "2026", " -5", "1.7e9": what pydantic would read as Unix seconds
    except ValueError:
        return False
    return True


def _not_a_number(value: Any) -> Any:
    if isinstance(value, (int, float)) or (isinstance(value, str) and _is_number_text(value)):
        raise ValueError(
            f"{value!r:.40} is a number, not a time: give ISO 8601 with an offset, "
            "such as 2026-11-22T10:00:00+00:00"
        )
    return value


TimeAsked = Annotated[AwareDatetime, BeforeValidator(_not_a_number)]
"""A time a request names (a retrieval's current time, an as-of, a filter's bounds), as ISO
text only: pydantic reads a number as Unix seconds, so ``2026`` meant as a year, or an offset
meant as an as-of, became 1970-01-01T00:33:46Z and answered about another time, silently."""

MAX_CONTENT_CHARS = 16_384
"""A memory is a sentence or a paragraph; anything larger is almost surely a bug upstream."""


def new_event_id() -> str:
    return str(uuid.uuid4())


def utc_now() -> datetime:
    return datetime.now(UTC)


class Event(BaseModel):
    """Base of all events: frozen and strict about unknown fields, so typos fail loudly."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)

    schema_version: int = 1
    event_id: EventId = Field(
        default_factory=new_event_id,
        description=(
            "Unique within the agent. A record on an agent topic may leave it out: it is then "
            "derived from the record's log position (topic, partition, offset), so a "
            "redelivery or a reprocess gives the record the same id."
        ),
    )
    agent_id: AgentId
    occurred_at: AwareDatetime = Field(
        default_factory=utc_now,
        description=(
            "When it happened, with a timezone. A record on an agent topic may leave it out: "
            "the record's timestamp in the log is then used."
        ),
    )
    step: SimulationTime | None = Field(default=None, ge=0, description="Simulation step, if any.")
    year: SimulationTime | None = Field(default=None, description="Simulation year, if any.")

    def wire(self) -> dict[str, Any]:
        """The JSON-ready dict that goes on the wire (every field, defaults included)."""
        return self.model_dump(mode="json")
