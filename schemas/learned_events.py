"""What the processors learn from decisions, feedback, stated facts and searches of facts
(schema version 1 each, ``fact.stated`` 2): procedures with a success rate (seed 000), cached
plans with a score (seed 002), facts with their validity and how often a search returned
them (seed 000), and feedback counted on a memory.

Each event carries the learned item's whole new state (rates, counts, scores) and a
``revision`` that grows with every change of that item, so a projection applies any of them on
its own, idempotently, and an older one applied again never takes a newer one back. They are
logged on ``memory.lifecycle`` at their source's partition, like every derived event: a replay,
a reprocess, ``engram history`` and ``forget-agent`` treat them as they treat the others.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from schemas.agent_events import PlanAction
from schemas.derived_fields import Embedding, SourcePosition
from schemas.envelope import Event, EventId

Rate = Annotated[float, Field(ge=0.0, le=1.0)]


class LearnedChange(Event):
    """Base of the learned events: every one names the agent event that caused it."""

    caused_by: EventId = Field(
        description="The decision, feedback or observation learned from, or the facts read "
        "(a record on ``memory.access``)."
    )
    source_position: SourcePosition | None = None
    config_version: str


class AttachedText(BaseModel):
    """The text of an upvoted decision, attached to its procedure so recall finds the skill by
    what it was used for (seed 002's "additional prompt embeddings")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    embedding: Embedding
    slot: int = Field(ge=0, description="Where it is kept: the oldest attachment is replaced.")
    decision_event_id: EventId


ProcedureChange = Literal["created", "invoked", "outcome"]


class ProcedureChanged(LearnedChange):
    """A procedure of the agent (a decision's ``skill``) was created, invoked by a decision, or
    updated by feedback on one of its decisions (seed 000: success rate by EMA)."""

    event_type: Literal["procedure.changed"] = "procedure.changed"
    name: str
    change: ProcedureChange
    success_rate: Rate
    usage_count: int = Field(ge=0)
    revision: int = Field(ge=0)
    description: str | None = Field(
        default=None, description="Set when the procedure is created: the decision's text."
    )
    description_embedding: Embedding | None = Field(
        default=None, description="Set when the procedure is created."
    )
    decision_event_id: EventId
    decision_text: str | None = Field(
        default=None,
        description="Created and invoked: the beginning of the decision's prompt (its text "
        "without one), which an upvote attaches to the procedure.",
    )
    outcome: float | None = Field(
        default=None, description="1 for a success, 0 for a failure (change outcome)."
    )
    signal: float | None = None
    alpha: float | None = None
    attached: AttachedText | None = None
    attached_count: int = Field(default=0, ge=0)


PlanChange = Literal["cached", "scored", "evicted"]


class PlanChanged(LearnedChange):
    """A decision's plan entered the cache, was scored by feedback, or was evicted (seed 002).

    ``similarity_threshold`` (tau) and ``score_threshold`` (epsilon) are the agent type's when
    the plan was cached: a lookup reads them from the projection, needing no configuration."""

    event_type: Literal["plan.changed"] = "plan.changed"
    plan_id: str
    change: PlanChange
    decision_event_id: EventId
    score: Rate
    revision: int = Field(ge=0)
    similarity_threshold: Rate
    score_threshold: Rate
    reward: float | None = None
    alpha: float | None = None
    reason: Literal["score", "capacity"] | None = Field(
        default=None, description="Why it was evicted."
    )
    skill: str | None = None
    prompt: str | None = None
    prompt_embedding: Embedding | None = None
    actions: tuple[PlanAction, ...] = ()


class FactStated(LearnedChange):
    """A fact entered the agent's semantic memory; ``supersedes`` names the fact on the same
    subject and attribute it replaces, whose validity ends at this one's ``valid_from``."""

    schema_version: int = 2
    """Version 2 added ``confidence``."""
    event_type: Literal["fact.stated"] = "fact.stated"
    fact_id: str
    subject: str
    attribute: str
    value: str
    confidence: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="How certain the agent is of it: the statement's, or 1.0 for a derived fact.",
    )
    valid_from: AwareDatetime
    origin: Literal["stated", "derived"] = Field(
        default="stated",
        description="stated: an observation's ``fact``; derived: a pattern of the agent's "
        "observations at year-end consolidation.",
    )
    source_event_ids: tuple[EventId, ...]
    supersedes: str | None = None
    embedding: Embedding


class MemoryRated(LearnedChange):
    """Feedback counted on a memory. The counts are the memory's totals after it; a summary's
    feedback also enters its Memory Utility Score (``processors.memory_feedback``)."""

    event_type: Literal["memory.rated"] = "memory.rated"
    memory_id: str
    target_event_id: EventId
    signal: float = Field(ge=-1.0, le=1.0)
    level: Literal[0, 1, 2] = 0
    upvotes: int = Field(ge=0)
    downvotes: int = Field(ge=0)
    revision: int = Field(ge=0)


class FactAccessed(LearnedChange):
    """A search of the agent's facts returned this fact while the agent held it as current:
    seed 000's ``access_count`` ("Track fact usage for importance scoring"). Derived from a
    facts read with a query on ``memory.access`` (``caused_by`` its event id, the position
    its record's), one per fact it returned. ``access_count`` is the fact's total after it."""

    event_type: Literal["fact.accessed"] = "fact.accessed"
    fact_id: str
    subject: str
    attribute: str
    access_count: int = Field(ge=1)
    revision: int = Field(ge=0, description="access_count - 1: one more with every search.")
    rank: int = Field(ge=1, description="Where the search ranked the fact.")
    score: float | None = Field(default=None, description="Its similarity to the query.")


LearnedEvent = ProcedureChanged | PlanChanged | FactStated | MemoryRated | FactAccessed

__all__ = [
    "AttachedText",
    "FactAccessed",
    "FactStated",
    "LearnedChange",
    "LearnedEvent",
    "MemoryRated",
    "PlanChange",
    "PlanChanged",
    "ProcedureChange",
    "ProcedureChanged",
]
