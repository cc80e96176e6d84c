"""Importance of an agent event, with the inputs that produced it.

Order of precedence: an explicit ``importance`` on the event; else the event-type table of
seed 004 (sections 5.2 and 10: major flood 0.9, elevate 0.8, ...); else ``emotional weight x
source weight`` of seed 003 (section 1.C), with the emotion and source classified by keywords
as that seed's engine does.
"""

from __future__ import annotations

from processors.config import AgentTypeProfile
from processors.source_text import source_text
from schemas.agent_events import AgentEvent, Decision
from schemas.memory_events import ImportanceInputs


def table_key_of(event: AgentEvent) -> str | None:
    """The key of the event-type table: ``decision.<skill>`` for decisions, else ``kind``."""
    if isinstance(event, Decision):
        return f"decision.{event.skill}"
    return event.kind


def classify_emotion(content: str, tags: tuple[str, ...], profile: AgentTypeProfile) -> str:
    """First emotion category (in profile order) with a keyword in the content or the tags."""
    text = content.lower()
    lowered_tags = [t.lower() for t in tags]
    for emotion, keywords in profile.emotion_keywords.items():
        for keyword in keywords:
            if keyword in text or any(keyword in tag for tag in lowered_tags):
                return emotion
    return profile.default_emotion


def classify_source(content: str, profile: AgentTypeProfile) -> str:
    """Who the experience comes from: the first source with a pattern in the content, both as
    :mod:`processors.source_text` writes them."""
    text = source_text(content)
    for source, patterns in profile.source_patterns.items():
        if any(pattern in text for pattern in patterns):
            return source
    return profile.default_source


def importance_of(event: AgentEvent, profile: AgentTypeProfile) -> tuple[float, ImportanceInputs]:
    if event.importance is not None:
        return event.importance, ImportanceInputs(method="explicit")
    key = table_key_of(event)
    if key is not None and key in profile.event_importance:
        return profile.event_importance[key], ImportanceInputs(method="event_table", table_key=key)
    emotion = classify_emotion(event.content, event.tags, profile)
    source = event.source or classify_source(event.content, profile)
    emotion_weight = profile.emotional_weights.get(
        emotion, profile.emotional_weights.get(profile.default_emotion, 0.1)
    )
    source_weight = profile.source_weights.get(
        source, profile.source_weights.get(profile.default_source, 0.3)
    )
    value = round(emotion_weight * source_weight, 6)
    return value, ImportanceInputs(
        method="emotion_source",
        emotion=emotion,
        emotion_weight=emotion_weight,
        source=source,
        source_weight=source_weight,
    )
