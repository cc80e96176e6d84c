"""The agent's arousal in Redis working memory: applied with the recording that carries it, in
the same script and at the same position, so it is idempotent and never goes back in time
(seed 003; streams/README.md, invariant 3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.working.redis_store import RedisWorkingMemory
from schemas.agent_events import AgentEvent, Decision, Observation
from schemas.memory_events import (
    DerivedEvent,
    MemoryRecorded,
    SourcePosition,
    SurpriseReading,
)
from tests.integration.projections.lifecycle_events import agent_forgotten

pytestmark = pytest.mark.integration

CONFIG = load_processing_config()
EMBEDDER = HashingEmbedder()
DECISIONS = "agent.decisions"
OBSERVATIONS = "agent.observations"


@dataclass
class Agent:
    """One agent's stream through the processor's pure core, with log positions."""

    agent_id: str = "A1"
    state: AgentMemoryState = field(default_factory=AgentMemoryState)
    offsets: dict[str, int] = field(default_factory=dict)

    def publish(self, event: AgentEvent, *, positioned: bool = True) -> list[DerivedEvent]:
        topic = DECISIONS if isinstance(event, Decision) else OBSERVATIONS
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        position = SourcePosition(topic=topic, partition=0, offset=offset)
        out = record(
            event,
            self.state,
            config=CONFIG,
            embedder=EMBEDDER,
            config_version=CONFIG.version(EMBEDDER.id),
            position=position if positioned else None,
        )
        self.state = out.state
        return [out.memory, *out.forgotten]

    def decide(self, skills: Sequence[str], *, positioned: bool = True) -> list[DerivedEvent]:
        return [
            e
            for skill in skills
            for e in self.publish(
                Decision(agent_id=self.agent_id, skill=skill, content=f"I chose to {skill}"),
                positioned=positioned,
            )
        ]


def readings(events: Sequence[DerivedEvent]) -> list[SurpriseReading]:
    return [e.surprise for e in events if isinstance(e, MemoryRecorded) and e.surprise]


async def test_the_latest_reading_is_the_agents_arousal(working_store: RedisWorkingMemory) -> None:
    """Seed 003, 2b: after a habit (wait x3) a new action wakes the agent up (System 2)."""
    agent = Agent()
    events = agent.decide(["wait", "wait", "wait", "elevate"])
    assert await working_store.arousal("A1") is None

    await working_store.apply(events)

    arousal = await working_store.arousal("A1")
    assert arousal == readings(events)[-1] == agent.state.surprise
    assert arousal is not None
    assert arousal.system == "SYSTEM_2"
    assert arousal.surprise == pytest.approx(0.8)
    assert await working_store.arousal("someone-else") is None


async def test_an_event_without_a_reading_leaves_the_arousal(
    working_store: RedisWorkingMemory,
) -> None:
    agent = Agent()
    events = agent.decide(["wait", "elevate"])
    events += agent.publish(Observation(agent_id="A1", content="It rained all week"))
    assert isinstance(events[-1], MemoryRecorded)
    assert events[-1].surprise is None

    await working_store.apply(events)

    assert await working_store.arousal("A1") == readings(events)[-1]
    assert await working_store.applied_offset(OBSERVATIONS, 0) == 0


async def test_an_episodic_recording_sets_the_arousal_and_its_position(
    working_store: RedisWorkingMemory,
) -> None:
    """The household's floods go to episodic memory; their readings must still reach Redis."""
    agent = Agent("H1")
    events = [
        e
        for year in (1, 2)
        for e in agent.publish(
            Observation(
                agent_id="H1",
                agent_type="household",
                year=year,
                kind="flood.major",
                content=f"Year {year}: A major flood caused $60,000 in damages",
            )
        )
    ]
    assert all(e.destination == "episodic" for e in readings_of(events))

    await working_store.apply(events)

    assert await working_store.memories("H1") == []
    arousal = await working_store.arousal("H1")
    assert arousal is not None
    assert (arousal.observed, arousal.surprise) == ("FLOOD:HIGH", 0.5)
    assert await working_store.applied_offset(OBSERVATIONS, 0) == 1


def readings_of(events: Sequence[DerivedEvent]) -> list[MemoryRecorded]:
    return [e for e in events if isinstance(e, MemoryRecorded)]


async def test_applying_twice_equals_once(working_store: RedisWorkingMemory) -> None:
    agent = Agent()
    events = agent.decide(["wait", "elevate", "wait", "wait", "insure"])
    await working_store.apply(events)
    once = (await working_store.arousal("A1"), await working_store.memories("A1"))

    await working_store.apply(events)

    assert (await working_store.arousal("A1"), await working_store.memories("A1")) == once


@pytest.mark.parametrize("positioned", [True, False])
async def test_an_older_reading_applied_again_never_takes_the_arousal_back(
    working_store: RedisWorkingMemory, positioned: bool
) -> None:
    """Without a position (or from another topic) only the seq can tell an old reading: the
    applied offset cannot. The old surprise here (a new action, System 2) differs from the
    latest (a habit, System 1), so going back would show."""
    agent = Agent()
    events = agent.decide(["wait", "elevate", "wait", "wait", "wait"], positioned=positioned)
    await working_store.apply(events)
    latest = await working_store.arousal("A1")
    assert latest is not None
    assert latest.system == "SYSTEM_1"
    old = readings(events)[1]
    assert old.system == "SYSTEM_2"

    await working_store.apply(events[2:4])
    await working_store.apply(events[:2])

    assert await working_store.arousal("A1") == latest


async def test_the_arousal_outlives_the_fifo_and_an_old_prefix_keeps_both_rules(
    working_store: RedisWorkingMemory,
) -> None:
    """Twelve decisions into a working memory of ten: ``#evicted`` and ``#arousal`` live in the
    same hash, and replaying an old prefix brings back neither a memory nor an old arousal."""
    agent = Agent()
    events = agent.decide([f"skill_{i % 3}" for i in range(11)] + ["new_skill"], positioned=False)
    await working_store.apply(events)
    memories, arousal = await working_store.memories("A1"), await working_store.arousal("A1")
    assert len(memories) == 10
    assert arousal is not None
    assert arousal.observed == "new_skill"

    await working_store.apply(events[:6])

    assert await working_store.memories("A1") == memories
    assert await working_store.arousal("A1") == arousal


async def test_forgetting_the_agent_forgets_its_arousal(working_store: RedisWorkingMemory) -> None:
    agent = Agent()
    await working_store.apply(agent.decide(["wait", "elevate"]))
    other = Agent("A2", offsets=dict(agent.offsets))
    await working_store.apply(other.decide(["wait"]))

    await working_store.apply([agent_forgotten("A1")])

    assert await working_store.arousal("A1") is None
    assert await working_store.arousal("A2") == other.state.surprise
