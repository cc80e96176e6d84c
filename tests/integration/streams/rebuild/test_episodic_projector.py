"""The episodic projector applies the log in causal order, whatever order it fetches it in."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.lifecycle import Deriving, on_agent_event, on_tick
from processors.recording import AgentMemoryState, record
from processors.summarising import ExtractiveSummariser
from projections.episodic.edge import EdgeEpisodicMemory
from schemas.agent_events import Observation
from schemas.codec import encode_event
from schemas.memory_events import (
    DerivedEvent,
    MemoryForgotten,
    MemoryRecorded,
    ScheduleTick,
    SourcePosition,
)
from schemas.topics import Topics
from streams.eventlog.topic_admin import ensure_topics
from streams.rebuild.projector import EpisodicProjector
from tests.integration.projections.lifecycle_events import summarised

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CONFIG = load_processing_config()
EMBEDDER = HashingEmbedder()


def derived(agent: str, count: int) -> tuple[list[MemoryRecorded], list[MemoryForgotten]]:
    """60 episodic memories for one agent: 50 stay, the 10 least important are forgotten."""
    state = AgentMemoryState()
    recorded: list[MemoryRecorded] = []
    forgotten: list[MemoryForgotten] = []
    for i in range(count):
        event = Observation(agent_id=agent, content=f"flood {i}", importance=0.7 + (i % 7) / 30)
        out = record(
            event,
            state,
            config=CONFIG,
            embedder=EMBEDDER,
            config_version="v",
            position=SourcePosition(topic="agent.observations", partition=0, offset=i),
        )
        state = out.state
        recorded.append(out.memory)
        forgotten.extend(out.forgotten)
    return recorded, forgotten


async def produce(bootstrap: str, topic: str, events: Sequence[DerivedEvent]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    await producer.start()
    try:
        for event in events:
            await producer.send(
                topic, encode_event(event), key=event.agent_id.encode(), partition=0
            )
        await producer.flush()
    finally:
        await producer.stop()


async def until(condition: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_forgettings_fetched_before_their_recordings_are_held(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = Topics(f"proj{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 1)
    recorded, forgotten = derived("A", 60)
    assert len(forgotten) == 10
    store = EdgeEpisodicMemory.open(tmp_path / "edge", EMBEDDER.dim)
    projector = await EpisodicProjector(kafka_bootstrap, topics, store, group_id="g").start()
    try:
        # The worst race: the forgettings are fetched before their recordings are written.
        await produce(kafka_bootstrap, topics.lifecycle, forgotten)
        await until(lambda: projector.records == 10)
        await produce(kafka_bootstrap, topics.items, recorded)
        await until(lambda: projector.records == 70)
        await until(lambda: not projector.held)
    finally:
        await projector.stop()
    kept = {m.memory_id for m in await store.memories("A")}
    await store.close()
    assert len(kept) == 50
    assert kept.isdisjoint(f.memory_id for f in forgotten)


async def test_a_restart_reads_held_forgettings_again(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = Topics(f"proj{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 1)
    recorded, forgotten = derived("B", 60)
    await produce(kafka_bootstrap, topics.lifecycle, forgotten)

    store = EdgeEpisodicMemory.open(tmp_path / "edge", EMBEDDER.dim)
    first = await EpisodicProjector(kafka_bootstrap, topics, store, group_id="g").start()
    try:
        await until(lambda: first.records == 10)
        assert len(first.held) == 10
    finally:
        await first.stop()  # nothing was committed past the held forgettings

    await produce(kafka_bootstrap, topics.items, recorded)
    second = await EpisodicProjector(kafka_bootstrap, topics, store, group_id="g").start()
    try:
        await until(lambda: second.records == 70)
        await until(lambda: not second.held)
    finally:
        await second.stop()
    kept = {m.memory_id for m in await store.memories("B")}
    await store.close()
    assert len(kept) == 50
    assert kept.isdisjoint(f.memory_id for f in forgotten)


async def test_a_tick_pruning_a_summary_is_applied_without_waiting(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A tick's prunings sit at a memory.schedule position nothing else may ever reach; the
    summary they forget is earlier in memory.lifecycle itself, so they must not be held."""
    topics = Topics(f"proj{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 1)
    ctx = Deriving(CONFIG, EMBEDDER, ExtractiveSummariser(), "v")
    state = AgentMemoryState()
    recorded: list[DerivedEvent] = []
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(3):
        out = on_agent_event(
            Observation(agent_id="W", content=f"asked about invoice {i}", importance=0.4),
            state,
            ctx,
            SourcePosition(topic=topics.observations, partition=0, offset=i),
        )
        state, recorded = out.state, [*recorded, *out.events]
    lifecycle: list[DerivedEvent] = []
    for offset, at in enumerate([start, start + timedelta(days=2)]):
        tick = ScheduleTick(event_id=f"t{offset}", occurred_at=at, partition=0, interval_seconds=60)
        position = SourcePosition(topic=topics.schedule, partition=0, offset=offset)
        events, changed = on_tick(tick, {"W": state}, ctx, position)
        state, lifecycle = changed.get("W", state), [*lifecycle, *events]
    assert [type(e).__name__ for e in lifecycle] == ["MemorySummarised", "MemoryForgotten"]
    store = EdgeEpisodicMemory.open(tmp_path / "edge", EMBEDDER.dim)
    projector = await EpisodicProjector(kafka_bootstrap, topics, store, group_id="g").start()
    try:
        await produce(kafka_bootstrap, topics.items, recorded)
        await produce(kafka_bootstrap, topics.lifecycle, lifecycle[:1])
        await until(lambda: projector.records == 4)
        assert [m.level for m in await store.memories("W", levels=None)] == [1]
        await produce(kafka_bootstrap, topics.lifecycle, lifecycle[1:])
        await until(lambda: projector.records == 5)
        assert not projector.held
    finally:
        await projector.stop()
    assert await store.memories("W", levels=None) == []
    await store.close()


async def test_a_later_summary_does_not_release_forgettings_ahead_of_their_recordings(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A summary emitted at the last source position, fetched with the forgettings before any
    recording, must wait like them: applying it at once would mark that position applied, let
    the forgettings through before the memories they forget, and those would come back."""
    topics = Topics(f"proj{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 1)
    recorded, forgotten = derived("C", 60)
    summary = summarised(
        recorded[-3:],
        level=1,
        content="Three floods",
        seq=60,
        trigger_event_id="trigger",
        position=SourcePosition(topic="agent.observations", partition=0, offset=59),
    )
    store = EdgeEpisodicMemory.open(tmp_path / "edge", EMBEDDER.dim)
    projector = await EpisodicProjector(kafka_bootstrap, topics, store, group_id="g").start()
    try:
        await produce(kafka_bootstrap, topics.lifecycle, [*forgotten, summary])
        await until(lambda: projector.records == 11)
        assert len(projector.held) == 11
        await produce(kafka_bootstrap, topics.items, recorded)
        await until(lambda: projector.records == 71)
        await until(lambda: not projector.held)
    finally:
        await projector.stop()
    kept = {m.memory_id for m in await store.memories("C", levels=[0])}
    assert len(kept) == 50
    assert kept.isdisjoint(f.memory_id for f in forgotten)
    assert [m.memory_id for m in await store.memories("C", levels=[1])] == [summary.memory_id]
    await store.close()
