"""An agent's memory history: what the log says happened to its memories, as one timeline.

Pure: it takes events already read from the log (with their positions) and reads nothing
itself, so the rendering and the order are tested without a broker; :mod:`streams.eventlog.history`
does the reading.

Order. An agent's derived records sit on one partition of each topic, so within a topic the
offset is the causal order, but offsets of different topics cannot be compared. Entries are
therefore ordered by ``(occurred_at, topic, offset)`` with the topics ranked ``memory.items``
< ``memory.lifecycle`` < ``memory.access``. Derived events carry the time of the agent event
that caused them, so a forgetting sorts right after the recording that pushed its memory out
(same time, items before lifecycle), and a retrieval (stamped by the query service's clock)
after what was recorded at that moment; the counts a facts search left on its facts share its
time and come after it. The order is stable: reading the log again gives the
same timeline. A simulation that stamps its events with simulated times places them on that
clock, while retrievals stay on the service's clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, assert_never, get_args

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from projections.learned.history_text import describe_learned
from schemas.envelope import AgentId
from schemas.errors import BackendUnavailableError
from schemas.learned_events import LearnedChange
from schemas.memory_events import (
    FACTS_READ_MODE,
    AgentForgotten,
    ConsolidationCompleted,
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
)

EntryKind = Literal[
    "recorded",
    "promoted",
    "summarised",
    "forgotten",
    "consolidated",
    "agent_forgotten",
    "retrieved",
    "procedure",
    "plan",
    "fact",
    "rated",
    "fact_accessed",
]
ENTRY_KINDS: tuple[EntryKind, ...] = get_args(EntryKind)

MAX_HISTORY_LIMIT = 10_000
"""The most entries one answer carries; older ones are counted, not listed."""

PREVIEW_CHARS = 60
LISTED_IDS = 5
"""Memory ids a retrieval's text names; ``related_ids`` has them all."""

LoggedEvent = DerivedEvent | MemoryRetrieved

_TOPIC_RANK: dict[EntryKind, int] = {
    "recorded": 0,
    "promoted": 1,
    "summarised": 1,
    "forgotten": 1,
    "consolidated": 1,
    "agent_forgotten": 1,
    "retrieved": 2,
    "procedure": 1,
    "plan": 1,
    "fact": 1,
    "rated": 1,
    "fact_accessed": 3,
}
"""Rank of the topic each kind is written to (items, lifecycle, access), by the topic contract;
a count a facts search left (on lifecycle, at the search's time) comes after the search."""


class LogUnavailableError(BackendUnavailableError):
    """The event log cannot be read; the message says where and why."""


class LogPosition(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)


@dataclass(frozen=True)
class PositionedEvent:
    """An event as read from the log: the position is what orders it and what an audit cites."""

    event: LoggedEvent
    position: LogPosition


class TimelineEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    at: AwareDatetime = Field(description="The event's occurred_at.")
    kind: EntryKind
    memory_id: str | None = Field(
        default=None,
        description="The memory the entry is about (none for consolidations, retrievals "
        "and the forgetting of the agent, which concern several).",
    )
    related_ids: tuple[str, ...] = Field(
        default=(),
        description="Promoted: the working original. Summarised: the memories summarised. "
        "Consolidated: the episodic copies made. Retrieved: the results, best first (of a "
        "facts read, the facts). Fact accessed: the fact and the facts read.",
    )
    text: str = Field(description="What happened, in a line.")
    step: int | None = None
    year: int | None = None
    event_id: str
    position: LogPosition


