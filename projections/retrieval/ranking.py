"""The request's mode applied to memories already read and filtered: which pure ranking
function of :mod:`projections.retrieval` ranks them, with what. Apart from the engine, which
reads the stores, so that a ranking can be recomputed from memories alone (tests, recall).
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.memory import StoredMemory
from projections.retrieval.basic import (
    DEFAULT_PROFILE,
    PROFILES,
    SYSTEM_2_THRESHOLD,
    StoredArousal,
    basic,
    constrained,
)
from projections.retrieval.by_relevance import by_relevance
from projections.retrieval.generative import generative
from projections.retrieval.models import DEFAULT_RECENT_DAYS, RetrievalRequest
from projections.retrieval.query_relevance import relevance_of, relevance_parts
from projections.retrieval.recent import recent
from projections.retrieval.relevance import DENSE_SHARE_MODEL_FREE
from projections.retrieval.saliency import saliency
from projections.retrieval.scoring import (
    QUERY_RELEVANCE_WEIGHT,
    Moment,
    Ranking,
    Weights,
    hour_of,
    two_phase,
    weighted,
)

__all__ = ["QUERY_RELEVANCE_WEIGHT", "rank", "weights_of"]


def rank(
    request: RetrievalRequest,
    working: Sequence[StoredMemory],
    episodic: Sequence[StoredMemory],
    *,
    arousal: StoredArousal | None = None,
    dense_share: float = DENSE_SHARE_MODEL_FREE,
) -> Ranking:
    """The request's mode applied to memories already read and filtered; pure. ``arousal``, the
    agent's stored one, is used by the constrained mode only: the request's own arousal, if
    any, wins (judged against seed 003's threshold 0.5: it needs no store, so an episodic-only
    retrieval with it runs while Redis is down), else the stored one (clamped to [0, 1]) with
    its agent type's threshold, else 0. ``dense_share``
    by the modes that rank by relevance (:func:`relevance_parts`). Working memories are passed
    first everywhere, so a memory in both stores is ranked as working."""
    everything = [*working, *episodic]
    hour = None if request.current_time is None else hour_of(request.current_time)
    now: Moment = {
        "current_year": request.current_year,
        "current_step": request.current_step,
        "current_hour": hour,
    }
    mode = request.mode
    if mode == "weighted":
        return weighted(
            everything,
            top_k=request.top_k,
            context_tags=request.tags,
            query_text=request.query,
            weights=weights_of(request),
            **now,
        )
    if mode == "saliency":
        return saliency(everything, top_k=request.top_k, **now)
    if mode == "basic":
        return basic(everything, **now)
    if mode == "constrained":
        profile = PROFILES[request.profile or DEFAULT_PROFILE]
        level = request.arousal
        if level is None:
            level = 0.0 if arousal is None else min(max(arousal.arousal, 0.0), 1.0)
        return constrained(
            everything,
            profile=profile,
            arousal=level,
            threshold=SYSTEM_2_THRESHOLD if arousal is None else arousal.threshold,
            **now,
        )
    if mode == "generative":
        return generative(
            everything,
            top_k=request.top_k,
            relevance=relevance_of(
                request.query, everything, dense_share=dense_share, now=request.current_time
            ),
            weights=request.generative,
            **now,
        )
    if mode == "recent":
        return _recent(request, everything)
    if mode == "relevance":
        if request.query is None:
            raise ValueError("mode 'relevance' ranks by relevance to a query: give a query")
        parts = relevance_parts(
            request.query, everything, dense_share=dense_share, now=request.current_time
        )
        return by_relevance(
            everything,
            top_k=request.top_k,
            relevance=parts.relevance,
            parts=parts,
            **now,
        )
    return two_phase(working, episodic, top_k=request.top_k, **now)


def _recent(request: RetrievalRequest, memories: Sequence[StoredMemory]) -> Ranking:
    """Mode recent over ``memories``: the request must be pinned, since a ranking reads no
    clock (:meth:`~projections.retrieval.models.RetrievalRequest.pinned`)."""
    if request.current_time is None:
        raise ValueError(
            "mode 'recent' counts back from current_time: pin the request first "
            "(RetrievalRequest.pinned)"
        )
    days = request.days or DEFAULT_RECENT_DAYS
    return recent(memories, top_k=request.top_k, now=request.current_time, days=days)


def weights_of(request: RetrievalRequest) -> Weights:
    """The weights the weighted mode ranks ``request`` by: the request's, else seed 003's
    defaults. A query's relevance weight (:data:`QUERY_RELEVANCE_WEIGHT`) is the request's
    already: it is filled in where the request is read, so the record of the request names it."""
    return request.weights or Weights()
