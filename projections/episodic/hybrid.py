"""What both episodic adapters share about reading: the selection a read makes, and hybrid search.

A read selects the agent's points, optionally some levels, and whatever a
:class:`~projections.retrieval.filters.MemoryFilter` asks. :func:`selection` turns both into one
adapter-neutral :class:`Selection`, which each adapter translates into its own Qdrant filter, so
Qdrant Edge and a Qdrant server filter alike. The payload fields it reads are those of
:func:`projections.memory.point_payload`.

Every filter field has a payload index (``tags_lc``, ``importance``, ``year``, ``step``, beside
``agent_id``, ``seq`` and ``level``), although the agent's tenant index already narrows a read to
a few hundred points: measured on Qdrant Edge at 1,000 agents x 50 memories, a search filtered
by tags, years and importance took 0.46 ms (dense) and 0.78 ms (hybrid) at p50 without them and
0.27 / 0.30 ms with them, reading the payloads being the cost; the apply rate moved within the
noise (8.8k -> 8.4k memories/s).

A hybrid search (:func:`fuse`) runs two sub-queries over the selection in one batch: the dense
one (cosine) and the lexical one (the ``lexical`` sparse vector with Qdrant's IDF modifier, the
IDF computed over the agent's memories), and fuses them with
:func:`projections.retrieval.relevance.rrf_order`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from projections.episodic.candidates import Scope
from projections.interfaces import ProjectionError
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.relevance import quantized, ranking, related, rrf_order

__all__ = [
    "LEXICAL_VECTOR",
    "FusedHit",
    "Selection",
    "ambiguous_cut",
    "checked_levels",
    "cosines",
    "dense_of",
    "fetch_depth",
    "fuse",
    "missing_similarities",
    "selection",
    "similarities",
    "warn_dense_only",
]

logger = logging.getLogger(__name__)

LEXICAL_VECTOR = "lexical"
"""The name of the sparse vector every point of a hybrid store carries."""

_LEVEL_OF_KIND = {"episodic": 0, "summary_l1": 1, "summary_l2": 2}
"""The kinds an episodic store holds: "working" lives in Redis, "fact" and "procedure" nowhere
yet."""


def checked_levels(levels: Sequence[int] | None) -> list[int] | None:
    """The levels to filter on, or None for all. An empty selection is refused rather than
    answered with nothing: it is a caller's mistake, never a question worth asking a store."""
    if levels is None:
        return None
    if not levels:
        raise ValueError("levels must name at least one level (None means every level)")
    return sorted(set(levels))


@dataclass(frozen=True, slots=True)
class Selection:
    """The points a read may return: one agent's, of some levels (None: all), carrying any of
    ``tags`` (casefolded; empty: any), at least ``min_importance``, and within the inclusive
    year and step bounds (a point without a year or step fails a bound on it).

    ``given_tags`` are the filter's tags as given and casefolded, for a store built before the
    casefolded ``tags_lc`` payload field existed, which can only match ``tags`` as stored.
    """

    agent_id: str
    levels: tuple[int, ...] | None = None
    tags: tuple[str, ...] = ()
    given_tags: tuple[str, ...] = ()
    min_importance: float | None = None
    year_from: int | None = None
    year_to: int | None = None
    step_from: int | None = None
    step_to: int | None = None
    occurred_from: float | None = None
    occurred_to: float | None = None
    """Bounds on ``occurred_ts``, the event's time in seconds since the epoch."""
    scope: Scope = "active"


def selection(
    agent_id: str,
    levels: Sequence[int] | None,
    memory_filter: MemoryFilter | None,
    scope: Scope = "active",
) -> Selection | None:
    """The selection of a read, or None when nothing in an episodic store can match it (only
    kinds it does not hold, or kinds whose levels ``levels`` excludes).

    An empty ``levels`` is refused (:func:`checked_levels`); the filter's kinds narrow the
    levels further.
    """
    wanted = checked_levels(levels)
    if memory_filter is None:
        return Selection(agent_id, None if wanted is None else tuple(wanted), scope=scope)
    if memory_filter.kinds:
        kind_levels = {_LEVEL_OF_KIND[k] for k in memory_filter.kinds if k in _LEVEL_OF_KIND}
        allowed = kind_levels if wanted is None else kind_levels & set(wanted)
        if not allowed:
            return None
        wanted = sorted(allowed)
    return Selection(
        agent_id,
        None if wanted is None else tuple(wanted),
        tags=tuple(sorted({tag.casefold() for tag in memory_filter.tags})),
        given_tags=tuple(
            sorted({*memory_filter.tags, *(tag.casefold() for tag in memory_filter.tags)})
        ),
        min_importance=memory_filter.min_importance,
        year_from=memory_filter.year_from,
        year_to=memory_filter.year_to,
        step_from=memory_filter.step_from,
        step_to=memory_filter.step_to,
        occurred_from=_seconds(memory_filter.occurred_after),
        occurred_to=_seconds(memory_filter.occurred_before),
        scope=scope,
    )


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def fetch_depth(limit: int) -> int:
    """How deep each sub-query of a hybrid search first reads: twice the limit, so that the
    canonical tie order (:func:`~projections.retrieval.relevance.ranking`) decides which of
    several equally scored memories make the cut at ``limit``, not the order a backend returned
    them in. The sub-queries read ids and scores only, so the extra depth costs little."""
    return 2 * limit


