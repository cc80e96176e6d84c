"""Model v1 of seed 003 (section 1.A, worked example in section 2):
saliency ``S = I * exp(-lambda * age)`` with lambda 0.1, the availability heuristic of a habitual
agent. Pure: see :mod:`projections.retrieval.scoring` for the clock and time imputation."""

from __future__ import annotations

import math
from collections.abc import Sequence

from projections.memory import StoredMemory
from projections.retrieval.breakdowns import SaliencyBreakdown
from projections.retrieval.scoring import (
    IMPORTANCE_DECAY_LAMBDA,
    Ranking,
    ScoredMemory,
    check_top_k,
    memory_times,
    resolve_clock,
    unique,
)


def decayed_importance(importance: float, age: int) -> float:
    """``I * exp(-0.1 * age)``: seed 003's Memory A (1.0, age 10) gives 0.368, Memory B (0.1,
    age 1) 0.0905."""
    return importance * math.exp(-IMPORTANCE_DECAY_LAMBDA * age)


def saliency(
    memories: Sequence[StoredMemory],
    *,
    top_k: int,
    current_year: int | None = None,
    current_step: int | None = None,
    current_hour: int | None = None,
) -> Ranking:
    """The ``top_k`` most salient memories; ties go to the more recent (time, then ``seq``).
    Duplicates are scored once, the first occurrence kept: pass working memories first."""
    check_top_k(top_k)
    candidates = list(unique(memories, set()))
    clock = resolve_clock(
        candidates, current_year=current_year, current_step=current_step, current_hour=current_hour
    )
    times = memory_times(candidates, clock)
    ranked: list[tuple[tuple[float, int, int], ScoredMemory]] = []
    for memory in candidates:
        time, imputed = times[memory.memory_id]
        age = max(clock.now - time, 0)
        score = decayed_importance(memory.importance, age)
        breakdown = SaliencyBreakdown(
            time=time,
            time_imputed=imputed,
            age=age,
            importance=memory.importance,
            decay=math.exp(-IMPORTANCE_DECAY_LAMBDA * age),
        )
        ranked.append(((score, time, memory.seq), ScoredMemory(memory, score, breakdown)))
    ranked.sort(key=lambda pair: pair[0], reverse=True)
    return Ranking(clock, tuple(scored for _, scored in ranked[:top_k]))
