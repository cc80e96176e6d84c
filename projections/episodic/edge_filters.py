"""Qdrant Edge filters of the reads: an agent's points, a selection's."""

from __future__ import annotations

from uuid import UUID

import qdrant_edge as qe

from projections.episodic.candidates import Scope
from projections.episodic.hybrid import Selection


def agents_filter(agent_ids: frozenset[str]) -> qe.Filter:
    return qe.Filter(must=[qe.FieldCondition(key="agent_id", match=qe.MatchAny(sorted(agent_ids)))])


def forgotten_filter(ids: frozenset[str], bounds: dict[str, int]) -> qe.Filter:
    """The points a batch's forgettings reach: each id, of at most its bound's seq where the
    forgetting names one (:attr:`~projections.episodic.changes.EpisodicChanges.bounds`)."""
    plain: set[int | UUID | str] = {i for i in ids if i not in bounds}
    either: list[qe.ConditionType] = [qe.Filter(must=[qe.HasIdCondition(plain)])] if plain else []
    either += [
        qe.Filter(
            must=[
                qe.HasIdCondition({i}),
                qe.FieldCondition(key="seq", range=qe.RangeFloat(lte=bounds[i])),
            ]
        )
        for i in sorted(i for i in ids if i in bounds)
    ]
    return qe.Filter(should=either)


def forgetting_updates(
    retired: frozenset[str], deletes: frozenset[str], bounds: dict[str, int]
) -> list[qe.UpdateOperation]:
    """A batch's forgettings as Edge updates: retired points archived, deleted ones deleted.
    By filter: a point an erasure removed is passed over, not an error, and one of a later seq
    than its forgetting names is left alone."""
    updates = []
    if retired:
        archived = forgotten_filter(retired, bounds)
        updates.append(qe.UpdateOperation.set_payload_by_filter(archived, {"archived": 1}))
    if deletes:
        updates.append(
            qe.UpdateOperation.delete_points_by_filter(forgotten_filter(deletes, bounds))
        )
    return updates


def agent_filter(agent_id: str, scope: Scope = "active") -> qe.Filter:
    """The agent's points in ``scope``: what its reads see, and the corpus of its BM25's IDF."""
    return selection_filter(Selection(agent_id, scope=scope))


ACTIVE = qe.Filter(must_not=[qe.FieldCondition(key="archived", match=qe.MatchValue(1))])
"""Every agent's active points."""


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
    must += _range("occurred_ts", chosen.occurred_from, chosen.occurred_to)
    # A point from before the archive has no "archived" field: it is active.
    archived = qe.FieldCondition(key="archived", match=qe.MatchValue(1))
    if chosen.scope == "active":
        return qe.Filter(must=must, must_not=[archived])
    if chosen.scope == "archive":
        must.append(archived)
    return qe.Filter(must=must)
