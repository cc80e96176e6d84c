"""Feedback on a memory: counted on it, and, for a summary, part of its utility.

Feedback whose ``target_event_id`` is not one of the agent's recent decisions is about a
memory: the memory of that agent event (an observation, a decision), or a summary named by its
memory id. It is counted on the memory (:class:`MemoryRated`: upvotes, downvotes), which the
projection keeps and ``engram history`` shows. On a summary it also enters the Memory Utility
Score that utility pruning reads (seed 001): an upvote with signal ``s`` counts as a retrieval
scored ``s`` at the feedback's time (frequency, relevance and recency rise); a downvote takes
``|s|`` off the summed relevance (which may then fall below 0), so a summary the agent found
useless is pruned sooner, and a downvote never counts as a use. Both are additions (of whole
units, exact in any order) and the latest access a maximum, so feedback and retrievals give
the same utility in any order. A
neutral signal and a target the worker does not hold (forgotten, or never a memory) count
nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from processors.learned_state import LearnedState
from processors.learning_cause import Cause
from processors.recording import AgentMemoryState, SummaryEntry, to_relevance_units
from schemas.agent_events import Feedback
from schemas.learned_events import MemoryRated
from schemas.memory_events import memory_id_for


def target_memory(
    feedback: Feedback, state: AgentMemoryState
) -> tuple[str, Literal[0, 1, 2]] | None:
    """The memory ``feedback`` is about and its level, if the agent's state holds it."""
    target = feedback.target_event_id
    for summary in state.summaries:
        if summary.memory_id == target:
            return target, 1 if summary.level == 1 else 2
    held = {*state.working_ids, *(e.memory_id for e in state.episodic)}
    for candidate in (memory_id_for(feedback.agent_id, target), target):
        if candidate in held:
            return candidate, 0
    return None


def on_feedback(
    feedback: Feedback, state: AgentMemoryState, learned: LearnedState, cause: Cause
) -> MemoryRated | None:
    if feedback.signal == 0:
        return None
    found = target_memory(feedback, state)
    if found is None:
        return None
    memory_id, level = found
    known = learned.ratings.get(memory_id)
    up, down, revision = (
        (0, 0, 0)
        if known is None
        else (
            known.upvotes,
            known.downvotes,
            known.revision + 1,
        )
    )
    return MemoryRated(
        event_id=cause.event_id("rated"),
        memory_id=memory_id,
        target_event_id=feedback.target_event_id,
        signal=feedback.signal,
        level=level,
        upvotes=up + (feedback.signal > 0),
        downvotes=down + (feedback.signal < 0),
        revision=revision,
        **cause.envelope(),
    )


def rated_summaries(
    summaries: tuple[SummaryEntry, ...], event: MemoryRated
) -> tuple[SummaryEntry, ...]:
    """The summaries after ``event``: its MUS effect, if it rated one of them."""
    if event.level == 0 or all(s.memory_id != event.memory_id for s in summaries):
        return summaries
    return tuple(_rated(s, event) if s.memory_id == event.memory_id else s for s in summaries)


def _rated(entry: SummaryEntry, event: MemoryRated) -> SummaryEntry:
    units = entry.relevance_units + to_relevance_units(event.signal)
    if event.signal < 0:
        # Unclamped, so feedback and retrievals commute (a fold meets them in another order).
        return replace(entry, relevance_units=units)
    return replace(
        entry,
        retrievals=entry.retrievals + 1,
        relevance_units=units,
        last_access_step=_later(entry.last_access_step, event.step),
        last_access_year=_later(entry.last_access_year, event.year),
        last_access_at=(
            event.occurred_at
            if entry.last_access_at is None or event.occurred_at > entry.last_access_at
            else entry.last_access_at
        ),
    )


def _later(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)
