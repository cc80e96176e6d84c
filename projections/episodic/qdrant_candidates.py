"""The qdrant-client query of a ranking's candidates (:mod:`projections.episodic.candidates`),
the same prefetches as on Qdrant Edge (:mod:`projections.episodic.edge_candidates`)."""

from __future__ import annotations

from dataclasses import dataclass

from qdrant_client import models

from projections.episodic.candidates import CandidateSignals
from projections.episodic.hybrid import LEXICAL_VECTOR


@dataclass(frozen=True, slots=True)
class CandidateQuery:
    """The arguments of one ``query_points`` call."""

    prefetch: list[models.Prefetch]
    query: models.OrderByQuery | list[float]
    limit: int


def _order_by(key: str, direction: models.Direction) -> models.OrderByQuery:
    return models.OrderByQuery(order_by=models.OrderBy(key=key, direction=direction))


def candidate_query(
    signals: CandidateSignals,
    flt: models.Filter,
    agent_filter: models.Filter,
    *,
    tags_field: str,
    lexical: bool,
) -> CandidateQuery:
    """As :func:`projections.episodic.edge_candidates.candidate_request`; ``agent_filter`` is
    the corpus the lexical signal's IDF is counted over (the agent's memories)."""
    limit = signals.limit
    desc, asc = models.Direction.DESC, models.Direction.ASC
    newest = _order_by("seq", desc)
    prefetch: list[models.Prefetch] = []
    nearest = None if signals.vector is None or not signals.nearest else signals.vector.tolist()
    if signals.at_seqs:
        at = [
            models.FieldCondition(key="seq", range=models.Range(gte=low, lte=high))
            for low, high in signals.at_seq_ranges
        ]
        beside = models.Filter(must=[flt, models.Filter(should=at)])
        prefetch.append(models.Prefetch(query=newest, filter=beside, limit=signals.at_seqs_limit))
        return CandidateQuery(
            prefetch, newest if nearest is None else nearest, signals.at_seqs_limit
        )
    if signals.recency:
        prefetch.append(models.Prefetch(query=newest, filter=flt, limit=limit))
        prefetch.append(models.Prefetch(query=_order_by("seq", asc), filter=flt, limit=1))
    if signals.importance:
        for direction, depth in ((desc, limit), (asc, 1)):
            by_importance = _order_by("importance", direction)
            prefetch.append(models.Prefetch(query=by_importance, filter=flt, limit=depth))
    if signals.occurred:
        latest = _order_by("occurred_ts", desc)
        prefetch.append(models.Prefetch(query=latest, filter=flt, limit=limit))
    if nearest is not None:
        prefetch.append(models.Prefetch(query=nearest, filter=flt, limit=limit))
    if signals.lexical and lexical:
        sparse = models.SparseVector(
            indices=list(signals.lexical.indices), values=list(signals.lexical.values)
        )
        idf = models.SearchParams(idf=models.IdfCorpusParams(corpus=agent_filter))
        prefetch.append(
            models.Prefetch(query=sparse, using=LEXICAL_VECTOR, filter=flt, limit=limit, params=idf)
        )
    if signals.tags:
        tags = signals.casefolded_tags if tags_field == "tags_lc" else signals.given_tags
        tagged = models.FieldCondition(key=tags_field, match=models.MatchAny(any=list(tags)))
        with_tags = models.Filter(must=[flt, tagged])
        prefetch.append(models.Prefetch(query=newest, filter=with_tags, limit=limit))
    return CandidateQuery(
        prefetch=prefetch,
        query=newest if nearest is None else nearest,
        limit=sum(p.limit or 0 for p in prefetch),
    )