class AgentHistory(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: AgentId
    entries: tuple[TimelineEntry, ...] = Field(description="Oldest first; the latest ``limit``.")
    counts: dict[EntryKind, int] = Field(description="Per kind, over the whole history.")
    total: int = Field(ge=0, description="Entries in the whole history.")
    truncated: bool = Field(description="True when older entries were left out by ``limit``.")


def build_timeline(
    agent_id: str, events: Iterable[PositionedEvent], *, limit: int | None = None
) -> AgentHistory:
    """The agent's timeline from events read back from the log (other agents' are skipped).

    ``limit`` keeps the latest entries: an audit usually asks what happened last, and the
    counts still cover everything.
    """
    if limit is not None and limit < 1:
        raise ValueError("limit must be at least 1")
    mine = [e for e in events if e.event.agent_id == agent_id]
    entries = sorted((_entry(e) for e in mine), key=_order)
    counts: dict[EntryKind, int] = dict.fromkeys(ENTRY_KINDS, 0)
    for entry in entries:
        counts[entry.kind] += 1
    kept = entries if limit is None else entries[-limit:]
    return AgentHistory(
        agent_id=agent_id,
        entries=tuple(kept),
        counts=counts,
        total=len(entries),
        truncated=len(kept) < len(entries),
    )


def _order(entry: TimelineEntry) -> tuple[datetime, int, str, int, int]:
    p = entry.position
    return (entry.at, _TOPIC_RANK[entry.kind], p.topic, p.partition, p.offset)


def _entry(logged: PositionedEvent) -> TimelineEntry:
    event = logged.event
    kind, memory_id, related, text = _describe(event)
    return TimelineEntry(
        at=event.occurred_at,
        kind=kind,
        memory_id=memory_id,
        related_ids=related,
        text=text,
        step=event.step,
        year=event.year,
        event_id=event.event_id,
        position=logged.position,
    )


def _describe(event: LoggedEvent) -> tuple[EntryKind, str | None, tuple[str, ...], str]:
    """The entry's kind, memory id, related ids and text. Every event type is named: one the
    timeline does not know fails mypy (``assert_never``) and raises, never renders as another."""
    match event:
        case MemoryRecorded():
            kind = f" ({event.kind})" if event.kind else ""
            return (
                "recorded",
                event.memory_id,
                (),
                f"into {event.destination}, importance {event.importance:.2f}{kind}: "
                f'"{preview(event.content)}"',
            )
        case MemoryPromoted():
            decision = event.decision
            return (
                "promoted",
                event.memory_id,
                (event.promoted_from,),
                f"copied to {event.destination} from {short(event.promoted_from)} "
                f"({decision.rule} rule, year {decision.consolidated_year}), importance "
                f'{event.importance:.2f}: "{preview(event.content)}"',
            )
        case MemorySummarised():
            n = len(event.summarises)
            return (
                "summarised",
                event.memory_id,
                event.summarises,
                f"L{event.level} summary of {n} {'memory' if n == 1 else 'memories'} "
                f'({event.trigger}) into {event.destination}: "{preview(event.content)}"',
            )
        case MemoryForgotten():
            return ("forgotten", event.memory_id, (), _forgotten_text(event))
        case ConsolidationCompleted():
            outcomes = [c.outcome for c in event.considered]
            return (
                "consolidated",
                None,
                event.promoted,
                f"year {event.consolidated_year} consolidated: {len(outcomes)} considered, "
                f"{outcomes.count('promoted')} promoted, {outcomes.count('burned')} burned; "
                f"after: working {event.working_after}, episodic {event.episodic_after}",
            )
        case AgentForgotten():
            # What was erased is not named: the entry must not say more than the log still can.
            keys = len(event.key_ids)
            return (
                "agent_forgotten",
                None,
                (),
                f"agent forgotten: every memory left the projections, {keys} sealing "
                f"{'key' if keys == 1 else 'keys'} deleted",
            )
        case LearnedChange():
            return describe_learned(event)
        case MemoryRetrieved():
            ids = tuple(r.memory_id for r in sorted(event.results, key=lambda r: r.rank))
            return ("retrieved", None, ids, _retrieved_text(event, ids))
        case _:
            assert_never(event)


def _forgotten_text(event: MemoryForgotten) -> str:
    level = f" L{event.level}" if event.level else ""
    why: str = event.reason
    if event.mus is not None:
        mus = event.mus
        why = (
            f"utility: MUS {mus.score:.3f}, threshold {mus.threshold:.3f}, "
            f"{mus.retrievals} retrievals"
        )
    return f"left {event.destination}{level} ({why})"


def _retrieved_text(event: MemoryRetrieved, ids: tuple[str, ...]) -> str:
    listed = ", ".join(short(i) for i in ids[:LISTED_IDS])
    more = f" +{len(ids) - LISTED_IDS} more" if len(ids) > LISTED_IDS else ""
    returned = f"{len(ids)} returned: {listed}{more}" if ids else "nothing returned"
    if event.mode == FACTS_READ_MODE:
        query = event.parameters.get("query")
        searched = f' for "{preview(query)}"' if isinstance(query, str) else ""
        noun = "fact" if len(ids) == 1 else "facts"
        returned = f"{len(ids)} {noun} returned: {listed}{more}" if ids else "no fact returned"
        return f"facts search{searched}, {returned} ({event.took_ms:.1f} ms)"
    return f"{event.mode} retrieval, {returned} ({event.took_ms:.1f} ms)"


def preview(content: str, limit: int = PREVIEW_CHARS) -> str:
    flat = re.sub(r"\s+", " ", content).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def short(memory_id: str) -> str:
    """Enough of an id to tell memories apart on screen; the JSON keeps the whole id."""
    return memory_id[:8]


__all__ = [
    "ENTRY_KINDS",
    "MAX_HISTORY_LIMIT",
    "AgentHistory",
    "EntryKind",
    "LogPosition",
    "LogUnavailableError",
    "LoggedEvent",
    "PositionedEvent",
    "TimelineEntry",
    "build_timeline",
]
