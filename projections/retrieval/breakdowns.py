"""Why a memory got its score, one dataclass per scoring mode.

Each breakdown's ``mode`` literal names the mode that produced it, so the union
:data:`Breakdown` is discriminated on it in the HTTP response and the MCP tools. The dataclasses
live apart from the scoring functions so every scoring module can import them without importing
the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

ProfileName = Literal["MILLER_STANDARD", "COWAN_CONSERVATIVE", "EXTENDED_CONTEXT", "MINIMAL"]
"""The cognitive-constraint profiles of seed 003, section 5.1."""

CognitiveSystem = Literal["SYSTEM_1", "SYSTEM_2"]

Source = Literal["recent", "supplement"]

_TIME = "The memory's time on the clock's axis."
_IMPUTED = "True when the memory had no time on it."
_AGE = "now - time, at least 0."


@dataclass(frozen=True, slots=True)
class TwoPhaseBreakdown:
    """Why a memory got its two-phase score (seed 004, section 3.1)."""

    phase: Annotated[Literal[1, 2], Field(description="1: working memory, 2: episodic supplement.")]
    time: Annotated[int, Field(description=_TIME)]
    time_imputed: Annotated[bool, Field(description=_IMPUTED)]
    age: Annotated[int, Field(description=_AGE)]
    decay: Annotated[float, Field(description="0.95 ** age in phase 2; 1.0 in phase 1 (no decay).")]
    importance: Annotated[float, Field(description="The stored importance.")]
    mode: Literal["two_phase"] = "two_phase"


@dataclass(frozen=True, slots=True)
class WeightedBreakdown:
    """The components of a v2 weighted score (seed 003, sections 1.B, 2 and 2b)."""

    time: Annotated[int, Field(description=_TIME)]
    time_imputed: Annotated[bool, Field(description=_IMPUTED)]
    age: Annotated[int, Field(description=_AGE)]
    recency: Annotated[float, Field(description="R = 1 - age / max_age.")]
    importance: Annotated[float, Field(description="I = importance * exp(-0.1 * age).")]
    context: Annotated[
        float, Field(description="C: 1.0 if a tag matches a context tag or a keyword of the query.")
    ]
    relevance: Annotated[float, Field(description="Rel: keyword overlap with the query.")]
    interference: Annotated[float, Field(description="Int: overlap with newer memories x 0.8.")]
    mode: Literal["weighted"] = "weighted"


@dataclass(frozen=True, slots=True)
class SaliencyBreakdown:
    """The v1 saliency ``S = I * exp(-lambda * age)`` (seed 003, sections 1.A and 2)."""

    time: Annotated[int, Field(description=_TIME)]
    time_imputed: Annotated[bool, Field(description=_IMPUTED)]
    age: Annotated[int, Field(description=_AGE)]
    importance: Annotated[float, Field(description="The stored importance I.")]
    decay: Annotated[float, Field(description="exp(-lambda * age), lambda 0.1.")]
    mode: Literal["saliency"] = "saliency"


@dataclass(frozen=True, slots=True)
class BasicBreakdown:
    """Basic ranking (seed 003, "WRR-Validated Configuration"): the recent window, then the
    supplement by decayed importance."""

    source: Annotated[
        Source, Field(description="recent: in the recent window; supplement: among the top.")
    ]
    time: Annotated[int, Field(description=_TIME)]
    time_imputed: Annotated[bool, Field(description=_IMPUTED)]
    age: Annotated[int, Field(description=_AGE)]
    importance: Annotated[float, Field(description="The stored importance.")]
    decayed_importance: Annotated[
        float, Field(description="importance * exp(-0.1 * age): the supplement's score.")
    ]
    mode: Literal["basic"] = "basic"


@dataclass(frozen=True, slots=True)
class ConstrainedBreakdown:
    """Basic ranking sized by a cognitive-constraint profile and the agent's arousal (seed 003,
    sections 5.1 and 6)."""

    source: Annotated[
        Source, Field(description="recent: in the recent window; supplement: among the top.")
    ]
    profile: Annotated[ProfileName, Field(description="The cognitive-constraint profile.")]
    arousal: Annotated[float, Field(description="The arousal the count was computed from.")]
    count: Annotated[int, Field(description="Size of the recent window for that arousal.")]
    system: Annotated[
        CognitiveSystem, Field(description="SYSTEM_1 below arousal 0.5, else SYSTEM_2.")
    ]
    time: Annotated[int, Field(description=_TIME)]
    time_imputed: Annotated[bool, Field(description=_IMPUTED)]
    age: Annotated[int, Field(description=_AGE)]
    importance: Annotated[float, Field(description="The stored importance.")]
    decayed_importance: Annotated[
        float, Field(description="importance * exp(-0.1 * age): the supplement's score.")
    ]
    mode: Literal["constrained"] = "constrained"


@dataclass(frozen=True, slots=True)
class GenerativeBreakdown:
    """Recency, importance and relevance of Generative Agents (Park et al. 2023, seed 003 [4]),
    raw and min-max normalised over the candidates."""

    time: Annotated[int, Field(description=_TIME)]
    time_imputed: Annotated[bool, Field(description=_IMPUTED)]
    age: Annotated[int, Field(description=_AGE)]
    recency: Annotated[float, Field(description="recency_decay ** age.")]
    importance: Annotated[float, Field(description="The stored importance.")]
    relevance: Annotated[float, Field(description="Relevance to the query.")]
    recency_norm: Annotated[float, Field(description="recency min-max normalised, in [0, 1].")]
    importance_norm: Annotated[
        float, Field(description="importance min-max normalised, in [0, 1].")
    ]
    relevance_norm: Annotated[float, Field(description="relevance min-max normalised, in [0, 1].")]
    mode: Literal["generative"] = "generative"


@dataclass(frozen=True, slots=True)
class RelevanceBreakdown:
    """Relevance to the query alone, and what it was made of."""

    time: Annotated[int, Field(description=_TIME)]
    time_imputed: Annotated[bool, Field(description=_IMPUTED)]
    age: Annotated[int, Field(description=_AGE)]
    relevance: Annotated[float, Field(description="The relevance the ranking is by.")]
    parts: Annotated[
        dict[str, float],
        Field(description="The signals the relevance combines (e.g. lexical, dense), if known."),
    ] = field(default_factory=dict)
    mode: Literal["relevance"] = "relevance"


@dataclass(frozen=True, slots=True)
class RecentBreakdown:
    """Seed 000's recent episodes: when the memory's event occurred and how long before the
    retrieval's time, in days of the wall clock."""

    occurred_at: Annotated[
        datetime, Field(description="When the event occurred: what the window and order read.")
    ]
    age_days: Annotated[
        float, Field(description="(current_time - occurred_at) in days: 0 up to, not at, days.")
    ]
    days: Annotated[float, Field(description="The window: how many days back it reaches.")]
    recency: Annotated[
        float, Field(description="1 - age_days / days, the score: 1 now, towards 0 at the start.")
    ]
    mode: Literal["recent"] = "recent"


Breakdown = (
    TwoPhaseBreakdown
    | WeightedBreakdown
    | SaliencyBreakdown
    | BasicBreakdown
    | ConstrainedBreakdown
    | GenerativeBreakdown
    | RelevanceBreakdown
    | RecentBreakdown
)
