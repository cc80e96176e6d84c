"""Relevance mode: memories ranked by their relevance to the query alone, the way a search
engine answers a question. Relevance is computed elsewhere (per memory id) and passed in, so
this ranking stays pure whatever signals the relevance combines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from projections.memory import StoredMemory
from projections.retrieval.breakdowns import RelevanceBreakdown
from projections.retrieval.scoring import (
    Ranking,
    ScoredMemory,
    check_top_k,
    memory_times,
    resolve_clock,
    unique,
)


def by_relevance(
    memories: Sequence[StoredMemory],
    *,
    top_k: int,
    relevance: Mapping[str, float],
    parts: Mapping[str, Mapping[str, float]] | None = None,
    current_year: int | None = None,
    current_step: int | None = None,
    current_hour: int | None = None,
) -> Ranking:
    """The ``top_k`` most relevant memories; ties go to the more recent (time, then ``seq``).
    A memory missing from ``relevance`` has relevance 0; ``parts`` (by memory id) is reported
    in the breakdown as given. Duplicates are scored once, the first occurrence kept."""
    check_top_k(top_k)
    candidates = list(unique(memories, set()))
    clock = resolve_clock(
        candidates, current_year=current_year, current_step=current_step, current_hour=current_hour
    )
    times = memory_times(candidates, clock)
    parts = parts or {}
    keyed = [
        ((relevance.get(m.memory_id, 0.0), times[m.memory_id][0], m.seq), m) for m in candidates
    ]
    # Sorted on the keys alone, and only the shown memories get a breakdown: a relevance
    # ranking reads a few hundred candidates to show a handful.
    keyed.sort(key=lambda pair: pair[0], reverse=True)
    shown: list[ScoredMemory] = []
    for (score, time, _), memory in keyed[:top_k]:
        imputed = times[memory.memory_id][1]
        breakdown = RelevanceBreakdown(
            time=time,
            time_imputed=imputed,
            age=max(clock.now - time, 0),
            relevance=score,
            parts=dict(parts.get(memory.memory_id, {})),
        )
        shown.append(ScoredMemory(memory, score, breakdown))
    return Ranking(clock, tuple(shown))
