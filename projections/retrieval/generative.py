"""Generative Agents retrieval (Park et al. 2023, cited by seed 003 as reference [4], "Recency
x Importance x Relevance").

``score = w_rec * norm(recency) + w_imp * norm(importance) + w_rel * norm(relevance)`` with
``recency = recency_decay ** age`` (Park: 0.995 per game hour; here per unit of the clock's
axis), ``importance`` the stored importance and ``relevance`` a value per memory the caller
computes. Each component is min-max normalised to [0, 1] across the candidates, as Park does.
When every candidate has the same value, the component cannot tell them apart: it is 1.0 if
that shared value is positive (every memory has all of it) and 0.0 otherwise, so a single
memory with relevance 0.7 reports 1.0 and one without any relevance 0.0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from projections.memory import StoredMemory
from projections.retrieval.breakdowns import GenerativeBreakdown
from projections.retrieval.scoring import (
    MAX_WEIGHT,
    Ranking,
    ScoredMemory,
    check_top_k,
    memory_times,
    resolve_clock,
    unique,
)

RECENCY_DECAY = 0.995
"""Park et al. 2023, section 4.1: recency decays by 0.995 per hour since the last retrieval."""

GenerativeWeight = Annotated[float, Field(ge=0.0, le=MAX_WEIGHT)]
"""Bounded as :data:`~projections.retrieval.scoring.Weight` is, for the same reason."""


class GenerativeWeights(BaseModel):
    """Park et al. weight the three components equally (alpha = 1 each)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        # The rule of _not_all_zero, for a schema's reader: all three given as 0.
        json_schema_extra={
            "not": {
                "required": ["recency", "importance", "relevance"],
                "properties": {
                    name: {"maximum": 0} for name in ("recency", "importance", "relevance")
                },
            }
        },
    )

    recency: GenerativeWeight = Field(default=1.0, description="Weight of normalised recency.")
    importance: GenerativeWeight = Field(
        default=1.0, description="Weight of normalised importance."
    )
    relevance: GenerativeWeight = Field(
        default=1.0, description="Weight of normalised relevance to the query."
    )
    recency_decay: float = Field(
        default=RECENCY_DECAY,
        gt=0.0,
        le=1.0,
        description="Recency is recency_decay ** age, age in units of the clock's axis.",
    )

    @model_validator(mode="after")
    def _not_all_zero(self) -> GenerativeWeights:
        if not any((self.recency, self.importance, self.relevance)):
            raise ValueError(
                "at least one of recency, importance, relevance must be positive, "
                "otherwise every memory scores the same"
            )
        return self


def min_max(values: Sequence[float]) -> list[float]:
    """Each value's place between the smallest and the largest, in [0, 1]; equal values give
    1.0 when positive and 0.0 otherwise (see the module docstring)."""
    if not values:
        return []
    low, high = min(values), max(values)
    if high == low:
        return [1.0 if high > 0 else 0.0] * len(values)
    return [(value - low) / (high - low) for value in values]


def generative(
    memories: Sequence[StoredMemory],
    *,
    top_k: int,
    relevance: Mapping[str, float],
    weights: GenerativeWeights | None = None,
    current_year: int | None = None,
    current_step: int | None = None,
    current_hour: int | None = None,
) -> Ranking:
    """The ``top_k`` best by the weighted sum; ties go to the more recent (time, then ``seq``).
    ``relevance`` is by memory id; a memory missing from it has relevance 0. Duplicates are
    scored once, the first occurrence kept: pass working memories first."""
    check_top_k(top_k)
    weights = weights or GenerativeWeights()
    candidates = list(unique(memories, set()))
    clock = resolve_clock(
        candidates, current_year=current_year, current_step=current_step, current_hour=current_hour
    )
    times = memory_times(candidates, clock)
    ages = [max(clock.now - times[m.memory_id][0], 0) for m in candidates]
    recency = [weights.recency_decay**age for age in ages]
    importance = [m.importance for m in candidates]
    related = [relevance.get(m.memory_id, 0.0) for m in candidates]
    columns = zip(min_max(recency), min_max(importance), min_max(related), strict=True)

    ranked: list[tuple[tuple[float, int, int], ScoredMemory]] = []
    for index, (memory, (rec, imp, rel)) in enumerate(zip(candidates, columns, strict=True)):
        time, imputed = times[memory.memory_id]
        breakdown = GenerativeBreakdown(
            time=time,
            time_imputed=imputed,
            age=ages[index],
            recency=recency[index],
            importance=importance[index],
            relevance=related[index],
            recency_norm=rec,
            importance_norm=imp,
            relevance_norm=rel,
        )
        score = weights.recency * rec + weights.importance * imp + weights.relevance * rel
        ranked.append(((score, time, memory.seq), ScoredMemory(memory, score, breakdown)))
    ranked.sort(key=lambda pair: pair[0], reverse=True)
    return Ranking(clock, tuple(scored for _, scored in ranked[:top_k]))
