"""Qdrant Edge filters of the reads: an agent's points, a selection's."""

from __future__ import annotations

import qdrant_edge as qe

from projections.episodic.hybrid import Selection


def agents_filter(agent_ids: frozenset[str]) -> qe.Filter:
    return qe.Filter(must=[qe.FieldCondition(key="agent_id", match=qe.MatchAny(sorted(agent_ids)))])


def agent_filter(agent_id: str) -> qe.Filter:
    return qe.Filter(must=[qe.FieldCondition(key="agent_id", match=qe.MatchValue(agent_id))])


def _range(key: str, low: float | None, high: float | None) -> list[qe.FieldCondition]:
    if low is None and high is None:
        return []
    return [qe.FieldCondition(key=key, range=qe.RangeFloat(gte=low, lte=high))]


def selection_filter(chosen: Selection, *, tags_field: str = "tags_lc") -> qe.Filter:
    """The Edge filter of a selection; ``tags_field`` is "tags" on a pre-hybrid shard."""
    must: list[qe.ConditionType] = [
        qe.FieldCondition(key="agent_id", match=qe.MatchValue(chosen.agent_id))
    ]
    if chosen.levels is not None:
        must.append(qe.FieldCondition(key="level", match=qe.MatchAny(list(chosen.levels))))
    if chosen.tags:
        tags = chosen.tags if tags_field == "tags_lc" else chosen.given_tags
        must.append(qe.FieldCondition(key=tags_field, match=qe.MatchAny(list(tags))))
    must += _range("importance", chosen.min_importance, None)
    must += _range("year", chosen.year_from, chosen.year_to)
    must += _range("step", chosen.step_from, chosen.step_to)
    return qe.Filter(must=must)
