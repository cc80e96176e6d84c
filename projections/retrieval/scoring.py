"""Ranking an agent's memories for a prompt: pure functions over :class:`StoredMemory` values.

Two modes live here, each after one seed:

* :func:`two_phase`, seed 004 section 3.1: working memories first,
  then an episodic supplement ranked by ``0.95 ** years_passed * importance``.
* :func:`weighted`, seed 003 section 2 ("Model v2") and 2b (P2):
  ``S = Wr*R + Wi*I + Wc*C + Wrel*Rel - Wint*Int``.

The other modes have a module each (:mod:`~projections.retrieval.saliency`,
:mod:`~projections.retrieval.basic`, :mod:`~projections.retrieval.generative`,
:mod:`~projections.retrieval.by_relevance`) and share the clock, time imputation and
de-duplication below; their breakdowns are in :mod:`~projections.retrieval.breakdowns`.

Time. The seeds count time in simulation years; our events may carry a ``year``, a ``step``,
both or neither. A request picks one :data:`TimeAxis` (see :func:`resolve_clock`) and every
age is measured on it. A memory without a value on that axis is given the time of the latest
memory recorded before it (by ``seq``) that has one: ``seq`` is the agent's recording order and
simulation time does not run backwards within one agent's log, so that is the closest honest
estimate. Memories recorded before any timed memory take the first known time; if no memory
has a time on the axis, they all sit at ``now``. Imputed times are flagged in the breakdown.
Ages are clamped at zero, so a memory newer than the requested ``now`` is not boosted.

Nothing here does I/O, reads a clock or draws a random number: the same memories and request
always give the same ranking (streams/README.md, invariant 2).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Annotated, Literal, TypedDict

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from processors.embedding import keywords
from projections.memory import StoredMemory
from projections.retrieval.breakdowns import Breakdown, TwoPhaseBreakdown, WeightedBreakdown
from schemas.memory_events import Destination

TimeAxis = Literal["year", "step", "seq", "hour"]
"""What a memory's time is measured in: simulation years, simulation steps, hours of the wall
clock (the event's ``occurred_at``, in whole hours since 1970; asked for by giving the time of
the retrieval), or, when events carry no year or step, the agent's recording order (one unit
per recorded memory)."""

SECONDS_PER_HOUR = 3600

EPISODIC_DECAY_RATE = 0.95
"""Seed 004, section 5.1 (``DECAY_RATE``): episodic importance keeps 95% per unit of age."""

IMPORTANCE_DECAY_LAMBDA = 0.1
"""Seed 003, section 1.B (lambda): ``I = I_initial * exp(-0.1 * age)``."""

INTERFERENCE_CAP = 0.8
"""Seed 003, section 1.B (gamma): the interference penalty never exceeds 0.8, so a superseded
memory stays partially retrievable."""

MAX_WEIGHT = 1e6
"""Weights are relative, so a bound costs nothing, and without one a weight near the largest
float overflowed the score to infinity: every result tied, the answer said ``"score": null``
against its own schema, and the retrieval's record on ``memory.access`` was a dead letter."""

Weight = Annotated[float, Field(ge=0.0, le=MAX_WEIGHT)]


QUERY_RELEVANCE_WEIGHT = 0.5
"""W_rel of the weighted mode when a request gives a query and no relevance weight of its own:
seed 003's default weights leave the query out (W_rel 0), which answers a question by recency,
importance and context alone."""


class Weights(BaseModel):
    """The v2 weights of seed 003 (section 1.B and the section 6 config). Defaults reduce the
    formula to the classic ``0.3*R + 0.5*I + 0.2*C``; relevance and interference are opt-in."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        # The rule of _not_all_zero, for a schema's reader: recency, importance and context
        # given as 0 (their defaults are positive) with relevance absent or 0.
        json_schema_extra={
            "not": {
                "required": ["recency", "importance", "context"],
                "properties": {
                    name: {"maximum": 0}
                    for name in ("recency", "importance", "context", "relevance")
                },
            }
        },
    )

    recency: Weight = Field(default=0.3, description="W_r: weight of recency R.")
    importance: Weight = Field(default=0.5, description="W_i: weight of decayed importance I.")
    context: Weight = Field(default=0.2, description="W_c: weight of the context-tag match C.")
    relevance: Weight = Field(
        default=0.0, description="W_rel: weight of query keyword overlap Rel (seed 003, P2)."
    )
    interference: Weight = Field(
        default=0.0, description="W_int: weight of the retroactive-interference penalty Int."
    )

    @model_validator(mode="after")
    def _not_all_zero(self) -> Weights:
        if not any((self.recency, self.importance, self.context, self.relevance)):
            raise ValueError(
                "at least one of recency, importance, context, relevance must be positive, "
                "otherwise every memory scores the same"
            )
        return self


class Moment(TypedDict):
    """The time a request gives on its axis, as every mode's keyword arguments take it."""

    current_year: int | None
    current_step: int | None
    current_hour: int | None


