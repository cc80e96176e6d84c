"""The outcome a fault must not change, computed without the servers that fail.

The processors are deterministic (streams/README.md, invariant 2): run the pure batch function over
every record that was published, in log order, and the result is exactly the derived log a
faultless worker writes, event ids, contents and source positions included. A fault test
compares what the real pipeline left in the log and in Redis with that: a lost batch shows as a
missing event, a redelivery derived twice as a duplicate event id or a different event.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from processors.batch import RawRecord, process_batch
from processors.embedding import embedder_from_name
from processors.emission_order import causal_order
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from processors.summarising import ExtractiveSummariser
from projections.memory import StoredMemory
from schemas.agent_events import Observation
from schemas.memory_events import DerivedEvent, MemoryForgotten, MemoryRecorded, MemoryWritten
from schemas.topics import Topics
from streams.eventlog.derived_log import read_partitions, read_records
from streams.privacy.sealing import RecordSealer
from streams.settings import EngramSettings, processing_config
from tests.agent_streams import agent_key_of


def workload(agents: int, per_agent: int) -> list[Observation]:
    """Simulation households, interleaved: five events a step and five steps a year, so the
    stream closes sessions (L1 summaries), years (consolidation), chapters (L2) and overflows
    the working capacity, and some events go straight to episodic memory."""
    events: list[Observation] = []
    for i in range(per_agent):
        for a in range(agents):
            importance = ((i * 7 + a * 3) % 10) / 10
            events.append(
                Observation(
                    agent_id=f"F{a:03d}",
                    agent_type="household",
                    importance=importance,
                    step=i // 5,
                    year=i // 25,
                    tags=("flood",) if importance >= 0.7 else ("daily",),
                    content=f"Household F{a:03d}, event {i}: river level report number {i % 13}",
                )
            )
    return events


def _raw(value: bytes) -> bytes:
    return value


async def expected_derived(
    bootstrap: str, topics: Topics, settings: EngramSettings
) -> list[DerivedEvent]:
    """What a faultless worker derives from everything on the observations topic."""
    records = [
        RawRecord(
            topic=position.topic,
            partition=position.partition,
            offset=position.offset,
            key=agent_key_of(value),
            value=value,
            expected_type="observation",
        )
        for position, value in await read_records(
            bootstrap, [topics.observations], range(settings.partitions), _raw
        )
    ]
    embedder = embedder_from_name(settings.embedder)
    summariser = ExtractiveSummariser()
    config = processing_config(settings)
    ctx = Deriving(config, embedder, summariser, config.version(embedder.id, summariser.id))
    states: dict[str, AgentMemoryState] = {}
    result = process_batch(
        records,
        lambda agent: states.get(agent) or AgentMemoryState(),
        ctx=ctx,
        failed_at=datetime.now(UTC),
    )
    assert not result.dead_letters, result.dead_letters[:3]
    return result.derived


def working_memory_of(events: Sequence[DerivedEvent]) -> dict[str, list[StoredMemory]]:
    """Each agent's working memory after ``events``: what was put there and not forgotten."""
    kept: dict[str, dict[str, StoredMemory]] = {}
    for event in events:
        if isinstance(event, MemoryWritten) and event.destination == "working":
            kept.setdefault(event.agent_id, {})[event.memory_id] = StoredMemory.from_event(event)
        elif isinstance(event, MemoryForgotten) and event.destination == "working":
            kept.get(event.agent_id, {}).pop(event.memory_id, None)
    return {
        agent: sorted(memories.values(), key=lambda m: m.seq, reverse=True)
        for agent, memories in kept.items()
    }


@dataclass(frozen=True)
class Outcome:
    derived: int
    """Derived events on the log (recordings and lifecycle events), copies included."""
    recorded: int
    """Distinct memories recorded."""
    retried_copies: int
    """Records the log holds twice: a producer that lost a response sent them again."""


async def assert_exactly_once(
    bootstrap: str,
    topics: Topics,
    settings: EngramSettings,
    published: Sequence[Observation],
    working: dict[str, list[StoredMemory]],
    *,
    sealer: RecordSealer | None = None,
    retried_copies_allowed: bool = False,
) -> Outcome:
    """Every published event is remembered once, the derived log is the faultless one, a
    worker folding it continues from the faultless state, and Redis holds what it implies.

    ``retried_copies_allowed``: a producer without idempotence (Tansu refuses idempotent ones)
    resends a batch whose response a dropped connection lost, so after a broker fault the log
    may hold a derived event twice. Each copy must then be the very same event (the ids are
    deterministic, and the readers of the log drop later copies); a derivation done twice with
    another outcome would differ from the faultless event and fail here.
    """
    expected = await expected_derived(bootstrap, topics, settings)
    logged = await read_partitions(
        bootstrap, [topics.items, topics.lifecycle], range(settings.partitions), sealer=sealer
    )
    counts = Counter(e.event_id for e in logged)
    copies = sum(n - 1 for n in counts.values())
    if not retried_copies_allowed:
        assert not copies, f"{copies} derived records are copies of others on the log"
    want = {e.event_id: e for e in expected}
    lost = set(want) - set(counts)
    extra = set(counts) - set(want)
    assert not lost, f"{len(lost)} derived events of a faultless run are not on the log"
    assert not extra, f"{len(extra)} derived events a faultless run would not write"
    differing = [e.event_id for e in logged if e != want[e.event_id]]
    assert not differing, f"{len(differing)} derived records differ from a faultless run"
    recorded = {e.source_event_id for e in expected if isinstance(e, MemoryRecorded)}
    published_ids = {e.event_id for e in published}
    assert recorded == published_ids, "the faultless run does not remember each event once"
    folded = FoldedState(schedule_topic=topics.schedule).apply_all(causal_order(logged))
    faultless = FoldedState(schedule_topic=topics.schedule).apply_all(expected)
    assert folded.states == faultless.states, "a worker taking over would not continue exactly"
    implied = working_memory_of(expected)
    assert set(working) == set(implied), "agents in Redis differ from the agents published"
    wrong = [agent for agent in implied if working[agent] != implied[agent]]
    assert not wrong, f"working memory differs from the log's for {len(wrong)} agents: {wrong[:3]}"
    return Outcome(derived=len(logged), recorded=len(recorded), retried_copies=copies)
