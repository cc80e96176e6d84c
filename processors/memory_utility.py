"""Memory utility (MUS) of a summary, for pruning: seed 001's score and the ages it reads."""

from __future__ import annotations

import math
from typing import Literal

from processors.config import PruningRules
from processors.recording import SummaryEntry

AgeUnit = Literal["steps", "years", "seconds"]


def memory_utility(
    *,
    retrievals: int,
    relevance_sum: float,
    since_access: float,
    rules: PruningRules,
) -> tuple[float, float, float, float]:
    """MUS = 0.4 x retrieval frequency + 0.4 x relevance + 0.2 x recency (seed 001).

    The seed gives the weights only; Engram's parts, each in [0, 1]:

    * retrieval frequency: ``min(1, ln(1 + n))`` for ``n`` retrievals (one retrieval: 0.69);
    * relevance: the mean score the summary had when it was retrieved (0 if never);
    * recency: ``1 / (1 + t)``, ``t`` the time since the last retrieval (or since the summary
      was made), in steps, years or days.

    Returns (score, frequency, relevance, recency).
    """
    frequency = min(1.0, math.log1p(retrievals))
    relevance = relevance_sum / retrievals if retrievals else 0.0
    recency = 1.0 / (1.0 + max(0.0, since_access))
    score = (
        rules.frequency_weight * frequency
        + rules.relevance_weight * relevance
        + rules.recency_weight * recency
    )
    return score, frequency, relevance, recency


def ages_of(
    entry: SummaryEntry, unit: AgeUnit, now: float, rules: PruningRules
) -> tuple[float, float] | None:
    """(age, time since last access) of a summary on the agent's clock, or None when the
    summary carries no time on that axis."""
    if unit == "seconds":
        made = entry.occurred_at.timestamp()
        last = entry.last_access_at.timestamp() if entry.last_access_at is not None else made
        return now - made, (now - last) / rules.recency_unit_seconds
    made_at = entry.step if unit == "steps" else entry.year
    if made_at is None:
        return None
    accessed = entry.last_access_step if unit == "steps" else entry.last_access_year
    last_at = made_at if accessed is None else max(made_at, accessed)
    return now - made_at, now - last_at
