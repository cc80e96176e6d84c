"""Relevance of memories to a query text: a dense (embedding) and a lexical (BM25) signal,
fused by Reciprocal Rank Fusion.

Why fuse ranks rather than scores: a cosine and a BM25 sum live on unrelated scales (BM25 grows
with the number of shared words and their rarity, a cosine does not), so any weighted sum of the
two needs per-corpus calibration, while ranks need none. RRF (Cormack, Clarke and Buettcher,
"Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009)
scores a memory ``sum over rankings of 1 / (k + rank)``, ranks counted from 1, with k = 60, the
constant of that paper: a memory near the top of either ranking rises, one near the top of both
rises most.

Why fuse here and not with Qdrant's own ``prefetch`` + ``Fusion.RRF``: Qdrant returns only the
fused score, so a result could not show its dense and lexical parts in its score breakdown; and
its constant differs between versions and clients (qdrant-client's local mode and older servers
use ``1 / (k + rank - 1)`` with k = 2, newer servers a configurable k defaulting to 60), so the two
episodic adapters could rank differently. Fusing the two sub-rankings in this one pure function
makes Qdrant Edge and a Qdrant server give the same order by construction.

:func:`hybrid_relevance` scores a candidate pool that no single store holds (Redis working
memories beside episodic ones) the same way the episodic stores score their own memories: the
same sparse vectors (:mod:`processors.lexical`), IDF over the pool with Qdrant's formula, and RRF.

:func:`blended_scores` is what the retrieval engine ranks by: a convex blend of the two
*scores*, not of ranks. RRF suits merging long result lists from different systems; over one
agent's pool of some 60 memories its constant k = 60 flattens the top (first and second place
differ by 1/61 - 1/62), so a weak keyword match outweighs a clear semantic lead. Measured on
``tests/benchmarks/bench_retrieval_quality.py`` (149 questions; MRR), the blend beat RRF for
both embedders: hashing 0.317 (RRF) -> 0.388, MiniLM 0.476 (RRF) -> 0.627 (dense alone 0.640).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from processors.lexical import document_vector, idf, query_vector
from projections.memory import StoredMemory

__all__ = [
    "DENSE_SHARE_MODEL_FREE",
    "DENSE_SHARE_SEMANTIC",
    "RRF_K",
    "SIGNIFICANT_DIGITS",
    "SIMILARITY_FLOOR",
    "RelevanceParts",
    "blended_scores",
    "dense_share_for",
    "hybrid_relevance",
    "lexical_scores",
    "quantized",
    "ranking",
    "related",
    "rrf",
    "rrf_order",
]

RRF_K = 60
SIGNIFICANT_DIGITS = 4
"""Scores equal to this many significant digits rank as ties (see :func:`quantized`)."""
SIMILARITY_FLOOR = 1e-6
"""A cosine at or below this earns no dense rank (see :func:`related`)."""


@dataclass(frozen=True, slots=True)
class RelevanceParts:
    """One memory's relevance and the two signals it was fused from.

    ``dense`` is the cosine similarity to the query embedding, ``lexical`` the BM25 score (None
    when the memory shares no stem with the query); the ranks count from 1 within the pool (None
    without that signal); ``fused``, in [0, 1], is the relevance they were fused into: the RRF
    score divided by its best possible value ``2 / (k + 1)`` in :func:`hybrid_relevance`.
    """

    dense: float | None
    """The similarity as given; it has a rank only when positive (:func:`related`)."""
    lexical: float | None
    dense_rank: int | None
    lexical_rank: int | None
    fused: float


def quantized(score: float) -> float:
    """A score rounded to :data:`SIGNIFICANT_DIGITS` significant digits, for ranking only.

    Float32 arithmetic makes mathematically equal scores differ in their last bits, and
    differently in Qdrant Edge, a Qdrant server and numpy (each normalises and sums in its own
    order: two memories of the same shape scored 0.53452247 and 0.53452251 on Edge). Ranking
    raw scores would let that noise order them, differently per backend; on a grid of four
    significant digits they tie, and the id decides.
    """
    return float(f"{score:.{SIGNIFICANT_DIGITS}g}")


def related(similarity: float) -> bool:
    """Whether a cosine earns a dense rank: only a positive one does. A memory orthogonal or
    opposite to the query has no semantic bond with it, and ranking many such memories would
    let their ids pass for relevance (the hashing embedder gives exactly 0.0 to every memory
    sharing no word with the query; the floor absorbs float noise around that 0)."""
    return similarity > SIMILARITY_FLOOR


def ranking(scores: Mapping[str, float]) -> list[str]:
    """Ids by descending score (:func:`quantized`), ties broken by id: a canonical order that
    does not depend on the order, nor the float noise, a store returned equal scores with."""
    return sorted(scores, key=lambda key: (-quantized(scores[key]), key))


def rrf(
    rankings: Sequence[Sequence[str]], k: int = RRF_K, weights: Sequence[float] | None = None
) -> dict[str, float]:
    """Reciprocal Rank Fusion: ``sum over rankings of weight / (k + rank)``, rank 1 = best,
    every weight 1 unless given (weighted RRF, as Qdrant's ``Rrf(weights=...)``).

    An id missing from a ranking gets nothing from it. Each ranking must list an id once.
    """
    if k < 1:
        raise ValueError(f"the RRF constant must be at least 1, got {k}")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings) or any(w < 0.0 for w in weights):
        raise ValueError("give one non-negative weight per ranking")
    fused: dict[str, float] = {}
    for ids, weight in zip(rankings, weights, strict=True):
        if len(set(ids)) != len(ids):
            raise ValueError("a ranking lists an id twice")
        for rank, key in enumerate(ids, start=1):
            fused[key] = fused.get(key, 0.0) + weight / (k + rank)
    return fused


def rrf_order(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Ids by descending RRF score. Ties (one memory first by meaning, another first by words)
    go to the better single rank, then to the id, so the order is fully determined."""
    fused = rrf(rankings, k)
    best: dict[str, int] = {}
    for ids in rankings:
        for rank, key in enumerate(ids, start=1):
            best[key] = min(best.get(key, rank), rank)
    return sorted(fused, key=lambda key: (-fused[key], best[key], key))


DOCUMENT_VECTOR_CACHE = 65_536
"""How many texts' sparse vectors the query path keeps. Every query scores BM25 over the agent's
whole pool, and stemming the pool again for each query was ~60% of a relevance ranking's
profiled time (a ranking of 100 memories: 4.64 ms without the cache, 1.15 ms with it). A vector
depends on the text alone, so a cached one is never stale; 65,536 covers the pools of the ~650
most recently queried agents of 100 memories, in ~55 MB for 10-word texts (tracemalloc)."""


@lru_cache(maxsize=DOCUMENT_VECTOR_CACHE)
def _document_weights(text: str) -> dict[int, float]:
    """A text's sparse vector as a mapping, so a query's few stems are looked up in it rather
    than the text's every stem compared with them."""
    vector = document_vector(text)
    return dict(zip(vector.indices, vector.values, strict=True))


@lru_cache(maxsize=DOCUMENT_VECTOR_CACHE)
def _shared_weights(wanted: tuple[int, ...], text: str) -> tuple[tuple[int, float], ...]:
    """The BM25 term weights of a text for the stems of a query it holds. Kept because a
    retrieval scores its pool twice, once to pick the turns to read beside the best
    (:mod:`projections.retrieval.conversation_context`) and once to rank; the second time
    costs a lookup instead of a comparison of the query's stems with the text's."""
    document = _document_weights(text)
    return tuple((index, document[index]) for index in wanted if index in document)


def lexical_scores(query_text: str, memories: Sequence[StoredMemory]) -> dict[str, float]:
    """BM25 of each memory sharing a stem with the query, IDF computed over ``memories``.

    The score is what a Qdrant sparse search with the IDF modifier computes over a corpus of
    exactly these memories: ``sum over shared stems of idf(N, n) * bm25_tf``. A memory listed
    twice (by id) counts once.
    """
    query = query_vector(query_text)
    if not query or not memories:
        return {}
    wanted = tuple(query.indices)
    contents = {m.memory_id: m.content for m in memories}
    weights: dict[str, tuple[tuple[int, float], ...]] = {}
    containing = dict.fromkeys(wanted, 0)
    for memory_id, content in contents.items():
        shared = _shared_weights(wanted, content)
        if shared:
            weights[memory_id] = shared
            for index, _ in shared:
                containing[index] += 1
    documents = len(contents)
    term_idf = {index: idf(documents, n) for index, n in containing.items() if n}
    return {
        memory_id: sum(term_idf[index] * value for index, value in shared)
        for memory_id, shared in weights.items()
    }


def hybrid_relevance(
    query_text: str,
    memories: Sequence[StoredMemory],
    k: int = RRF_K,
    *,
    dense_weight: float = 1.0,
    lexical_weight: float = 1.0,
) -> dict[str, RelevanceParts]:
    """Relevance of every memory of a candidate pool to a query text, by memory id.

    Each memory's ``similarity`` must be filled in by the caller (a memory without one has no
    dense rank). As in the episodic stores' hybrid search
    (:func:`projections.episodic.hybrid.fuse`), the dense ranking holds the memories of positive
    similarity and the lexical one those sharing a stem with the query; both rank ties by id.

    The weights make it weighted RRF; ``fused`` is then divided by
    ``(dense_weight + lexical_weight) / (k + 1)``. Equal weights are the default and the
    stores' fusion. Measured on the repository's paraphrased conversational set
    (``tests/benchmarks/bench_retrieval_quality.py``), fusion with BM25 helps the hashing
    embedder (MRR 0.195 -> 0.312 on bare turns, above BM25's 0.270) but pulls a semantic one
    down (MiniLM 0.598 -> 0.501, about 0.53 with ``dense_weight=3``), where questions share few
    words with their answers: a caller with a semantic embedder may weigh its side more.
    """
    dense = {
        m.memory_id: m.similarity
        for m in memories
        if m.similarity is not None and related(m.similarity)
    }
    lexical = lexical_scores(query_text, memories)
    dense_ranking = ranking(dense)
    lexical_ranking = ranking(lexical)
    weights = (dense_weight, lexical_weight)
    fused = rrf([dense_ranking, lexical_ranking], k, weights)
    best = sum(weights) / (k + 1)
    if best <= 0.0:
        raise ValueError("at least one of the two weights must be positive")
    dense_rank = {key: rank for rank, key in enumerate(dense_ranking, start=1)}
    lexical_rank = {key: rank for rank, key in enumerate(lexical_ranking, start=1)}
    return {
        m.memory_id: RelevanceParts(
            dense=m.similarity,
            lexical=lexical.get(m.memory_id),
            dense_rank=dense_rank.get(m.memory_id),
            lexical_rank=lexical_rank.get(m.memory_id),
            fused=fused.get(m.memory_id, 0.0) / best,
        )
        for m in memories
    }


DENSE_SHARE_MODEL_FREE = 0.75
"""The dense side's share in :func:`blended_scores` for the model-free hashing embedder,
whose cosine is itself a keyword signal: BM25 adds what it lacks (stemming, rarity). The
blend's usual default (Weaviate's hybrid ``alpha``); on the quality set MRR 0.262 (cosine
alone) -> 0.388, bare turns 0.195 -> 0.320."""
DENSE_SHARE_SEMANTIC = 0.9
"""The dense share for a semantic embedder, which already matches paraphrases that share no
word with the question: keywords only settle near-ties (names, dates). On the quality set,
whose questions are paraphrased, it kept MiniLM's R@5 (0.812) and MRR within 0.013 of the
cosine alone, and raised R@5 on bare turns 0.772 -> 0.805; a larger keyword share lowered both."""


def dense_share_for(embedder_id: str) -> float:
    """The default dense share for an embedder, by its id (``Embedder.id``)."""
    return DENSE_SHARE_MODEL_FREE if embedder_id.startswith("hashing") else DENSE_SHARE_SEMANTIC


def blended_scores(
    query_text: str, memories: Sequence[StoredMemory], *, dense_share: float
) -> tuple[dict[str, float], dict[str, float]]:
    """Relevance of every memory of a pool to a query text, by memory id:
    ``fused = dense_share * max(similarity, 0) + (1 - dense_share) * bm25 / best_bm25``; and
    the BM25 scores it blended (of the memories sharing a stem with the query).

    The cosine is already on a fixed scale; BM25 is not (it grows with shared words and their
    rarity), so it is divided by the pool's best BM25, which puts the best keyword match at 1.
    A memory without a ``similarity`` (the caller could not embed it) has no dense part;
    one sharing no stem has no lexical part. ``fused`` lies in [0, 1]. No record per memory:
    a ranking computes this for a few hundred candidates to show a handful (see
    :class:`~projections.retrieval.query_relevance.QueryRelevance` for what that saved).
    """
    if not 0.0 <= dense_share <= 1.0:
        raise ValueError(f"dense_share must lie in [0, 1], got {dense_share}")
    dense = {
        m.memory_id: m.similarity
        for m in memories
        if m.similarity is not None and related(m.similarity)
    }
    lexical = lexical_scores(query_text, memories)
    best_lexical = max(lexical.values(), default=0.0)
    fused: dict[str, float] = {}
    for m in memories:
        key = m.memory_id
        cosine = dense.get(key, 0.0)
        keyword = lexical.get(key, 0.0) / best_lexical if best_lexical > 0.0 else 0.0
        fused[key] = min(1.0, dense_share * min(cosine, 1.0) + (1.0 - dense_share) * keyword)
    return fused, lexical