def ambiguous_cut(hits: Sequence[tuple[str, float]], limit: int, depth: int) -> bool:
    """Whether a sub-query read too little to decide its best ``limit``: it returned all
    ``depth`` it was asked for, and the score at the cut is positive (see :func:`fuse`) and
    ties (:func:`~projections.retrieval.relevance.quantized`) with the lowest it returned, so a
    memory it did not return may tie with those at the cut, and which of them a backend returns
    first is its own business. The caller then reads deeper; an agent holds few memories, so
    this ends quickly."""
    if len(hits) < depth or len(hits) <= limit:
        return False
    scores = sorted((score for _, score in hits), reverse=True)
    return related(scores[limit - 1]) and quantized(scores[limit - 1]) == quantized(scores[-1])


@dataclass(frozen=True, slots=True)
class FusedHit:
    memory_id: str
    lexical: float | None
    """The memory's lexical score, when the lexical sub-query found it."""


def fuse(
    dense: Sequence[tuple[str, float]], lexical: Sequence[tuple[str, float]], limit: int
) -> list[FusedHit]:
    """The best ``limit`` memories by RRF of the two sub-rankings, each cut at ``limit`` after
    sorting it canonically (score, then id). Either side may be empty (a query vector of zeros,
    a query text of stopwords only): the other then ranks alone, and with both empty nothing
    is relevant.

    Only a positive cosine earns a dense rank
    (:func:`~projections.retrieval.relevance.related`); lexical scores are positive for every
    memory sharing a stem, and only those return.
    """
    lexical_scores = dict(lexical)
    dense_scores = {memory_id: score for memory_id, score in dense if related(score)}
    rankings = [ranking(dense_scores)[:limit], ranking(lexical_scores)[:limit]]
    return [
        FusedHit(memory_id, lexical_scores.get(memory_id))
        for memory_id in rrf_order([r for r in rankings if r])[:limit]
    ]


def missing_similarities(
    query: np.ndarray, hits: Sequence[FusedHit], dense: Mapping[str, float]
) -> bool:
    """Whether some hit has no dense score (the lexical sub-query alone found it), so its
    embedding must be read back to give it a similarity."""
    return bool(np.any(query)) and any(hit.memory_id not in dense for hit in hits)


def similarities(
    query: np.ndarray,
    hits: Sequence[str],
    dense: Mapping[str, float],
    stored: Mapping[str, Sequence[float]],
) -> list[float]:
    """Each hit's similarity: its dense sub-query score (clipped to [-1, 1]) when it has one,
    else the cosine with its stored embedding, which ``stored`` must hold; 0 for a query
    vector of zeros, which has no direction."""
    if not np.any(query):
        return [0.0] * len(hits)
    missing = [memory_id for memory_id in hits if memory_id not in dense]
    computed = dict(zip(missing, cosines(query, [stored[i] for i in missing]), strict=True))
    return [
        min(1.0, max(-1.0, dense[memory_id])) if memory_id in dense else computed[memory_id]
        for memory_id in hits
    ]


def cosines(query: np.ndarray, stored: Sequence[Sequence[float]] | np.ndarray) -> list[float]:
    """The cosine of a query with each stored vector, clipped to [-1, 1] as the stores' scores
    are (0 for a vector of zeros).

    For the memories the lexical sub-query alone found, which have no dense score, and for
    working memories, which Redis keeps without embeddings.
    """
    if len(stored) == 0:
        return []
    vectors = np.asarray(stored, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1) * np.float32(np.linalg.norm(query))
    dots = vectors @ query.astype(np.float32)
    safe = np.where(norms > 0.0, norms, np.float32(1.0))
    return [float(c) for c in np.clip(np.where(norms > 0.0, dots / safe, 0.0), -1.0, 1.0)]


def dense_of(vector: Any) -> list[float]:
    """The embedding of a point read back with only the unnamed vector asked for: the list
    itself, or the unnamed entry of a dict of named vectors (clients differ in which they
    return)."""
    if isinstance(vector, dict):
        vector = vector.get("")
    if not isinstance(vector, list):
        raise ProjectionError("a stored point came back without its embedding")
    return vector


def warn_dense_only(where: str) -> None:
    logger.warning(
        "the episodic store %s has no %r sparse vector (it was built before hybrid search): "
        "searches use the embedding alone and tag filters match tags case-sensitively. "
        "Rebuild it from the log with `engram replay` to search by keywords too",
        where,
        LEXICAL_VECTOR,
    )
