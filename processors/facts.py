"""Facts (seed 000's semantic memory, "the what without the when"): an observation may state
``fact: {subject, attribute, value}``. A later fact on the same subject and attribute
supersedes the earlier one, whose validity ends where the new one's begins; both stay in the
log and in the projection, so a stale fact is never served as current and its history is kept.
"""

from __future__ import annotations

from processors.learned_state import LearnedState, fact_key
from processors.learning_cause import Cause
from processors.learning_config import FactRules
from schemas.agent_events import Observation
from schemas.learned_events import FactStated
from schemas.memory_events import derived_event_id, encode_vector

FACT_ID = "fact:id"
"""What a stated fact's id is derived under, from its observation's memory id."""


def stated_fact_id(memory_id: str) -> str:
    """The id of the fact the observation of ``memory_id`` states (:meth:`Cause.event_id`)."""
    return derived_event_id(memory_id, FACT_ID)


def fact_text(subject: str, attribute: str, value: str) -> str:
    """What a fact's embedding is made of, and how it reads."""
    return f"{subject} {attribute}: {value}"


def on_observation(
    observation: Observation, learned: LearnedState, rules: FactRules, cause: Cause
) -> FactStated | None:
    fact = observation.fact
    if fact is None or not rules.enabled:
        return None
    return FactStated(
        event_id=cause.event_id("fact"),
        fact_id=cause.event_id(FACT_ID),
        subject=fact.subject,
        attribute=fact.attribute,
        value=fact.value,
        confidence=fact.confidence,
        valid_from=observation.occurred_at,
        source_event_ids=(observation.event_id,),
        supersedes=learned.facts.get(fact_key(fact.subject, fact.attribute)),
        embedding=encode_vector(
            cause.embedder.embed(fact_text(fact.subject, fact.attribute, fact.value))
        ),
        **cause.envelope(),
    )
