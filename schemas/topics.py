"""Topic names. A prefix lets tests and tenants share one broker without sharing topics."""

from __future__ import annotations

import re
from dataclasses import dataclass

from schemas.derived_fields import SourcePosition
from schemas.memory_events import DerivedEvent, derived_topic_of

TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
"""What Kafka accepts as a topic's name."""

_POSITION = re.compile(r"([A-Za-z0-9._-]{1,249}):([0-9]+):([0-9]+)")
"""ASCII digits only: "²".isdigit() is true, and int() refuses it."""


def parse_position(text: str) -> SourcePosition:
    """``topic:partition:offset``, as ``engram publish`` and ``engram history`` print a
    position; raises ``ValueError`` naming the text otherwise. One parser for every command
    that takes a position, so they accept and refuse the same texts."""
    match = _POSITION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not topic:partition:offset")
    topic, partition, offset = match.groups()
    return SourcePosition(topic=topic, partition=int(partition), offset=int(offset))


@dataclass(frozen=True)
class Topics:
    prefix: str = ""
    derived_prefix: str | None = None
    """Prefix of the derived topics (items, lifecycle, deadletter) when they are not beside the
    raw ones: the derived log of a reprocessed projection version, ``{prefix}{version}.``."""

    def _name(self, base: str) -> str:
        return f"{self.prefix}{base}"

    def _derived(self, base: str) -> str:
        return f"{self.prefix if self.derived_prefix is None else self.derived_prefix}{base}"

    @property
    def observations(self) -> str:
        return self._name("agent.observations")

    @property
    def decisions(self) -> str:
        return self._name("agent.decisions")

    @property
    def feedback(self) -> str:
        return self._name("agent.feedback")

    @property
    def items(self) -> str:
        return self._derived("memory.items")

    @property
    def lifecycle(self) -> str:
        return self._derived("memory.lifecycle")

    @property
    def schedule(self) -> str:
        return self._name("memory.schedule")

    @property
    def access(self) -> str:
        return self._name("memory.access")

    @property
    def deadletter(self) -> str:
        return self._derived("memory.deadletter")

    @property
    def snapshots(self) -> str:
        """Snapshots of the workers' per-partition state: derived from the derived log, never
        the truth, so not among :meth:`all` (an archive does not carry them, and a log
        restored from one starts without)."""
        return self._derived("memory.snapshots")

    def derived_topic(self, event: DerivedEvent) -> str:
        """The topic ``event`` is logged on (:func:`schemas.memory_events.derived_topic_of`)."""
        return {"items": self.items, "lifecycle": self.lifecycle}[derived_topic_of(event)]

    @property
    def agent_inputs(self) -> tuple[str, str, str]:
        return (self.observations, self.decisions, self.feedback)

    def for_event_type(self, event_type: str) -> str:
        return {
            "observation": self.observations,
            "decision": self.decisions,
            "feedback": self.feedback,
        }[event_type]

    def event_type_of(self, topic: str) -> str | None:
        """The event type an agent topic carries (None for other topics)."""
        return {
            self.observations: "observation",
            self.decisions: "decision",
            self.feedback: "feedback",
        }.get(topic)

    def all(self) -> tuple[str, ...]:
        return (
            *self.agent_inputs,
            self.items,
            self.lifecycle,
            self.schedule,
            self.access,
            self.deadletter,
        )
