"""Basic ranking and the cognitive-constraint profiles of seed 003.

* :func:`basic`, the "WRR-Validated Configuration": the 5 most recent memories (the recent
  window) plus the 2 highest by decayed importance ``I * exp(-0.1 * age)`` among the rest.
* :func:`constrained`, section 5.1: the same, with the recent window sized by a
  :class:`Profile` and the agent's arousal (:func:`memory_count`), plus the same 2 supplemental
  memories "regardless of arousal".

"The rest" is every candidate outside the recent window, whichever store holds it: the seed's
long-term store is what has left the recent buffer, and drawing the supplement from one pool in
both modes is what makes ``constrained`` at arousal 0 with ``MILLER_STANDARD`` equal ``basic``.
Results list the recent window first (most recent first: time, then recording order ``seq``,
which is the seed's order of its recent buffer), then the supplement (highest decayed importance
first). The score is the decayed importance in both parts; the order, not the score, carries the
window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from processors.surprise import cognitive_system
from projections.memory import StoredMemory
from projections.retrieval.breakdowns import (
    BasicBreakdown,
    ConstrainedBreakdown,
    ProfileName,
    Source,
)
from projections.retrieval.saliency import decayed_importance
from projections.retrieval.scoring import (
    Clock,
    Ranking,
    ScoredMemory,
    memory_times,
    resolve_clock,
    unique,
)

BASIC_RECENT = 5
BASIC_TOP = 2
"""Seed 003, "WRR-Validated Configuration": 5 recent memories plus the 2 most important."""

SYSTEM_2_THRESHOLD = 0.5
"""Seed 003, section 6 (``arousal_threshold: 0.5``) and section 3.1 (``PE >= 0.5``): the
threshold of an agent whose own (its agent type's ``arousal_threshold``) is not known."""


class StoredArousal(Protocol):
    """An agent's arousal and the threshold its agent type switches to System 2 at, as the
    processor stored them (:class:`schemas.memory_events.SurpriseReading` is one)."""

    @property
    def arousal(self) -> float: ...

    @property
    def threshold(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Arousal:
    """A :class:`StoredArousal` given by value."""

    arousal: float
    threshold: float = SYSTEM_2_THRESHOLD


@dataclass(frozen=True, slots=True)
class Profile:
    """How many recent memories each cognitive system gets (seed 003, section 5.1)."""

    name: ProfileName
    system1: int
    system2: int
    working_capacity: int

    def __post_init__(self) -> None:
        if not 1 <= self.system1 <= self.system2 <= self.working_capacity:
            raise ValueError(
                "a profile needs 1 <= system1 <= system2 <= working_capacity, got "
                f"{self.system1}/{self.system2}/{self.working_capacity}"
            )


PROFILES: dict[ProfileName, Profile] = {
    "MILLER_STANDARD": Profile("MILLER_STANDARD", 5, 7, 10),
    "COWAN_CONSERVATIVE": Profile("COWAN_CONSERVATIVE", 3, 5, 7),
    "EXTENDED_CONTEXT": Profile("EXTENDED_CONTEXT", 7, 9, 15),
    "MINIMAL": Profile("MINIMAL", 3, 4, 5),
}
DEFAULT_PROFILE: ProfileName = "MILLER_STANDARD"
"""Seed 003, section 5.1: "Recommended default"."""


def memory_count(profile: Profile, arousal: float) -> int:
    """The recent-window size at ``arousal``: linear from ``system1`` (arousal 0) to
    ``system2`` (arousal 1), rounded half up (MILLER at 0.25: 5.5 -> 6), never above the
    working capacity. Half up rather than Python's half-to-even, so the count never falls as
    arousal rises. The value is rounded to 9 decimals first, so 5.4999999999 from float error
    counts as 5.5."""
    _check_arousal(arousal)
    exact = profile.system1 + (profile.system2 - profile.system1) * arousal
    return min(math.floor(round(exact, 9) + 0.5), profile.working_capacity)


@dataclass(frozen=True, slots=True)
class _Pick:
    memory: StoredMemory
    source: Source
    time: int
    imputed: bool
    age: int
    decayed: float


def basic(
    memories: Sequence[StoredMemory],
    *,
    recent: int = BASIC_RECENT,
    top: int = BASIC_TOP,
    current_year: int | None = None,
    current_step: int | None = None,
    current_hour: int | None = None,
) -> Ranking:
    """At most ``recent + top`` memories: the recent window, then the supplement. Duplicates
    are scored once, the first occurrence kept: pass working memories first."""
    clock, picks = _recent_plus_top(memories, recent, top, current_year, current_step, current_hour)
    results = tuple(
        ScoredMemory(
            pick.memory,
            pick.decayed,
            BasicBreakdown(
                source=pick.source,
                time=pick.time,
                time_imputed=pick.imputed,
                age=pick.age,
                importance=pick.memory.importance,
                decayed_importance=pick.decayed,
            ),
        )
        for pick in picks
    )
    return Ranking(clock, results)


def constrained(
    memories: Sequence[StoredMemory],
    *,
    profile: Profile,
    arousal: float,
    threshold: float = SYSTEM_2_THRESHOLD,
    top: int = BASIC_TOP,
    current_year: int | None = None,
    current_step: int | None = None,
    current_hour: int | None = None,
) -> Ranking:
    """Basic ranking with ``recent = memory_count(profile, arousal)``; ``top`` supplemental
    memories whatever the arousal. The breakdown names the cognitive system ``arousal`` puts
    the agent in at ``threshold``, the same rule the surprise processor applies."""
    count = memory_count(profile, arousal)
    system = cognitive_system(arousal, threshold)
    clock, picks = _recent_plus_top(memories, count, top, current_year, current_step, current_hour)
    results = tuple(
        ScoredMemory(
            pick.memory,
            pick.decayed,
            ConstrainedBreakdown(
                source=pick.source,
                profile=profile.name,
                arousal=arousal,
                count=count,
                system=system,
                time=pick.time,
                time_imputed=pick.imputed,
                age=pick.age,
                importance=pick.memory.importance,
                decayed_importance=pick.decayed,
            ),
        )
        for pick in picks
    )
    return Ranking(clock, results)


def _recent_plus_top(
    memories: Sequence[StoredMemory],
    recent: int,
    top: int,
    current_year: int | None,
    current_step: int | None,
    current_hour: int | None,
) -> tuple[Clock, list[_Pick]]:
    if recent < 0 or top < 0:
        raise ValueError(f"recent and top must not be negative, got {recent} and {top}")
    candidates = list(unique(memories, set()))
    clock = resolve_clock(
        candidates, current_year=current_year, current_step=current_step, current_hour=current_hour
    )
    times = memory_times(candidates, clock)
    picks: list[_Pick] = []
    for memory in candidates:
        time, imputed = times[memory.memory_id]
        age = max(clock.now - time, 0)
        decayed = decayed_importance(memory.importance, age)
        picks.append(_Pick(memory, "recent", time, imputed, age, decayed))
    newest_first = sorted(picks, key=lambda p: (p.time, p.memory.seq), reverse=True)
    window = newest_first[:recent]
    rest = sorted(
        newest_first[recent:], key=lambda p: (p.decayed, p.time, p.memory.seq), reverse=True
    )
    supplement = [
        _Pick(p.memory, "supplement", p.time, p.imputed, p.age, p.decayed) for p in rest[:top]
    ]
    return clock, [*window, *supplement]


def _check_arousal(arousal: float) -> None:
    if not 0.0 <= arousal <= 1.0:
        raise ValueError(f"arousal must be within [0, 1], got {arousal}")