@dataclass(frozen=True, slots=True)
class Clock:
    """The time axis of one retrieval and the moment it is made on that axis."""

    axis: TimeAxis
    now: int


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    memory: StoredMemory
    score: float
    breakdown: Breakdown

    @property
    def store(self) -> Destination:
        """The store the memory was read from: each store holds only its own destination."""
        return self.memory.destination


@dataclass(frozen=True, slots=True)
class Ranking:
    """The best memories, best first, and the clock their ages were measured with."""

    clock: Clock
    results: tuple[ScoredMemory, ...]


def time_of(memory: StoredMemory, axis: TimeAxis) -> int | None:
    if axis == "year":
        return memory.year
    if axis == "step":
        return memory.step
    if axis == "hour":
        return hour_of(memory.occurred_at)
    return memory.seq


def hour_of(moment: datetime) -> int:
    """Whole hours since 1970 (UTC): the wall clock's unit of age."""
    return math.floor(moment.timestamp() / SECONDS_PER_HOUR)


def resolve_clock(
    memories: Iterable[StoredMemory],
    *,
    current_year: int | None = None,
    current_step: int | None = None,
    current_hour: int | None = None,
) -> Clock:
    """The axis is the one the caller counts in: ``current_year``, ``current_step`` or
    ``current_hour`` (:func:`hour_of` the retrieval's wall-clock time). When the
    caller gives neither, it is the first of year, step, seq that any memory carries, and
    ``now`` is the latest memory time + 1, as seed 003's engine advances its clock past the
    newest memory; seed 004's audit (sections 8.3 and 11: year-2 memories read in year 3)
    agrees.
    """
    if current_year is not None and current_step is not None:
        raise ValueError("give current_year or current_step, not both")
    if current_hour is not None and (current_year is not None or current_step is not None):
        raise ValueError("give current_hour or a current year or step, not both")
    if current_hour is not None:
        return Clock("hour", current_hour)
    if current_year is not None:
        return Clock("year", current_year)
    if current_step is not None:
        return Clock("step", current_step)
    memories = list(memories)
    axis: TimeAxis = "seq"
    if any(m.year is not None for m in memories):
        axis = "year"
    elif any(m.step is not None for m in memories):
        axis = "step"
    known = [t for t in (time_of(m, axis) for m in memories) if t is not None]
    return Clock(axis, max(known) + 1 if known else 0)


