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
    ranked: list[tuple[tuple[float, int, int], ScoredMemory]] = []
    for memory in candidates:
        time, imputed = times[memory.memory_id]
        score = relevance.get(memory.memory_id, 0.0)
        breakdown = RelevanceBreakdown(
            time=time,
            time_imputed=imputed,
            age=max(clock.now - time, 0),
            relevance=score,
            parts=dict(parts.get(memory.memory_id, {})),
        )
        ranked.append(((score, time, memory.seq), ScoredMemory(memory, score, breakdown)))
    ranked.sort(key=lambda pair: pair[0], reverse=True)
    return Ranking(clock, tuple(scored for _, scored in ranked[:top_k]))
