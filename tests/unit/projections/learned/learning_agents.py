"""Agents that learn through the processors' own rules (:func:`processors.learning.learn`,
and :func:`processors.fact_access.on_facts_read` for the searches of their facts), their
learned events applied to a :class:`FieldStore`: the fields the Redis store keeps, read by
:class:`~projections.learned.reads.LearnedMemory` as it reads Redis, without a server.

Seed 002's tool-selection example lives here, shared by the tests of the read, the route, the
client, the MCP tool and the command."""

from __future__ import annotations

import fnmatch
from datetime import UTC, datetime, timedelta

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.fact_access import on_facts_read
from processors.learning import learn
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState
from processors.summarising import ExtractiveSummariser
from projections.learned.reads import LearnedMemory
from projections.learned.redis_fields import learned_writes
from schemas.agent_events import Decision, FactStatement, Feedback, Observation
from schemas.learned_events import FactStated, LearnedEvent
from schemas.memory_events import MemoryRetrieved

EMBEDDER = HashingEmbedder()
CTX = Deriving(load_processing_config(), EMBEDDER, ExtractiveSummariser(), "cfg")
T0 = datetime(2026, 1, 1, tzinfo=UTC)

ATTRIBUTE_TOOL = "SetPlayerAttribute"
ATTRIBUTE_DESCRIPTION = "Set an attribute of the player, such as speed or strength, to a value"
SPEED = "Set player speed to 20"
HEALTH = "Set player's health to 75"


class FieldStore:
    """Learned fields by agent, each written only at a revision at least the one it has and
    an empty value deleting it (the rule of ``LEARN_SCRIPT``)."""

    def __init__(self) -> None:
        self.hashes: dict[str, dict[bytes, tuple[int, bytes]]] = {}

    def apply(self, events: list[LearnedEvent]) -> None:
        for event in events:
            fields = self.hashes.setdefault(event.agent_id, {})
            for field, revision, value in learned_writes(event):
                known = fields.get(field)
                if known is None or revision >= known[0]:
                    fields[field] = (revision, value)

    async def learned_fields(self, agent_id: str, match: bytes = b"#l:*") -> dict[bytes, bytes]:
        """The fields ``match`` names, as Redis matches a glob (``HSCAN ... MATCH``)."""
        fields = self.hashes.get(agent_id, {})
        return {
            field: value
            for field, (_, value) in fields.items()
            if value and fnmatch.fnmatchcase(field.decode(), match.decode())
        }

    def memory(self) -> LearnedMemory:
        return LearnedMemory(lambda: self, EMBEDDER)


class LearningAgent:
    def __init__(self, store: FieldStore, agent_id: str = "P1") -> None:
        self.store = store
        self.agent_id = agent_id
        self.state = AgentMemoryState()
        self.n = 0

    def _envelope(self) -> dict[str, object]:
        self.n += 1
        return {
            "agent_id": self.agent_id,
            "event_id": f"{self.agent_id}-{self.n}",
            "occurred_at": T0 + timedelta(days=self.n),
        }

    def _learn(self, event: Decision | Feedback | Observation) -> None:
        learned, self.state = learn(event, self.state, CTX)
        self.store.apply(learned)

    def state_fact(self, subject: str, attribute: str, value: str) -> str:
        """The id of the fact an observation states (superseding any on the same pair)."""
        observation = Observation.model_validate(
            {
                **self._envelope(),
                "content": f"{subject} {attribute} is {value}",
                "fact": FactStatement(subject=subject, attribute=attribute, value=value),
            }
        )
        learned, self.state = learn(observation, self.state, CTX)
        self.store.apply(learned)
        (stated,) = learned
        assert isinstance(stated, FactStated)
        return stated.fact_id

    def searched(self, *records: MemoryRetrieved) -> None:
        """What the worker does with facts reads recorded on ``memory.access``: counts them."""
        for record in records:
            counted, self.state = on_facts_read(record, self.state, CTX.config_version)
            self.store.apply(list(counted))

    def decide(self, skill: str, content: str, prompt: str | None = None) -> str:
        """The decision's id. The first decision with a skill creates its procedure, described
        by ``content``; a later one invokes it. ``prompt``: the request it answered."""
        decision = Decision.model_validate(
            {**self._envelope(), "skill": skill, "content": content, "prompt": prompt}
        )
        self._learn(decision)
        return decision.event_id

    def feedback(self, target: str, signal: float) -> None:
        """An upvote attaches the target decision's prompt (else its content) to its
        procedure."""
        self._learn(
            Feedback.model_validate(
                {**self._envelope(), "target_event_id": target, "signal": signal}
            )
        )


def seed_tools(store: FieldStore, agent_id: str = "P1") -> LearningAgent:
    """Seed 002's starting point: the agent's one tool, SetPlayerAttribute."""
    agent = LearningAgent(store, agent_id)
    agent.decide(ATTRIBUTE_TOOL, ATTRIBUTE_DESCRIPTION)
    return agent