def two_phase(
    working: Sequence[StoredMemory],
    episodic: Sequence[StoredMemory],
    *,
    top_k: int,
    current_year: int | None = None,
    current_step: int | None = None,
    current_hour: int | None = None,
) -> Ranking:
    """Seed 004, section 3.1. Phase 1 lists working memories most recent first (score =
    importance: working memory does not decay, section 2.1). The seed sorts them by
    ``(timestamp, importance)``, its timestamp the wall clock of the recording; here the
    memory's time on the clock (year, step) comes first and its ``seq`` (the order it was
    recorded in) stands for the timestamp within one time, so importance, a tie-break of equal
    timestamps in the seed, never decides. Phase 2 supplements them with episodic memories ranked by
    ``EPISODIC_DECAY_RATE ** age * importance``. A memory present in both stores is listed
    once, in phase 1. The seed decays per year; on a step or seq clock a step or a recorded
    memory is the unit of age.
    """
    check_top_k(top_k)
    seen: set[tuple[object, ...]] = set()
    working = list(unique(working, seen))
    episodic = list(unique(episodic, seen))
    clock = resolve_clock(
        [*working, *episodic],
        current_year=current_year,
        current_step=current_step,
        current_hour=current_hour,
    )
    times = memory_times([*working, *episodic], clock)

    phase_one: list[tuple[tuple[int, int], ScoredMemory]] = []
    for memory in working:
        time, imputed = times[memory.memory_id]
        breakdown = TwoPhaseBreakdown(
            phase=1,
            time=time,
            time_imputed=imputed,
            age=max(clock.now - time, 0),
            decay=1.0,
            importance=memory.importance,
        )
        scored = ScoredMemory(memory, memory.importance, breakdown)
        phase_one.append(((time, memory.seq), scored))
    phase_one.sort(key=lambda pair: pair[0], reverse=True)

    # Scored first and explained only if shown: a breakdown costs more than its score.
    phase_two: list[tuple[tuple[float, int, int], StoredMemory]] = []
    for memory in episodic:
        time, _ = times[memory.memory_id]
        score = EPISODIC_DECAY_RATE ** max(clock.now - time, 0) * memory.importance
        phase_two.append(((score, time, memory.seq), memory))
    phase_two.sort(key=lambda pair: pair[0], reverse=True)
    shown = phase_two[: max(top_k - len(phase_one), 0)]

    ranked = [scored for _, scored in phase_one]
    for (score, time, _), memory in shown:
        age = max(clock.now - time, 0)
        breakdown = TwoPhaseBreakdown(
            phase=2,
            time=time,
            time_imputed=times[memory.memory_id][1],
            age=age,
            decay=EPISODIC_DECAY_RATE**age,
            importance=memory.importance,
        )
        ranked.append(ScoredMemory(memory, score, breakdown))
    return Ranking(clock, tuple(ranked[:top_k]))


