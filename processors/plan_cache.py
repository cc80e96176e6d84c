"""The plan cache (seed 002): a decision that carries the request it answered (``prompt``) and
the steps it took (``actions``) is cached, keyed by the prompt's embedding, at score 1.0.
Feedback on the decision scores it, ``score = (1 - alpha) x score + alpha x reward`` (reward 1
for an upvote, 0 for a downvote); a plan scored below epsilon is evicted. Every change is a
:class:`PlanChanged` event; a lookup (:func:`best_plan`) serves the most similar plan at or
above tau whose score is at or above epsilon.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from processors.learned_state import DecisionEntry, LearnedState
from processors.learning_cause import Cause
from processors.learning_config import PlanRules
from schemas.agent_events import Decision, Feedback
from schemas.learned_events import PlanChanged
from schemas.memory_events import derived_event_id, encode_vector, memory_id_for

INITIAL_SCORE = 1.0


def plan_id_for(agent_id: str, decision_event_id: str) -> str:
    return derived_event_id(memory_id_for(agent_id, decision_event_id), "plan")


def reward_of(signal: float) -> float | None:
    if signal > 0:
        return 1.0
    if signal < 0:
        return 0.0
    return None


def on_decision(
    decision: Decision, learned: LearnedState, rules: PlanRules, cause: Cause
) -> list[PlanChanged]:
    """The decision's plan cached, and the plan it pushed out beyond ``max_plans``."""
    if not rules.enabled or decision.prompt is None or not decision.actions:
        return []
    plan_id = plan_id_for(decision.agent_id, decision.event_id)
    thresholds = {
        "similarity_threshold": rules.similarity_threshold,
        "score_threshold": rules.score_threshold,
    }
    out = [
        PlanChanged(
            event_id=cause.event_id("plan:cached"),
            plan_id=plan_id,
            change="cached",
            decision_event_id=decision.event_id,
            score=INITIAL_SCORE,
            revision=0,
            skill=decision.skill,
            prompt=decision.prompt,
            prompt_embedding=encode_vector(cause.embedder.embed(decision.prompt)),
            actions=decision.actions,
            **thresholds,
            **cause.envelope(),
        )
    ]
    if len(learned.plans) >= rules.max_plans:
        # The lowest score goes, the oldest among equals (dicts keep caching order).
        order = {k: i for i, k in enumerate(learned.plans)}
        victim = min(learned.plans, key=lambda k: (learned.plans[k].score, order[k]))
        entry = learned.plans[victim]
        out.append(
            PlanChanged(
                event_id=cause.event_id(f"plan:evicted:{victim}"),
                plan_id=victim,
                change="evicted",
                reason="capacity",
                decision_event_id=entry.decision_event_id,
                score=entry.score,
                revision=entry.revision + 1,
                **thresholds,
                **cause.envelope(),
            )
        )
    return out


def on_feedback(
    feedback: Feedback,
    decision: DecisionEntry,
    learned: LearnedState,
    rules: PlanRules,
    cause: Cause,
) -> list[PlanChanged]:
    """The decision's plan scored by ``feedback``, and evicted if it fell below epsilon."""
    reward = reward_of(feedback.signal)
    entry = None if decision.plan_id is None else learned.plans.get(decision.plan_id)
    if not rules.enabled or reward is None or entry is None or decision.plan_id is None:
        return []
    score = (1.0 - rules.alpha) * entry.score + rules.alpha * reward
    common = {
        "plan_id": decision.plan_id,
        "decision_event_id": entry.decision_event_id,
        "score": score,
        "similarity_threshold": rules.similarity_threshold,
        "score_threshold": rules.score_threshold,
        **cause.envelope(),
    }
    out = [
        PlanChanged(
            event_id=cause.event_id("plan:scored"),
            change="scored",
            revision=entry.revision + 1,
            reward=reward,
            alpha=rules.alpha,
            **common,
        )
    ]
    if score < rules.score_threshold:
        out.append(
            PlanChanged(
                event_id=cause.event_id("plan:evicted"),
                change="evicted",
                reason="score",
                revision=entry.revision + 2,
                **common,
            )
        )
    return out


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b)) / norms if norms > 0.0 else 0.0


@dataclass(frozen=True)
class CachedPlan:
    """A plan as a lookup sees it."""

    plan_id: str
    vector: np.ndarray
    score: float
    similarity_threshold: float
    score_threshold: float


def best_plan(query: np.ndarray, plans: Iterable[CachedPlan]) -> tuple[CachedPlan, float] | None:
    """The hit for ``query``: the most similar plan with similarity >= its tau and score >=
    its epsilon (the higher score among equally similar ones), with its similarity."""
    best: tuple[CachedPlan, float] | None = None
    for plan in plans:
        similarity = cosine(query, plan.vector)
        if similarity < plan.similarity_threshold or plan.score < plan.score_threshold:
            continue
        if best is None or (similarity, plan.score) > (best[1], best[0].score):
            best = (plan, similarity)
    return best
