"""qdrant-client filters of the reads, condition for condition those of
:mod:`projections.episodic.edge_filters`."""

from __future__ import annotations

from qdrant_client import models

from projections.episodic.candidates import Scope
from projections.episodic.hybrid import Selection


def forgotten_filter(ids: frozenset[str], bounds: dict[str, int]) -> models.Filter:
    """As :func:`projections.episodic.edge_filters.forgotten_filter`, for a Qdrant server."""
    plain = sorted(i for i in ids if i not in bounds)
    either: list[models.Condition] = (
        [models.Filter(must=[models.HasIdCondition(has_id=list(plain))])] if plain else []
    )
    either += [
        models.Filter(
            must=[
                models.HasIdCondition(has_id=[i]),
                models.FieldCondition(key="seq", range=models.Range(lte=bounds[i])),
            ]
        )
        for i in sorted(ids - set(plain))
    ]
    return models.Filter(should=either)


def agent_filter(agent_id: str, scope: Scope = "active") -> models.Filter:
    """The agent's points in ``scope``: what its reads see, and the corpus of its BM25's IDF."""
    return selection_filter(Selection(agent_id, scope=scope))


ACTIVE = models.Filter(
    must_not=[models.FieldCondition(key="archived", match=models.MatchValue(value=1))]
)
"""Every agent's active points."""


def _range(key: str, low: float | None, high: float | None) -> list[models.Condition]:
    if low is None and high is None:
        return []
    return [models.FieldCondition(key=key, range=models.Range(gte=low, lte=high))]


def selection_filter(chosen: Selection, *, tags_field: str = "tags_lc") -> models.Filter:
    """The filter of a selection, condition for condition that of the Edge adapter."""
    must: list[models.Condition] = [
        models.FieldCondition(key="agent_id", match=models.MatchValue(value=chosen.agent_id))
    ]
    if chosen.levels is not None:
        must.append(
            models.FieldCondition(key="level", match=models.MatchAny(any=list(chosen.levels)))
        )
    if chosen.tags:
        tags = chosen.tags if tags_field == "tags_lc" else chosen.given_tags
        must.append(models.FieldCondition(key=tags_field, match=models.MatchAny(any=list(tags))))
    must += _range("importance", chosen.min_importance, None)
    must += _range("year", chosen.year_from, chosen.year_to)
    must += _range("step", chosen.step_from, chosen.step_to)
    must += _range("occurred_ts", chosen.occurred_from, chosen.occurred_to)
    archived = models.FieldCondition(key="archived", match=models.MatchValue(value=1))
    if chosen.scope == "active":
        return models.Filter(must=must, must_not=[archived])
    if chosen.scope == "archive":
        must.append(archived)
    return models.Filter(must=must)
