"""What a processor remembers per agent to learn from feedback, and its fold from the log.

Feedback names the event it is about (``target_event_id``), often long after it: to update a
decision's procedure and plan, the worker keeps the agent's recent decisions. Every part is
bounded, because the state is carried between batches for every agent and folded back on
takeover:

* ``decisions``: the latest :data:`MAX_RECENT_DECISIONS` decisions (skill, plan, the first
  :data:`DECISION_TEXT_CHARS` characters of their text, attached to the procedure when
  upvoted). Feedback on an older decision teaches nothing.
* ``procedures``: at most ``ProcedureRules.max_procedures`` (a number per procedure);
* ``plans``: at most ``PlanRules.max_plans``, beyond which one is evicted by an event;
* ``facts``: the current fact of the latest :data:`MAX_FACT_KEYS` subject/attribute pairs
  stated. A fact on a pair beyond it supersedes nothing in the log; reads still answer the
  latest fact of each pair, so the answer stays right;
* ``access_counts``: how many searches returned each of those facts (seed 000's
  ``access_count``), for facts returned at least once. A fact that leaves ``facts``
  (superseded, or past the bound) leaves this too: a search is counted only on a fact the
  agent still holds, and its last count stays in the projection;
* ``ratings``: feedback counts of the latest :data:`MAX_RATED_MEMORIES` memories rated.

The fold (:func:`fold_learned`) is the only way this state changes, live and on takeover
alike: the live path derives events, then folds them (:mod:`processors.learning`), so the
two cannot drift apart. Bounds are constants rather than configuration because the fold has
no configuration: the same events must give the same state whatever reads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TypeVar, assert_never

from schemas.learned_events import (
    FactAccessed,
    FactStated,
    LearnedEvent,
    MemoryRated,
    PlanChanged,
    ProcedureChanged,
)

K = TypeVar("K")
V = TypeVar("V")

MAX_RECENT_DECISIONS = 128
DECISION_TEXT_CHARS = 280
MAX_FACT_KEYS = 1024
MAX_RATED_MEMORIES = 1024


@dataclass(frozen=True)
class ProcedureEntry:
    success_rate: float
    usage_count: int
    revision: int
    attached_count: int


@dataclass(frozen=True)
class DecisionEntry:
    skill: str
    text: str
    plan_id: str | None = None


@dataclass(frozen=True)
class PlanEntry:
    score: float
    revision: int
    decision_event_id: str


@dataclass(frozen=True)
class Rating:
    upvotes: int
    downvotes: int
    revision: int


@dataclass(frozen=True)
class LearnedState:
    """Never changed in place: every change makes new dicts (states are shared between the
    carried state and a batch in progress). Dict order is the order of insertion, which the
    bounds evict by: live and fold insert in the same order."""

    procedures: dict[str, ProcedureEntry] = field(default_factory=dict)
    decisions: dict[str, DecisionEntry] = field(default_factory=dict)
    plans: dict[str, PlanEntry] = field(default_factory=dict)
    facts: dict[str, str] = field(default_factory=dict)
    """Current fact id by :func:`fact_key` of its subject and attribute."""
    ratings: dict[str, Rating] = field(default_factory=dict)
    access_counts: dict[str, int] = field(default_factory=dict)
    """Searches that returned a current fact, by fact id (only facts of ``facts``)."""


def fact_key(subject: str, attribute: str) -> str:
    """One string for a subject and an attribute (a JSON array: no pair of strings shares
    it), so the state writes to JSON as it is (a state snapshot) and reads back the same."""
    return json.dumps([subject, attribute], ensure_ascii=False)


def _bounded_put(items: dict[K, V], key: K, value: V, bound: int) -> dict[K, V]:
    """``items`` with ``key`` set last (most recent), the oldest dropped beyond ``bound``."""
    out = {k: v for k, v in items.items() if k != key}
    out[key] = value
    while len(out) > bound:
        del out[next(iter(out))]
    return out


def fold_learned(state: LearnedState, event: LearnedEvent) -> LearnedState:
    """The learned state after one learned event; idempotent per event (an older revision
    applied again changes nothing)."""
    match event:
        case ProcedureChanged():
            return _procedure(state, event)
        case PlanChanged():
            return _plan(state, event)
        case FactStated():
            key = fact_key(event.subject, event.attribute)
            facts = _bounded_put(state.facts, key, event.fact_id, MAX_FACT_KEYS)
            counts = state.access_counts
            if counts:
                counts = _counts_still_held(counts, state.facts, facts, key)
            return replace(state, facts=facts, access_counts=counts)
        case FactAccessed():
            return _accessed(state, event)
        case MemoryRated():
            known = state.ratings.get(event.memory_id)
            if known is not None and known.revision >= event.revision:
                return state
            rating = Rating(event.upvotes, event.downvotes, event.revision)
            return replace(
                state,
                ratings=_bounded_put(state.ratings, event.memory_id, rating, MAX_RATED_MEMORIES),
            )
        case _:
            assert_never(event)


def _counts_still_held(
    counts: dict[str, int], before: dict[str, str], after: dict[str, str], key: str
) -> dict[str, int]:
    """``counts`` without the facts a statement on ``key`` took out of the state: the one it
    superseded, and the oldest pairs' beyond the bound. Found without scanning the facts (a
    statement is an agent event: the hot path), since the bound evicts from the front."""
    gone: list[str] = []
    replaced = before.get(key)
    if replaced is not None and replaced != after[key]:
        gone.append(replaced)
    if len(before) >= MAX_FACT_KEYS:
        for oldest in before:
            if oldest in after:
                break
            gone.append(before[oldest])
    if not any(fact_id in counts for fact_id in gone):
        return counts
    return {fact_id: n for fact_id, n in counts.items() if fact_id not in gone}


def _accessed(state: LearnedState, event: FactAccessed) -> LearnedState:
    """The count a search left on a fact the state still holds as current; an older count
    (applied again, or met after a newer one) changes nothing, nor does a fact no longer
    held (superseded since, or past the bound)."""
    if state.facts.get(fact_key(event.subject, event.attribute)) != event.fact_id:
        return state
    if state.access_counts.get(event.fact_id, 0) >= event.access_count:
        return state
    counts = {**state.access_counts, event.fact_id: event.access_count}
    return replace(state, access_counts=counts)


def _procedure(state: LearnedState, event: ProcedureChanged) -> LearnedState:
    procedures, decisions = state.procedures, state.decisions
    known = procedures.get(event.name)
    if known is None or known.revision <= event.revision:
        entry = ProcedureEntry(
            event.success_rate, event.usage_count, event.revision, event.attached_count
        )
        procedures = {**procedures, event.name: entry}
    if event.change != "outcome" and event.decision_event_id not in decisions:
        noted = DecisionEntry(event.name, (event.decision_text or "")[:DECISION_TEXT_CHARS])
        decisions = _bounded_put(decisions, event.decision_event_id, noted, MAX_RECENT_DECISIONS)
    return replace(state, procedures=procedures, decisions=decisions)


def _plan(state: LearnedState, event: PlanChanged) -> LearnedState:
    plans, decisions = state.plans, state.decisions
    known = plans.get(event.plan_id)
    if known is not None and known.revision > event.revision:
        return state
    if event.change == "evicted":
        plans = {k: v for k, v in plans.items() if k != event.plan_id}
    else:
        entry = PlanEntry(event.score, event.revision, event.decision_event_id)
        plans = {**plans, event.plan_id: entry}
    noted = decisions.get(event.decision_event_id)
    if event.change == "cached" and noted is None:
        # Procedures turned off: the plan alone needs the decision known.
        noted = DecisionEntry(event.skill or "", "", event.plan_id)
        decisions = _bounded_put(decisions, event.decision_event_id, noted, MAX_RECENT_DECISIONS)
    elif event.change == "cached" and noted is not None and noted.plan_id != event.plan_id:
        decisions = {**decisions, event.decision_event_id: replace(noted, plan_id=event.plan_id)}
    return replace(state, plans=plans, decisions=decisions)
