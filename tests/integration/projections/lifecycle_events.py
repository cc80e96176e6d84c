"""Promoted, summarised, consolidated and utility-forgotten events for the projection tests.

Built field by field as ``processors.lifecycle`` builds them, rather than by running the
lifecycle rules: the stores are tested on the shape of these events, and would otherwise depend
on when the rules (year ends, ticks, thresholds) decide to emit one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from processors.embedding import HashingEmbedder
from schemas.memory_events import (
    AgentForgotten,
    ConsolidationCompleted,
    ConsolidationOutcome,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemorySummarised,
    MemoryWritten,
    MusBreakdown,
    PromotionDecision,
    SourcePosition,
    derived_event_id,
    encode_vector,
)

EMBEDDER = HashingEmbedder()

_KEPT_BY_A_COPY = (
    "agent_id",
    "agent_type",
    "occurred_at",
    "step",
    "year",
    "source_event_id",
    "source_event_type",
    "seq",
    "content",
    "tags",
    "kind",
    "importance",
    "embedding",
    "embedder",
    "config_version",
)


def promoted(
    original: MemoryRecorded, *, year: int = 1, position: SourcePosition | None = None
) -> MemoryPromoted:
    """The episodic copy of a working memory: an id of its own, the original's seq and source."""
    memory_id = derived_event_id(original.memory_id, "promoted")
    return MemoryPromoted(
        event_id=derived_event_id(memory_id, "promoted"),
        memory_id=memory_id,
        promoted_from=original.memory_id,
        decision=PromotionDecision(rule="threshold", consolidated_year=year),
        destination="episodic",
        source_position=position,
        **{name: getattr(original, name) for name in _KEPT_BY_A_COPY},
    )


def summarised(
    covered: Sequence[MemoryWritten],
    *,
    level: Literal[1, 2],
    content: str,
    seq: int,
    trigger_event_id: str,
    position: SourcePosition | None = None,
) -> MemorySummarised:
    """A summary of ``covered``, triggered by the event ``trigger_event_id`` (its source)."""
    agent_id = covered[0].agent_id
    memory_id = derived_event_id(trigger_event_id, f"l{level}:{agent_id}")
    last = covered[-1]
    return MemorySummarised(
        event_id=derived_event_id(memory_id, "summarised"),
        memory_id=memory_id,
        agent_id=agent_id,
        agent_type=last.agent_type,
        occurred_at=last.occurred_at,
        step=last.step,
        year=last.year,
        source_event_id=trigger_event_id,
        source_event_type="observation",
        source_position=position,
        seq=seq,
        content=content,
        importance=max(m.importance for m in covered),
        destination="episodic",
        level=level,
        embedding=encode_vector(EMBEDDER.embed(content)),
        embedder=EMBEDDER.id,
        config_version=last.config_version,
        summarises=tuple(m.memory_id for m in covered),
        covers_upto_seq=max(m.seq for m in covered),
        summariser="test",
        trigger="step",
    )


def consolidated(
    agent_id: str,
    copies: Sequence[MemoryPromoted],
    *,
    year: int = 1,
    position: SourcePosition | None = None,
) -> ConsolidationCompleted:
    """The audit record of a year end that promoted ``copies``."""
    return ConsolidationCompleted(
        agent_id=agent_id,
        consolidated_year=year,
        considered=tuple(
            ConsolidationOutcome(
                memory_id=copy.promoted_from, importance=copy.importance, outcome="promoted"
            )
            for copy in copies
        ),
        promoted=tuple(copy.memory_id for copy in copies),
        working_after=len(copies),
        episodic_after=len(copies),
        caused_by=derived_event_id(agent_id, f"year-end:{year}"),
        source_position=position,
        config_version="test",
    )


def forgotten_by_utility(
    summary: MemorySummarised, *, position: SourcePosition | None = None
) -> MemoryForgotten:
    """The pruning of a summary whose utility fell below the threshold (seed 001)."""
    return MemoryForgotten(
        event_id=derived_event_id(summary.memory_id, "forgotten"),
        agent_id=summary.agent_id,
        memory_id=summary.memory_id,
        destination="episodic",
        reason="utility",
        level=summary.level,
        caused_by=derived_event_id(summary.agent_id, "tick"),
        source_position=position,
        mus=MusBreakdown(
            score=0.01,
            retrieval_frequency=0.0,
            relevance=0.0,
            recency=0.05,
            threshold=0.1,
            retrievals=0,
            age=30.0,
            age_unit="steps",
        ),
        config_version="test",
    )


def agent_forgotten(
    agent_id: str, *, position: SourcePosition | None = None, next_seq: int | None = None
) -> AgentForgotten:
    """The erasure of every memory of ``agent_id``, derived from a forget-agent command at
    ``position`` (on ``memory.schedule`` in production); ``next_seq`` where the agent's next
    life begins (None: an erasure of the version before it)."""
    command_id = derived_event_id(agent_id, "forget-agent")
    return AgentForgotten(
        event_id=derived_event_id(command_id, "agent_forgotten"),
        agent_id=agent_id,
        key_ids=(f"{agent_id}-key-1",),
        requested_at=datetime(2026, 1, 5, 4, 30, tzinfo=UTC),
        caused_by=command_id,
        source_position=position,
        next_seq=next_seq,
    )
