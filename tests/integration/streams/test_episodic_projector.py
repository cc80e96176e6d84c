"""The episodic projector applies the log in causal order, whatever order it fetches it in."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from processors.config import load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.episodic.edge import EdgeEpisodicMemory
from schemas.agent_events import Observation
from schemas.codec import encode_event
from schemas.memory_events import MemoryForgotten, MemoryRecorded, SourcePosition
from schemas.topics import Topics
from streams.episodic_projector import EpisodicProjector
from streams.topic_admin import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CONFIG = load_processing_config()
EMBEDDER = HashingEmbedder()


def derived(agent: str, count: int) -> tuple[list[MemoryRecorded], list[MemoryForgotten]]:
    """60 episodic memories for one agent: 50 stay, the 10 least important are forgotten."""
    state, recorded, forgotten = AgentMemoryState(), [], []
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


async def produce(
    bootstrap: str, topic: str, events: list[MemoryRecorded] | list[MemoryForgotten]
) -> None:
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
