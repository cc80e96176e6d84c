"""Relevance of each memory of a pool to a query, as the relevance and generative modes rank by:
three steps, each pure and each shown in the result's breakdown.

1. Words and meaning: the cosine with the query embedding blended with BM25 over the pool
   (:func:`~projections.retrieval.relevance.blended_scores`).
2. Time: when the query names a period ("in the summer of 2023", "last year" with a
   ``current_time``; :mod:`~projections.retrieval.time_expressions`), a memory that neither
   happened in it nor names it keeps :data:`OUT_OF_PERIOD` of its relevance. A factor rather
   than a filter: a plan told in April about August answers a question about the summer.
3. Conversation: each memory lifted by its best neighbouring turn
   (:mod:`~projections.retrieval.conversation_context`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from projections.memory import StoredMemory
from projections.retrieval.conversation_context import with_conversation_context
from projections.retrieval.relevance import DENSE_SHARE_MODEL_FREE, blended_scores
from projections.retrieval.time_expressions import TimeWindow, mentions, window_of

__all__ = ["OUT_OF_PERIOD", "QueryRelevance", "in_period", "relevance_of", "relevance_parts"]

OUT_OF_PERIOD = 0.5
"""The share of its relevance a memory keeps when the query names a period it is not of.
Measured with the hashing embedder on the repository's two conversational sets (MRR): 0.5
and 0.75 both helped (hand-written set 0.395 -> 0.413 and 0.406), recall@10 moved by at most
one answer; the questions naming a period are few (10 of 149)."""


def in_period(memory: StoredMemory, window: TimeWindow) -> bool:
    """Whether the memory happened in the window or its text names it."""
    return window.holds(memory.occurred_at) or mentions(memory.content, window)


class QueryRelevance(Mapping[str, dict[str, float]]):
    """Per memory id, its breakdown (see :func:`relevance_parts`), built when it is asked for:
    a ranking computes the relevance of a few hundred candidates to show a handful. With a
    breakdown and a blend record built for each of 190 candidates their relevance took 0.72 ms,
    without them 0.54 (timeit). ``relevance`` holds the score ranked by, for every memory."""

    def __init__(
        self,
        relevance: dict[str, float],
        own: Mapping[str, float] | None = None,
        context: Mapping[str, float] | None = None,
        lexical: Mapping[str, float] | None = None,
        similarity: Mapping[str, float | None] | None = None,
        period: Mapping[str, bool] | None = None,
    ) -> None:
        self.relevance = relevance
        self._own = own or {}
        self._context = context or {}
        self._lexical = lexical or {}
        self._best_lexical = max(self._lexical.values(), default=0.0)
        self._similarity = similarity or {}
        self._period = period

    def __getitem__(self, key: str) -> dict[str, float]:
        relevance = self.relevance[key]
        if key not in self._own:
            return {"relevance": relevance}
        shown = {"relevance": relevance, "own": self._own[key]}
        if key in self._context:
            shown["context"] = self._context[key]
        if self._period is not None:
            shown["in_period"] = 1.0 if self._period[key] else 0.0
        similarity = self._similarity.get(key)
        if similarity is not None:
            shown["similarity"] = similarity
        lexical = self._lexical.get(key)
        if lexical is not None:
            shown["lexical"] = lexical
            shown["lexical_norm"] = lexical / self._best_lexical
        return shown

    def __iter__(self) -> Iterator[str]:
        return iter(self.relevance)

    def __len__(self) -> int:
        return len(self.relevance)


def relevance_parts(
    query: str | None,
    memories: Sequence[StoredMemory],
    *,
    dense_share: float = DENSE_SHARE_MODEL_FREE,
    now: datetime | None = None,
) -> QueryRelevance:
    """Per memory id, its relevance to ``query`` and what it was computed from:
    ``relevance`` in [0, 1], the one ranked by; ``own``, the memory's own relevance (step 1,
    times :data:`OUT_OF_PERIOD` outside a period the query names); ``context``, its best
    neighbour's ``own``, when positive; ``in_period`` 1 or 0 when the query names a period;
    ``similarity``, the cosine with the query embedding, when the memory has one; ``lexical``,
    its BM25 over the pool, and ``lexical_norm``, that divided by the pool's best, when it
    shares a word stem with the query. ``now`` anchors relative expressions ("last year").
    Without a query every memory has relevance 0."""
    if not query:
        return QueryRelevance({m.memory_id: 0.0 for m in memories})
    fused, lexical = blended_scores(query, memories, dense_share=dense_share)
    window = window_of(query, now)
    period = {m.memory_id: window is None or in_period(m, window) for m in memories}
    own = {key: score * (1.0 if period[key] else OUT_OF_PERIOD) for key, score in fused.items()}
    lifted, context = with_conversation_context(own, memories)
    return QueryRelevance(
        {key: lifted[key] for key in fused},
        own,
        context,
        lexical,
        {m.memory_id: m.similarity for m in memories},
        None if window is None else period,
    )


def relevance_of(
    query: str | None,
    memories: Sequence[StoredMemory],
    *,
    dense_share: float = DENSE_SHARE_MODEL_FREE,
    now: datetime | None = None,
) -> dict[str, float]:
    """Relevance to ``query`` by memory id (see :func:`relevance_parts`)."""
    return relevance_parts(query, memories, dense_share=dense_share, now=now).relevance
