"""Seed 000's recent episodes as a ranking: ``EpisodicMemory.get_recent_episodes(days=7,
limit=10)``, ``WHERE created_at > now - days ORDER BY created_at DESC LIMIT limit``.

Time is the wall clock of each memory's event, ``occurred_at``, which every memory carries: the
time its producer gave the event or, given none, the time its record was logged. A simulation
agent's year and step play no part: its recent memories are those of events that occurred
lately by that clock (published lately, unless its producer dates its events in simulated
time), and its recency in simulated time is what ``saliency`` or ``basic`` with a
``current_year`` rank by. Nothing is imputed, so the breakdown has no ``time_imputed``.

The window is ``occurred_at > now - days``, seed 000's strict bound, and ends
:data:`CLOCK_SKEW` after ``now``: an event its producer dated by a clock a little ahead of the
service's, published just before, is in a read that waited for it (as of this instant), while a
``current_time`` in the past asks for the days before it, not for what came months later (which
ranked first, as the freshest). A memory of the memory as it stood at an earlier time is
``as_of``'s, which also leaves out what was recorded later. Equal times go to the memory
recorded later (higher ``seq``, as the other modes order recency within one time), then to the
higher memory id, so the order is total and a rerun gives the same one.

Pure: ``now`` is given. The service fills it in before it answers and records the request
(:meth:`~projections.retrieval.models.RetrievalRequest.pinned`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from projections.memory import StoredMemory
from projections.retrieval.breakdowns import RecentBreakdown
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.scoring import (
    Clock,
    Ranking,
    ScoredMemory,
    check_top_k,
    hour_of,
    unique,
)

DAY = timedelta(days=1)

CLOCK_SKEW = timedelta(minutes=5)
"""How far ahead of ``now`` an event may be dated and still be in the window: producers' clocks
run a little ahead of the service's."""

RESOLUTION = timedelta(microseconds=1)
"""The finest step of a ``datetime``: a time after another is at least this much after it."""


def window_start(now: datetime, days: float) -> datetime | None:
    """``now - days``, the instant the window leaves out at its start; None when it lies before
    the first time a ``datetime`` holds (the window then reaches back to the beginning)."""
    try:
        return now - timedelta(days=days)
    except OverflowError:
        return None


def window_end(now: datetime) -> datetime | None:
    """``now`` + :data:`CLOCK_SKEW`, the last instant in the window; None past the last time a
    ``datetime`` holds."""
    try:
        return now + CLOCK_SKEW
    except OverflowError:
        return None


def in_window(memory: StoredMemory, start: datetime | None, end: datetime | None) -> bool:
    return (start is None or memory.occurred_at > start) and (
        end is None or memory.occurred_at <= end
    )


def window_filter(memory_filter: MemoryFilter | None, now: datetime, days: float) -> MemoryFilter:
    """``memory_filter`` narrowed to the window, so that a store reads only what is in it and
    filters natively on its index of the events' times. A filter's time bounds are inclusive:
    the window's exclusive start becomes the first time after it (:data:`RESOLUTION`)."""
    kept = memory_filter or MemoryFilter()
    start = window_start(now, days)
    after = None if start is None else start + RESOLUTION
    if kept.occurred_after is not None and (after is None or kept.occurred_after > after):
        after = kept.occurred_after
    before = window_end(now)
    if kept.occurred_before is not None and (before is None or kept.occurred_before < before):
        before = kept.occurred_before
    return kept.model_copy(update={"occurred_after": after, "occurred_before": before})


def recent(memories: Sequence[StoredMemory], *, top_k: int, now: datetime, days: float) -> Ranking:
    """The ``top_k`` newest memories of events after ``days`` before ``now``, newest first.
    The score is ``1 - age_days / days``: 1 for an event of this instant, falling linearly
    towards 0 at the window's start, so that it orders as the window does and says how far
    back in the window a memory lies. Duplicates are ranked once, the first occurrence kept:
    pass working memories first."""
    check_top_k(top_k)
    if not days > 0:
        raise ValueError(f"days must be positive, got {days}")
    start, end = window_start(now, days), window_end(now)
    kept = [m for m in unique(memories, set()) if in_window(m, start, end)]
    kept.sort(key=lambda m: (m.occurred_at, m.seq, m.memory_id), reverse=True)
    results = []
    for memory in kept[:top_k]:
        age_days = max(0.0, (now - memory.occurred_at) / DAY)  # within the skew: this instant
        recency = 1.0 - age_days / days
        breakdown = RecentBreakdown(
            occurred_at=memory.occurred_at, age_days=age_days, days=days, recency=recency
        )
        results.append(ScoredMemory(memory, recency, breakdown))
    return Ranking(Clock("hour", hour_of(now)), tuple(results))
