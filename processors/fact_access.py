"""Seed 000's ``access_count`` of a fact: ``search(query, limit)`` returns the relevant facts
and "tracks fact usage for importance scoring" by counting, on each, the searches that
returned it.

A search is a facts read with a query, recorded by the query service on ``memory.access``
(a :class:`~schemas.memory_events.MemoryRetrieved` of mode
:data:`~schemas.memory_events.FACTS_READ_MODE`, one item per fact returned). The worker
reads it in the agent's partition like any retrieval, and each fact it returned that the agent
still holds as current (:attr:`processors.learned_state.LearnedState.facts`) gets one more: a
:class:`~schemas.learned_events.FactAccessed` carrying the fact's new total, folded into the
state like every learned event, so a takeover and a replay count the same. A superseded fact,
one past the state's bound, or an id the agent never stated counts nothing. Retrievals of
memories never come here: only facts reads do any work.
"""

from __future__ import annotations

import json

from processors.learning import fold_learning
from processors.recording import AgentMemoryState
from schemas.learned_events import FactAccessed
from schemas.memory_events import (
    FACTS_READ_MODE,
    MemoryRetrieved,
    SourcePosition,
    derived_event_id,
)


def _read_key(read: MemoryRetrieved, position: SourcePosition | None) -> str:
    """What names one search's counts: the read, and where its record is in the log, so that a
    record the recorder delivered twice (its producer is not idempotent), which counts twice,
    derives counts of ids of their own rather than two events under one id."""
    key = f"{read.agent_id}/{read.event_id}"
    if position is not None:
        key += f"@{position.topic}:{position.partition}:{position.offset}"
    return key


def is_facts_read(retrieval: MemoryRetrieved) -> bool:
    return retrieval.mode == FACTS_READ_MODE


def on_facts_read(
    read: MemoryRetrieved,
    state: AgentMemoryState,
    config_version: str,
    position: SourcePosition | None = None,
) -> tuple[list[FactAccessed], AgentMemoryState]:
    """The counts a facts read adds, best ranked first, and the agent's state after them
    (folded by the fold a takeover uses, :func:`processors.learning.fold_learning`)."""
    learned = state.learned
    if not learned.facts or not read.results:
        return [], state
    held = {fact_id: key for key, fact_id in learned.facts.items()}
    out: list[FactAccessed] = []
    seen: set[str] = set()
    for item in sorted(read.results, key=lambda r: r.rank):
        key = held.get(item.memory_id)
        if item.store != "facts" or key is None or item.memory_id in seen:
            continue
        seen.add(item.memory_id)
        subject, attribute = json.loads(key)
        count = learned.access_counts.get(item.memory_id, 0) + 1
        accessed = FactAccessed(
            event_id=derived_event_id(_read_key(read, position), f"fact.accessed:{item.memory_id}"),
            agent_id=read.agent_id,
            occurred_at=read.occurred_at,
            step=read.step,
            year=read.year,
            caused_by=read.event_id,
            source_position=position,
            config_version=config_version,
            fact_id=item.memory_id,
            subject=subject,
            attribute=attribute,
            access_count=count,
            revision=count - 1,
            rank=item.rank,
            score=item.score,
        )
        out.append(accessed)
        state = fold_learning(state, accessed)
    return out, state
