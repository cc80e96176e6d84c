"""Learning from what agents publish: procedures from decisions and their feedback (seed 000),
cached plans (seed 002), stated facts (seed 000), feedback counted on memories.

:func:`learn` runs after an agent event is recorded (:mod:`processors.batch`) and returns the
learned events with the state after them, which it gets by folding those events
(:func:`fold_learning`), the function the takeover's fold uses too (:mod:`processors.state_fold`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import assert_never

from processors import facts, memory_feedback, plan_cache, procedures
from processors.learned_state import LearnedState, fold_learned
from processors.learning_cause import Cause
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState, agent_type_of
from schemas.agent_events import AgentEvent, Decision, Feedback, Observation
from schemas.learned_events import LearnedEvent, MemoryRated
from schemas.memory_events import SourcePosition


def learn(
    event: AgentEvent,
    state: AgentMemoryState,
    ctx: Deriving,
    position: SourcePosition | None = None,
) -> tuple[list[LearnedEvent], AgentMemoryState]:
    """What ``event`` teaches the agent's memory, and the agent's state after it."""
    rules = ctx.config.profile_for(agent_type_of(event, state)).learning
    cause = Cause(event, position, ctx.config_version, ctx.embedder)
    out: list[LearnedEvent] = []

    def emit(*learned: LearnedEvent | None) -> None:
        nonlocal state
        for change in learned:
            if change is not None:
                out.append(change)
                state = fold_learning(state, change)

    match event:
        case Decision():
            emit(procedures.on_decision(event, state.learned, rules.procedures, cause))
            emit(*plan_cache.on_decision(event, state.learned, rules.plans, cause))
        case Feedback():
            decision = state.learned.decisions.get(event.target_event_id)
            if decision is None:
                emit(memory_feedback.on_feedback(event, state, state.learned, cause))
            else:
                emit(
                    procedures.on_feedback(event, decision, state.learned, rules.procedures, cause)
                )
                emit(*plan_cache.on_feedback(event, decision, state.learned, rules.plans, cause))
        case Observation():
            emit(facts.on_observation(event, state.learned, rules.facts, cause))
        case _:
            assert_never(event)
    return out, state


def still_learned_from(event: AgentEvent, memory_id: str, learned: LearnedState) -> bool:
    """Whether the agent still holds what an earlier event under ``event``'s id taught it: a
    decision it takes feedback on, the plan cached from that decision, or the fact it stated,
    still current. Their ids come from the event id, so the same id learned again would name
    them: feedback would credit the earlier decision's skill, a plan come back under an
    evicted one's revision (which Redis refuses), a fact supersede itself."""
    if event.event_id in learned.decisions:
        return True  # whatever the new event's type: feedback on the id finds the decision
    match event:
        case Decision():
            return plan_cache.plan_id_for(event.agent_id, event.event_id) in learned.plans
        case Observation() if event.fact is not None:
            return facts.stated_fact_id(memory_id) in learned.facts.values()
        case _:
            return False


def fold_learning(state: AgentMemoryState, event: LearnedEvent) -> AgentMemoryState:
    """The agent's state after a learned event: its learned part, and for feedback on a
    summary, the summary's utility. Idempotent per event, as :func:`fold_learned`."""
    if isinstance(event, MemoryRated):
        known = state.learned.ratings.get(event.memory_id)
        if known is not None and known.revision >= event.revision:
            return state
        return replace(
            state,
            learned=fold_learned(state.learned, event),
            summaries=memory_feedback.rated_summaries(state.summaries, event),
        )
    return replace(state, learned=fold_learned(state.learned, event))