def weighted(
    memories: Sequence[StoredMemory],
    *,
    top_k: int,
    current_year: int | None = None,
    current_step: int | None = None,
    current_hour: int | None = None,
    context_tags: Iterable[str] = (),
    query_text: str | None = None,
    weights: Weights | None = None,
) -> Ranking:
    """Seed 003, "Model v2" and P2: ``S = Wr*R + Wi*I + Wc*C + Wrel*Rel - Wint*Int`` with

    * ``R = 1 - age / max_age``, ``max_age`` the oldest age among ``memories`` (all R = 1 when
      every memory has age 0);
    * ``I = importance * exp(-0.1 * age)``;
    * ``C = 1`` if any memory tag equals a context tag or a keyword of the query, ignoring
      case, else 0 (the binary match "between memory tags and current prompt": the seed's
      flood memory scores C = 1 for "the word 'Flood' in the current forecast");
    * ``Rel = |Q & M| / min(|Q|, |M|)`` over keyword sets of query and content (0 without a
      query or keywords);
    * ``Int = min(max(Rel(m, m') for newer m') * 0.8, 0.8)``, newer meaning recorded later
      (higher ``seq``).

    Every component is computed and reported even when its weight is zero, so a caller can see
    what a weight would change. Duplicates (same ``memory_id``, or same ``source_event_id`` and
    ``level``) are scored once, the first occurrence kept: pass working memories before
    episodic ones.
    """
    check_top_k(top_k)
    weights = weights or Weights()
    candidates = list(unique(memories, set()))
    clock = resolve_clock(
        candidates, current_year=current_year, current_step=current_step, current_hour=current_hour
    )
    times = memory_times(candidates, clock)
    ages = {key: max(clock.now - time, 0) for key, (time, _) in times.items()}
    max_age = max(ages.values(), default=0)
    context = context_of(context_tags, query_text)
    query = keyword_set(query_text) if query_text else frozenset()
    words = {m.memory_id: keyword_set(m.content) for m in candidates}
    interference = _interference(candidates, words)

    ranked: list[tuple[tuple[float, int, int], ScoredMemory]] = []
    for memory in candidates:
        key = memory.memory_id
        time, imputed = times[key]
        age = ages[key]
        breakdown = WeightedBreakdown(
            time=time,
            time_imputed=imputed,
            age=age,
            recency=1.0 - age / max_age if max_age else 1.0,
            importance=memory.importance * math.exp(-IMPORTANCE_DECAY_LAMBDA * age),
            context=1.0 if any(tag.casefold() in context for tag in memory.tags) else 0.0,
            relevance=overlap(query, words[key]),
            interference=interference[key],
        )
        score = (
            weights.recency * breakdown.recency
            + weights.importance * breakdown.importance
            + weights.context * breakdown.context
            + weights.relevance * breakdown.relevance
            - weights.interference * breakdown.interference
        )
        ranked.append(((score, time, memory.seq), ScoredMemory(memory, score, breakdown)))
    ranked.sort(key=lambda pair: pair[0], reverse=True)
    return Ranking(clock, tuple(scored for _, scored in ranked[:top_k]))


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """The overlap coefficient of seed 003 (P2, Contextual Resonance): ``|A & B| / min(|A|, |B|)``.
    Unlike Jaccard it reaches 1 when a short query is fully contained in a long memory."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def _interference(
    memories: Sequence[StoredMemory], words: dict[str, frozenset[str]]
) -> dict[str, float]:
    """Seed 003, P2 (Interference-Based Forgetting) for all memories at once: the pairwise
    overlap coefficients come from one product of the memory-by-keyword incidence matrix,
    and each memory takes the strongest overlap with any memory recorded after it (higher
    ``seq``). For 60 memories pairwise set operations take ~2 ms, this ~0.1 ms."""
    oldest_first = sorted(memories, key=lambda m: m.seq)
    held = [words[memory.memory_id] for memory in oldest_first]
    # Only words two memories share can make an overlap: the matrix has a column for each of
    # them alone. With a column for every word, 200 memories of 16 KB of distinct tokens (tool
    # output) made a 200 x 600,000 matrix: 3.3 s and 710 MB for a penalty of 0.
    counts = Counter(itertools.chain.from_iterable(held))
    shared_words = {word for word, n in counts.items() if n > 1}
    vocabulary: dict[str, int] = {}
    rows: list[int] = []
    columns: list[int] = []
    for row, memory_words in enumerate(held):
        for word in memory_words & shared_words:
            rows.append(row)
            columns.append(vocabulary.setdefault(word, len(vocabulary)))
    incidence = np.zeros((len(oldest_first), len(vocabulary)))
    incidence[rows, columns] = 1.0
    shared = incidence @ incidence.T
    sizes = np.array([len(memory_words) for memory_words in held], dtype=np.float64)
    smaller = np.minimum.outer(sizes, sizes)
    relevance = np.divide(shared, smaller, out=np.zeros_like(shared), where=smaller > 0)
    newer = np.triu(relevance, k=1)
    strongest = newer.max(axis=1, initial=0.0)
    penalty = np.minimum(strongest * INTERFERENCE_CAP, INTERFERENCE_CAP)
    return {
        memory.memory_id: value
        for memory, value in zip(oldest_first, penalty.tolist(), strict=True)
    }


def context_of(tags: Iterable[str], query_text: str | None) -> frozenset[str]:
    """What a memory tag is matched against for seed 003's ``C``, casefolded: the request's
    context tags and the keywords of its query (a tag of several words matches a tag only)."""
    words = keyword_set(query_text) if query_text else frozenset()
    return frozenset(tag.casefold() for tag in (*tags, *words))


@lru_cache(maxsize=8192)
def keyword_set(text: str) -> frozenset[str]:
    """Memoised: an agent's memories are ranked again at every step, and tokenising them is
    the largest cost of :func:`weighted` after interference."""
    return frozenset(keywords(text))


def memory_times(memories: Sequence[StoredMemory], clock: Clock) -> dict[str, tuple[int, bool]]:
    """Each memory's time on the clock's axis, by memory id, and whether it was imputed (see
    the module docstring). Expects memories already made unique."""
    in_order = sorted(memories, key=lambda m: m.seq)
    raw = [time_of(m, clock.axis) for m in in_order]
    first_known = next((t for t in raw if t is not None), clock.now)
    result: dict[str, tuple[int, bool]] = {}
    last = first_known
    for memory, time in zip(in_order, raw, strict=True):
        if time is None:
            result[memory.memory_id] = (last, True)
        else:
            last = time
            result[memory.memory_id] = (time, False)
    return result


def unique(
    memories: Iterable[StoredMemory], seen: set[tuple[object, ...]]
) -> Iterator[StoredMemory]:
    """Skip memories already seen under their id or their source event and level: a memory
    promoted from working to episodic memory derives from the same source event. The level
    keeps a summary apart from the memory of the event that triggered it."""
    for memory in memories:
        identity = ("memory", memory.memory_id)
        source = ("source", memory.source_event_id, memory.level)
        if identity in seen or source in seen:
            continue
        seen.update((identity, source))
        yield memory


def check_top_k(top_k: int) -> None:
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
