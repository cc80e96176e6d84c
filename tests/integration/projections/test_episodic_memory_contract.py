"""The episodic memory contract, run on Qdrant Edge and on the qdrant-client adapter.

Events are real: built by ``processors.recording.record`` from observations whose explicit
``importance`` decides the route (>= 0.7 episodic, else working), so the stores are tested on
exactly what the processors emit, capacity evictions included.
"""

from __future__ import annotations

import logging
import random
import shutil
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qmodels

from processors.config import ProcessingConfig, load_processing_config
from processors.embedding import HashingEmbedder
from processors.lexical import query_vector
from processors.recording import AgentMemoryState, record
from projections.episodic import qdrant_server
from projections.episodic.edge import POSITIONS_FILE, SHARD_DIR, EdgeEpisodicMemory
from projections.episodic.factory import open_episodic_store, stored_episodic_dim
from projections.episodic.qdrant_server import QdrantServerEpisodicMemory
from projections.interfaces import EpisodicMemoryStore, ProjectionError
from projections.memory import StoredMemory
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.relevance import lexical_scores
from schemas.agent_events import Observation
from schemas.memory_events import (
    ConsolidationCompleted,
    DerivedEvent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemorySummarised,
    MemoryWritten,
    SourcePosition,
)
from schemas.topics import Topics
from tests.integration.fixtures.qdrant import EMBEDDING_DIM, cosine_tolerance
from tests.integration.projections.lifecycle_events import (
    agent_forgotten,
    consolidated,
    forgotten_by_utility,
    promoted,
    summarised,
)

pytestmark = pytest.mark.integration

CONFIG = load_processing_config()
SMALL = load_processing_config(episodic_capacity=3, working_capacity=2)
"""Small capacities, so a handful of events already forgets memories."""
EMBEDDER = HashingEmbedder()
TOPIC = Topics().observations

EPISODIC = 0.9
WORKING = 0.3

State = tuple[int, dict[str, list[StoredMemory]], int | None]


def log_of(
    agent_id: str,
    items: Sequence[tuple[str, float]],
    *,
    config: ProcessingConfig = CONFIG,
    partition: int = 0,
    first_offset: int = 0,
) -> list[DerivedEvent]:
    """The derived events of one agent's observations (content, importance), in log order."""
    state = AgentMemoryState()
    log: list[DerivedEvent] = []
    for i, (content, importance) in enumerate(items):
        recorded = record(
            Observation(agent_id=agent_id, content=content, importance=importance, step=i),
            state,
            config=config,
            embedder=EMBEDDER,
            config_version=config.version(EMBEDDER.id),
            position=SourcePosition(topic=TOPIC, partition=partition, offset=first_offset + i),
        )
        log.append(recorded.memory)
        log.extend(recorded.forgotten)
        state = recorded.state
    return log


def numbered(agent_id: str, n: int, importance: float = EPISODIC) -> list[tuple[str, float]]:
    return [(f"{agent_id} watched the river rise {i} feet", importance) for i in range(n)]


def recorded(log: Sequence[DerivedEvent]) -> list[MemoryRecorded]:
    return [e for e in log if isinstance(e, MemoryRecorded)]


def forgotten_ids(log: Sequence[DerivedEvent]) -> set[str]:
    return {e.memory_id for e in log if isinstance(e, MemoryForgotten)}


async def state_of(store: EpisodicMemoryStore, *agent_ids: str, partition: int = 0) -> State:
    memories = {agent_id: await store.memories(agent_id) for agent_id in agent_ids}
    return await store.count(), memories, await store.applied_offset(TOPIC, partition)


@dataclass(frozen=True)
class Year:
    """One agent's year: four memories of events (three to working memory), then the year end
    promotes two working memories and summarises; every event has a position on ``TOPIC``."""

    recorded: list[MemoryRecorded]
    copies: list[MemoryPromoted]
    l1: MemorySummarised
    l2: MemorySummarised
    year_end: ConsolidationCompleted

    @property
    def log(self) -> list[DerivedEvent]:
        return [*self.recorded, *self.copies, self.year_end, self.l1, self.l2]

    @property
    def episodic(self) -> list[MemoryWritten]:
        """What episodic memory holds after the log, newest first."""
        kept = [e for e in self.log if isinstance(e, MemoryWritten) and e.destination == "episodic"]
        return sorted(kept, key=lambda e: e.seq, reverse=True)


def year_of(agent_id: str, partition: int = 0) -> Year:
    def at(offset: int) -> SourcePosition:
        return SourcePosition(topic=TOPIC, partition=partition, offset=offset)

    contents = [
        ("the river rose over the road", WORKING),
        ("we sandbagged the porch", WORKING),
        ("the levee broke at night", EPISODIC),
        ("the school became a shelter", WORKING),
    ]
    memories = recorded(log_of(agent_id, contents, partition=partition))
    working = [m for m in memories if m.destination == "working"]
    copies = [promoted(m, position=at(4)) for m in working[:2]]
    l1 = summarised(
        memories,
        level=1,
        content="a flood season: the levee broke and the town sheltered in the school",
        seq=4,
        trigger_event_id=memories[-1].source_event_id,
        position=at(5),
    )
    l2 = summarised(
        [l1],
        level=2,
        content="the year the water came into town",
        seq=5,
        trigger_event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"chapter:{agent_id}")),
        position=at(6),
    )
    return Year(memories, copies, l1, l2, consolidated(agent_id, copies, position=at(4)))


async def test_memories_are_listed_newest_first(episodic_store: EpisodicMemoryStore) -> None:
    log = log_of("alice", numbered("alice", 5))

    await episodic_store.apply(log)

    memories = await episodic_store.memories("alice")
    assert [m.seq for m in memories] == [4, 3, 2, 1, 0]
    assert memories == [StoredMemory.from_event(e) for e in reversed(recorded(log))]
    assert [m.seq for m in await episodic_store.memories("alice", limit=2)] == [4, 3]


async def test_other_agents_memories_never_leak(episodic_store: EpisodicMemoryStore) -> None:
    same_words = [("the levee broke at night", EPISODIC), ("we moved to the attic", EPISODIC)]
    alice = log_of("alice", [*same_words, ("the water reached the stairs", EPISODIC)])
    bob = log_of("bob", same_words, partition=1)

    await episodic_store.apply([*alice, *bob])

    assert {m.agent_id for m in await episodic_store.memories("alice")} == {"alice"}
    assert len(await episodic_store.memories("alice")) == 3
    assert {m.agent_id for m in await episodic_store.memories("bob")} == {"bob"}
    assert await episodic_store.memories("carol") == []
    assert await episodic_store.count("alice") == 3
    assert await episodic_store.count("bob") == 2
    assert await episodic_store.count("carol") == 0
    assert await episodic_store.count() == 5


async def test_search_ranks_the_nearest_first(episodic_store: EpisodicMemoryStore) -> None:
    contents = [
        "the river flooded the lower town",
        "my neighbor elevated his house last spring",
        "the insurance premium doubled this year",
        "the council approved a new levee",
        "we lost the harvest to the flood",
        "the school reopened after the storm",
    ]
    log = log_of("alice", [(c, EPISODIC) for c in contents])
    await episodic_store.apply(log)
    query = EMBEDDER.embed("the insurance premium doubled")

    results = await episodic_store.search("alice", query, limit=len(contents))

    vectors = {e.memory_id: e.vector() for e in recorded(log)}
    expected = {
        memory_id: float(v @ query / (np.linalg.norm(v) * np.linalg.norm(query)))
        for memory_id, v in vectors.items()
    }
    assert results[0].content == "the insurance premium doubled this year"
    assert len(results) == len(contents)
    similarities = [m.similarity for m in results if m.similarity is not None]
    assert len(similarities) == len(results)
    assert all(-1.0 <= s <= 1.0 for s in similarities)
    assert similarities == sorted(similarities, reverse=True)
    for memory in results:
        assert memory.similarity == pytest.approx(
            expected[memory.memory_id], abs=cosine_tolerance(episodic_store)
        )
    assert len(await episodic_store.search("alice", query, limit=2)) == 2


async def test_search_only_sees_the_agents_memories(episodic_store: EpisodicMemoryStore) -> None:
    alice = log_of("alice", [("the bridge held", EPISODIC), ("the road closed", EPISODIC)])
    bob = log_of("bob", [("the pumps failed in the basement", EPISODIC)], partition=1)
    await episodic_store.apply([*alice, *bob])

    results = await episodic_store.search(
        "alice", EMBEDDER.embed("the pumps failed in the basement"), limit=10
    )

    assert len(results) == 2
    assert {m.agent_id for m in results} == {"alice"}
    exact = await episodic_store.search(
        "bob", EMBEDDER.embed("the pumps failed in the basement"), limit=10
    )
    assert [m.agent_id for m in exact] == ["bob"]
    assert exact[0].similarity == pytest.approx(1.0, abs=cosine_tolerance(episodic_store))


async def test_forgotten_memories_are_removed(episodic_store: EpisodicMemoryStore) -> None:
    """The same log applied event by event (deletes cross batches) and in one batch (a memory
    recorded then forgotten inside it must never show up) ends in the same survivors."""
    importances = [0.9, 0.8, 0.95, 0.85, 0.99, 0.75]
    one_by_one = log_of(
        "one-by-one", [(f"event {i}", p) for i, p in enumerate(importances)], config=SMALL
    )
    at_once = log_of(
        "at-once", [(f"event {i}", p) for i, p in enumerate(importances)], config=SMALL, partition=1
    )
    assert len(forgotten_ids(at_once)) == 3

    for event in one_by_one:
        await episodic_store.apply([event])
    await episodic_store.apply(at_once)

    for agent_id in ("one-by-one", "at-once"):
        survivors = await episodic_store.memories(agent_id)
        assert sorted(m.importance for m in survivors) == [0.9, 0.95, 0.99]
        assert await episodic_store.count(agent_id) == 3
    gone = next(e for e in recorded(at_once) if e.importance == 0.8)
    results = await episodic_store.search("at-once", gone.vector(), limit=10)
    assert gone.memory_id not in {m.memory_id for m in results}


async def test_working_memory_events_are_ignored(episodic_store: EpisodicMemoryStore) -> None:
    working = log_of("alice", numbered("alice", 12, importance=WORKING))
    assert forgotten_ids(working), "the working capacity should have forgotten something"
    kept = log_of("bob", [("the dam gave way", EPISODIC)], partition=1)
    not_ours = MemoryForgotten(
        agent_id="bob",
        memory_id=kept[0].memory_id,
        destination="working",
        reason="capacity",
        caused_by=kept[0].event_id,
        config_version="test",
    )

    await episodic_store.apply([*working, *kept, not_ours])

    assert await episodic_store.memories("alice") == []
    assert [m.content for m in await episodic_store.memories("bob")] == ["the dam gave way"]
    assert await episodic_store.count() == 1


async def test_applying_a_batch_twice_equals_once(episodic_store: EpisodicMemoryStore) -> None:
    log = [
        *log_of("alice", numbered("alice", 7), config=SMALL),
        *log_of("bob", numbered("bob", 2), config=SMALL),
    ]
    assert forgotten_ids(log)

    await episodic_store.apply(log)
    once = await state_of(episodic_store, "alice", "bob")
    await episodic_store.apply(log)

    assert await state_of(episodic_store, "alice", "bob") == once
    assert once[0] == 5


async def test_replaying_an_old_prefix_then_the_rest_converges(
    episodic_store: EpisodicMemoryStore,
) -> None:
    items = [(f"event {i}", 0.7 + i / 100) for i in range(8)]
    log = log_of("alice", items, config=SMALL)
    await episodic_store.apply(log)
    final = await state_of(episodic_store, "alice")
    cut = len(log) // 2
    resurrected = forgotten_ids(log[cut:]) & {e.memory_id for e in recorded(log[:cut])}
    assert resurrected, "the prefix should hold memories that the rest of the log forgets"

    await episodic_store.apply(log[:cut])
    during = await episodic_store.memories("alice")
    assert resurrected <= {m.memory_id for m in during}, "a replayed prefix brings them back"
    await episodic_store.apply(log[cut:])

    assert await state_of(episodic_store, "alice") == final
    bob = log_of("bob", items, config=SMALL, partition=1)
    await episodic_store.apply(bob + bob[:cut])
    in_one_batch = await episodic_store.memories("bob")
    assert [(m.seq, m.content) for m in in_one_batch] == [(m.seq, m.content) for m in during], (
        "inside one batch, a record after its forgetting wins, as in the log"
    )


async def test_a_forgetting_applied_again_leaves_a_later_memory_under_its_id(
    episodic_store: EpisodicMemoryStore,
) -> None:
    """Its memory forgotten, an event id recorded a later memory (seq 5) under the same id. The
    first forgetting applied again (a projector's restart re-reads it) names seq 0: the later
    memory stays active. A forgetting of seq 5 reaches it."""
    [first] = recorded(log_of("dora", [("the first life", EPISODIC)]))
    position = first.source_position
    assert position is not None
    gone = MemoryForgotten(
        agent_id="dora",
        memory_id=first.memory_id,
        seq=first.seq,
        destination="episodic",
        reason="capacity",
        caused_by=first.event_id,
        source_position=position.model_copy(update={"offset": 1}),
        config_version=first.config_version,
    )
    later = first.model_copy(
        update={
            "seq": 5,
            "content": "the later life",
            "source_position": position.model_copy(update={"offset": 2}),
        }
    )
    for batch in ([first], [gone], [later], [gone]):
        await episodic_store.apply(batch)

    assert [(m.seq, m.content) for m in await episodic_store.memories("dora")] == [
        (5, "the later life")
    ]
    await episodic_store.apply([gone.model_copy(update={"seq": 5})])
    assert await episodic_store.memories("dora") == []


async def test_capacity_evicts_the_least_important(episodic_store: EpisodicMemoryStore) -> None:
    steps = list(range(60))
    random.Random(7).shuffle(steps)
    importances = [round(0.7 + 0.005 * s, 3) for s in steps]
    log = log_of("alice", [(f"flood report {i}", p) for i, p in enumerate(importances)])
    assert len(forgotten_ids(log)) == 10

    for start in range(0, len(log), 16):
        await episodic_store.apply(log[start : start + 16])

    survivors = await episodic_store.memories("alice")
    assert len(survivors) == 50
    assert await episodic_store.count("alice") == 50
    assert sorted(m.importance for m in survivors) == sorted(importances)[10:]
    assert not forgotten_ids(log) & {m.memory_id for m in survivors}


async def test_applied_offset(episodic_store: EpisodicMemoryStore) -> None:
    assert await episodic_store.applied_offset(TOPIC, 0) is None
    alice = log_of("alice", numbered("alice", 5))
    bob = log_of("bob", numbered("bob", 3), partition=1, first_offset=10)

    await episodic_store.apply([*alice, *bob])
    assert await episodic_store.applied_offset(TOPIC, 0) == 4
    assert await episodic_store.applied_offset(TOPIC, 1) == 12
    assert await episodic_store.applied_offset(TOPIC, 2) is None
    assert await episodic_store.applied_offset("another.topic", 0) is None

    working_only = log_of("carol", numbered("carol", 3, importance=WORKING), first_offset=5)
    await episodic_store.apply(working_only)
    assert await episodic_store.applied_offset(TOPIC, 0) == 7, "no-op events are applied too"

    await episodic_store.apply(alice)
    assert await episodic_store.applied_offset(TOPIC, 0) == 7, "a replay never moves it back"


async def test_promoted_and_summarised_memories_are_stored(
    episodic_store: EpisodicMemoryStore,
) -> None:
    year = year_of("alice")

    await episodic_store.apply(year.log)

    memories = await episodic_store.memories("alice")
    assert memories == [StoredMemory.from_event(e) for e in year.episodic]
    assert [(m.seq, m.level) for m in memories] == [(5, 2), (4, 1), (2, 0), (1, 0), (0, 0)]
    assert {m.memory_id for m in memories} >= {c.memory_id for c in year.copies}
    assert await episodic_store.count("alice") == 5
    [nearest, *_] = await episodic_store.search("alice", year.l2.vector(), limit=5)
    assert nearest.model_copy(update={"similarity": None}) == StoredMemory.from_event(year.l2)
    assert nearest.similarity == pytest.approx(1.0, abs=cosine_tolerance(episodic_store))


async def test_utility_forgetting_removes_a_summary(episodic_store: EpisodicMemoryStore) -> None:
    year = year_of("alice")
    await episodic_store.apply(year.log)

    pruned = forgotten_by_utility(
        year.l1, position=SourcePosition(topic=TOPIC, partition=0, offset=7)
    )
    await episodic_store.apply([pruned])

    memories = await episodic_store.memories("alice")
    assert year.l1.memory_id not in {m.memory_id for m in memories}
    assert [m.level for m in memories] == [2, 0, 0, 0]
    assert await episodic_store.count("alice") == 4
    found = await episodic_store.search("alice", year.l1.vector(), limit=10)
    assert year.l1.memory_id not in {m.memory_id for m in found}
    assert await episodic_store.applied_offset(TOPIC, 0) == 7


async def test_consolidation_record_changes_no_data_but_is_applied(
    episodic_store: EpisodicMemoryStore,
) -> None:
    year = year_of("alice")
    await episodic_store.apply([e for e in year.log if e is not year.year_end])
    count, memories, offset = await state_of(episodic_store, "alice")
    assert offset == 6
    later = year.year_end.model_copy(
        update={"source_position": SourcePosition(topic=TOPIC, partition=0, offset=9)}
    )

    await episodic_store.apply([later])

    assert await state_of(episodic_store, "alice") == (count, memories, 9)


SCHEDULE = Topics().schedule


def forget_at(agent_id: str, offset: int) -> DerivedEvent:
    return agent_forgotten(
        agent_id, position=SourcePosition(topic=SCHEDULE, partition=0, offset=offset)
    )


@dataclass(frozen=True)
class Forgetting:
    """Alice's year (memories and summaries, offsets 0-6) and Bob's two memories on another
    partition, then alice forgotten and, after that, alice's new life (offset 7)."""

    before: list[DerivedEvent]
    forget: DerivedEvent
    new_life: list[DerivedEvent]
    bob: list[DerivedEvent]

    @property
    def log(self) -> list[DerivedEvent]:
        return [*self.before, *self.bob, self.forget, *self.new_life]


def forgetting() -> Forgetting:
    return Forgetting(
        before=year_of("alice").log,
        forget=forget_at("alice", 9),
        new_life=log_of("alice", [("alice came back to town", EPISODIC)], first_offset=7),
        bob=log_of("bob", numbered("bob", 2), partition=1),
    )


@pytest.mark.parametrize("one_call", [True, False], ids=["one-apply", "apply-per-event"])
async def test_agent_forgotten_erases_that_agent_only_in_log_order(
    episodic_store: EpisodicMemoryStore, one_call: bool
) -> None:
    """Alice's memories and summaries before the forget go, Bob's stay, and what alice records
    after it (a new life) stays, in the same apply call or a later one."""
    case = forgetting()
    bob_before = [StoredMemory.from_event(e) for e in reversed(recorded(case.bob))]

    if one_call:
        await episodic_store.apply(case.log)
    else:
        for event in case.log:
            await episodic_store.apply([event])

    alice = await episodic_store.memories("alice")
    assert [(m.content, m.level) for m in alice] == [("alice came back to town", 0)]
    assert await episodic_store.count("alice") == 1
    found = await episodic_store.search("alice", year_of("alice").l2.vector(), limit=10)
    assert [m.content for m in found] == ["alice came back to town"]
    assert await episodic_store.memories("bob") == bob_before
    assert await episodic_store.count() == 3
    assert await episodic_store.applied_offset(TOPIC, 0) == 7
    assert await episodic_store.applied_offset(TOPIC, 1) == 1
    assert await episodic_store.applied_offset(SCHEDULE, 0) == 9


async def test_agent_forgotten_alone_empties_the_agent(
    episodic_store: EpisodicMemoryStore,
) -> None:
    case = forgetting()
    await episodic_store.apply([*case.before, *case.bob])
    assert await episodic_store.count("alice") == 5

    await episodic_store.apply([case.forget])

    assert await episodic_store.memories("alice") == []
    assert await episodic_store.count("alice") == 0
    assert await episodic_store.count("bob") == 2
    assert await episodic_store.applied_offset(SCHEDULE, 0) == 9
    assert await episodic_store.applied_offset(TOPIC, 0) == 6


async def test_replaying_the_log_after_agent_forgotten_converges(
    episodic_store: EpisodicMemoryStore,
) -> None:
    """Episodic stores apply an old prefix again (see the replay test above): an old event of
    alice brings its memory back only until the rest of the log, her forget included, is
    applied again; the whole log twice equals once."""
    case = forgetting()
    await episodic_store.apply(case.log)
    once = await state_of(episodic_store, "alice", "bob")

    await episodic_store.apply(case.log)
    assert await state_of(episodic_store, "alice", "bob") == once
    await episodic_store.apply(case.before[:3])
    assert await episodic_store.count("alice") == 2
    await episodic_store.apply([*case.before[3:], *case.bob, case.forget, *case.new_life])

    assert await state_of(episodic_store, "alice", "bob") == once
    assert await episodic_store.applied_offset(SCHEDULE, 0) == 9


async def test_memories_and_search_filter_by_level(episodic_store: EpisodicMemoryStore) -> None:
    alice = year_of("alice")
    bob = year_of("bob", partition=1)
    await episodic_store.apply([*alice.log, *bob.log])

    async def levels_listed(levels: Sequence[int] | None, limit: int = 1000) -> list[int]:
        memories = await episodic_store.memories("alice", limit=limit, levels=levels)
        assert {m.agent_id for m in memories} == {"alice"}
        return [m.level for m in memories]

    assert await levels_listed(None) == [2, 1, 0, 0, 0]
    assert await levels_listed([0]) == [0, 0, 0]
    assert await levels_listed([1, 2]) == [2, 1]
    assert await levels_listed([2]) == [2]
    assert await levels_listed([0], limit=2) == [0, 0], "the limit counts the asked levels only"

    query = alice.l1.vector()
    summaries = await episodic_store.search("alice", query, limit=10, levels=[1])
    assert [m.memory_id for m in summaries] == [alice.l1.memory_id]
    events = await episodic_store.search("alice", query, limit=10, levels=(0,))
    assert sorted(m.seq for m in events) == [0, 1, 2]
    assert {m.agent_id for m in events} == {"alice"}
    assert len(await episodic_store.search("alice", query, limit=10)) == 5
    with pytest.raises(ValueError, match="levels"):
        await episodic_store.memories("alice", levels=[])
    with pytest.raises(ValueError, match="levels"):
        await episodic_store.search("alice", query, limit=3, levels=())


async def test_bad_input_and_closed_store_fail_clearly(
    episodic_store: EpisodicMemoryStore,
) -> None:
    await episodic_store.ping()
    with pytest.raises(ValueError, match="384-d"):
        await episodic_store.search("alice", np.ones(8, dtype=np.float32), limit=3)
    with pytest.raises(ValueError, match="limit"):
        await episodic_store.search("alice", EMBEDDER.embed("flood"), limit=0)
    small = HashingEmbedder(dim=16)
    foreign = record(
        Observation(agent_id="alice", content="a flood", importance=EPISODIC),
        AgentMemoryState(),
        config=CONFIG,
        embedder=small,
        config_version="test",
    ).memory
    with pytest.raises(ValueError, match="embedder"):
        await episodic_store.apply([foreign])

    await episodic_store.close()

    with pytest.raises(ProjectionError, match="closed"):
        await episodic_store.ping()
    with pytest.raises(ProjectionError, match="closed"):
        await episodic_store.apply(log_of("alice", numbered("alice", 1)))


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    importances=st.lists(
        st.sampled_from([0.1, 0.5, 0.7, 0.75, 0.8, 0.9, 1.0]), min_size=1, max_size=10
    ),
    data=st.data(),
)
async def test_redelivery_equals_applying_once(
    episodic_store: EpisodicMemoryStore, importances: list[float], data: st.DataObject
) -> None:
    """Applying the log twice, or a prefix again followed by an overlapping rest, equals once.

    The store is shared by the examples; each uses an agent of its own.
    """
    agent_id = f"agent-{uuid.uuid4().hex[:8]}"
    log = log_of(agent_id, [(f"event {i}", p) for i, p in enumerate(importances)], config=SMALL)
    cut = data.draw(st.integers(0, len(log)), label="cut")
    resume = data.draw(st.integers(0, cut), label="resume")

    await episodic_store.apply(log)
    once = await state_of(episodic_store, agent_id)
    await episodic_store.apply(log)
    assert await state_of(episodic_store, agent_id) == once
    await episodic_store.apply(log[:cut])
    await episodic_store.apply(log[resume:])
    assert await state_of(episodic_store, agent_id) == once


async def test_edge_store_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "reopened"
    log = log_of("alice", numbered("alice", 6), config=SMALL, first_offset=40)
    store = EdgeEpisodicMemory.open(path, EMBEDDING_DIM)
    try:
        await store.apply(log)
        before = await state_of(store, "alice")
        query = EMBEDDER.embed("alice watched the river rise 5 feet")
        found = await store.search("alice", query, limit=3)
    finally:
        await store.close()
    assert (path / POSITIONS_FILE).exists()

    reopened = EdgeEpisodicMemory.open(path, EMBEDDING_DIM)
    try:
        assert await state_of(reopened, "alice") == before
        assert before[2] == 45
        assert await reopened.search("alice", query, limit=3) == found
    finally:
        await reopened.close()
    try:
        with pytest.raises(ProjectionError, match="vector size"):
            EdgeEpisodicMemory.open(path, 16)
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_edge_search_after_optimize(edge_store: EdgeEpisodicMemory) -> None:
    log = log_of("alice", numbered("alice", 20))
    await edge_store.apply(log)
    query = EMBEDDER.embed("alice watched the river rise 13 feet")
    before = await edge_store.search("alice", query, limit=5)

    await edge_store.optimize()

    assert await edge_store.search("alice", query, limit=5) == before
    assert before[0].content == "alice watched the river rise 13 feet"
    assert [m.seq for m in await edge_store.memories("alice", limit=3)] == [19, 18, 17]
    assert len(await edge_store.memories("alice", levels=[0])) == 20, "the level index answers"
    assert await edge_store.search("alice", query, limit=5, levels=[1, 2]) == []


async def test_factory_picks_the_backend(tmp_path: Path) -> None:
    edge = await open_episodic_store(
        qdrant_url=None, qdrant_path=tmp_path, collection="episodic", dim=EMBEDDING_DIM
    )
    try:
        assert isinstance(edge, EdgeEpisodicMemory)
        assert edge.path == tmp_path / "episodic"
    finally:
        await edge.close()
        shutil.rmtree(tmp_path / "episodic", ignore_errors=True)
    client = await open_episodic_store(
        qdrant_url=":memory:", qdrant_path=tmp_path, collection="episodic", dim=EMBEDDING_DIM
    )
    try:
        assert isinstance(client, QdrantServerEpisodicMemory)
    finally:
        await client.close()
    with pytest.raises(ValueError, match="no episodic store configured"):
        await open_episodic_store(
            qdrant_url=None, qdrant_path=None, collection="episodic", dim=EMBEDDING_DIM
        )


async def test_client_store_refuses_a_collection_of_another_dimension(tmp_path: Path) -> None:
    log = log_of("alice", numbered("alice", 2), first_offset=3)
    store = await QdrantServerEpisodicMemory.open(tmp_path / "local", dim=EMBEDDING_DIM)
    try:
        await store.apply(log)
    finally:
        await store.close()

    with pytest.raises(ProjectionError, match="16-d"):
        await QdrantServerEpisodicMemory.open(tmp_path / "local", dim=16)
    reopened = await QdrantServerEpisodicMemory.open(tmp_path / "local", dim=EMBEDDING_DIM)
    try:
        assert [m.seq for m in await reopened.memories("alice")] == [1, 0]
        assert await reopened.applied_offset(TOPIC, 0) == 4
    finally:
        await reopened.close()
    with pytest.raises(ValueError, match="neither"):
        await QdrantServerEpisodicMemory.open("qdrant:6333", dim=EMBEDDING_DIM)


async def test_a_store_tells_the_vector_size_it_holds(tmp_path: Path) -> None:
    """What opens a version built by another embedder asks it its size; none before it exists."""
    assert await stored_episodic_dim(qdrant_url=None, qdrant_path=tmp_path, collection="e") is None
    edge = await open_episodic_store(qdrant_url=None, qdrant_path=tmp_path, collection="e", dim=16)
    await edge.close()
    try:
        assert (
            await stored_episodic_dim(qdrant_url=None, qdrant_path=tmp_path, collection="e") == 16
        )
    finally:
        shutil.rmtree(tmp_path / "e", ignore_errors=True)

    local = tmp_path / "local"
    assert await qdrant_server.stored_dim(local, "e") is None
    client = await QdrantServerEpisodicMemory.open(local, dim=16, collection="e")
    await client.close()
    assert await qdrant_server.stored_dim(local, "e") == 16


# Hybrid search and filters ---------------------------------------------------------------------

Turn = tuple[str, tuple[str, ...], int]
"""A remembered dialogue turn: its text, its tags (mixed case on purpose), its year."""

CONVERSATIONS: dict[str, list[Turn]] = {
    "caroline": [
        ("I went to the LGBTQ support group yesterday and it was so powerful", ("LGBTQ",), 2023),
        ("The transgender stories at the group made me feel less alone", ("lgbtq",), 2023),
        ("I'm researching adoption agencies because I want to build a family", ("Family",), 2023),
        ("My friend gave me a necklace from Sweden, my home country", ("gift",), 2022),
        ("I'm thinking about a career in counseling and mental health", ("career",), 2023),
        ("I painted a sunset over the lake last weekend", ("ART",), 2022),
        ("The pride parade downtown was loud, colorful and joyful", ("LGBTQ", "event"), 2023),
        ("I read 'Becoming Nicole' and it moved me to tears", ("books",), 2022),
        ("My grandmother taught me to knit when I was little", ("family",), 2021),
        ("I gave a talk at the school about being transgender", ("event", "lgbtq"), 2023),
        ("Counseling courses start in the fall; I signed up for two", ("career",), 2023),
        ("I ran my first 5k charity race for the youth center", ("sport",), 2022),
        ("The adoption interview went well, they liked our home", ("family",), 2023),
        ("I bought a new guitar and I'm learning chords", ("music",), 2022),
        ("We had a picnic at the beach with the support group", ("lgbtq", "beach"), 2023),
        ("I volunteered at the youth shelter on Saturday", ("volunteer",), 2023),
        ("My mentor said counseling needs patience and empathy", ("career",), 2023),
        ("A stranger was rude to me at the bus stop", (), 2022),
    ],
    "melanie": [
        ("I signed up for a pottery class and made a bowl", ("ART",), 2023),
        ("The kids and I went camping in the mountains", ("family", "camping"), 2023),
        ("I painted a lake sunrise for the living room", ("art",), 2022),
        ("I play clarinet in the community band", ("Music",), 2021),
        ("We went to the beach and the kids built sandcastles", ("family", "beach"), 2023),
        ("I ran a charity race for a local children's hospital", ("sport",), 2023),
        ("My husband and I celebrated our anniversary at a vineyard", ("family",), 2022),
        ("I'm reading 'Charlotte's Web' to the kids at bedtime", ("books", "family"), 2023),
        ("The pottery kiln cracked my vase, I was disappointed", ("art",), 2023),
        ("We saw the meteor shower while camping", ("camping",), 2022),
        ("I took the kids to a museum about dinosaurs", ("family",), 2023),
        ("My son broke his arm falling off his bike", ("family", "health"), 2023),
        ("I volunteered at the animal shelter with my daughter", ("volunteer",), 2022),
        ("The band played a concert in the park", ("music", "event"), 2023),
        ("I finished a painting of horses for my mother", ("art", "family"), 2023),
        ("We had a road trip to the Grand Canyon", ("travel",), 2022),
    ],
    "bob": [
        ("I went to the support group for veterans", ("support",), 2023),
        ("My painting of the harbor won a ribbon at the fair", ("art",), 2022),
        ("I went camping by the river and caught a trout", ("camping",), 2023),
        ("The bank approved my loan for the bakery", ("career",), 2023),
        ("I adopted a dog from the shelter; his name is Max", ("family",), 2022),
        ("Our bakery sells sourdough and rye", ("career",), 2023),
        ("I ran the city marathon in four hours", ("sport",), 2023),
        ("My daughter plays the violin at school concerts", ("music", "family"), 2022),
        ("The flood ruined the bakery basement", ("disaster",), 2023),
        ("I read a book about the history of bread", ("books",), 2021),
    ],
}

QUERIES = [
    "When did Caroline go to the LGBTQ support group?",
    "What did Melanie paint?",
    "Where did they go camping?",
    "What instrument does she play?",
    "Is Caroline looking into adoption agencies?",
    "Who gave a talk at the school?",
    "pottery class",
    "What books were read?",
    "charity race for the hospital",
    "the kids at the beach",
    "What career is Caroline pursuing? counseling",
    "sunset painting of a lake",
    "What happened in the flood?",
    "volunteering at a shelter",
    "What did they do?",
    "transgender",
]

PARTITION_OF = {"caroline": 0, "melanie": 1, "bob": 2}


def conversation_log() -> list[DerivedEvent]:
    """Every agent's turns as episodic memories, an L1 summary each, and a few forgettings
    (so IDF must count live memories only)."""
    log: list[DerivedEvent] = []
    for agent_id, turns in CONVERSATIONS.items():
        state = AgentMemoryState()
        partition = PARTITION_OF[agent_id]
        memories: list[MemoryRecorded] = []
        for i, (content, tags, year) in enumerate(turns):
            importance = 0.7 + 0.3 * ((i * 7) % 11) / 10
            recorded_turn = record(
                Observation(
                    agent_id=agent_id,
                    content=content,
                    importance=min(importance, 1.0),
                    step=i,
                    year=year,
                    tags=tags,
                ),
                state,
                config=CONFIG,
                embedder=EMBEDDER,
                config_version=CONFIG.version(EMBEDDER.id),
                position=SourcePosition(topic=TOPIC, partition=partition, offset=i),
            )
            memories.append(recorded_turn.memory)
            log.append(recorded_turn.memory)
            state = recorded_turn.state
        log.append(
            summarised(
                memories[:6],
                level=1,
                content=f"{agent_id} talked about family, art, support groups and camping",
                seq=len(turns),
                trigger_event_id=memories[5].source_event_id,
                position=SourcePosition(topic=TOPIC, partition=partition, offset=len(turns)),
            )
        )
        for gone in memories[3:5]:
            log.append(
                MemoryForgotten(
                    agent_id=agent_id,
                    memory_id=gone.memory_id,
                    destination="episodic",
                    reason="capacity",
                    caused_by=memories[-1].event_id,
                    config_version="test",
                )
            )
    return log


def vectors_of(log: Sequence[DerivedEvent]) -> dict[str, np.ndarray]:
    return {e.memory_id: e.vector() for e in log if isinstance(e, MemoryWritten)}


def approx_or_none(value: float | None) -> object:
    """A lexical score as float32 arithmetic gives it, or None (no shared word) exactly."""
    return None if value is None else pytest.approx(value, rel=1e-5)


def cosine_of(a: np.ndarray, b: np.ndarray) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return 0.0 if norms == 0.0 else float(a @ b) / norms


async def expected_hybrid(
    store: EpisodicMemoryStore,
    vectors: dict[str, np.ndarray],
    agent_id: str,
    query_text: str,
    limit: int,
    memory_filter: MemoryFilter | None = None,
) -> list[tuple[str, float | None]]:
    """The hybrid result computed in process from the agent's memories: BM25 with the IDF of
    all the agent's memories (Qdrant's formula), cosine, both rankings cut at ``limit``, RRF."""
    everything = await store.memories(agent_id)
    admitted = [m for m in everything if memory_filter is None or memory_filter.admits(m)]
    query = EMBEDDER.embed(query_text)
    lexical_all = lexical_scores(query_text, everything)
    ids = {m.memory_id for m in admitted}
    dense = {i: cosine_of(query, vectors[i]) for i in ids} if np.any(query) else {}
    lexical = {i: s for i, s in lexical_all.items() if i in ids}
    return [(i, lexical.get(i)) for i in reciprocal_rank_fusion(dense, lexical, limit)]


def reciprocal_rank_fusion(
    dense: dict[str, float], lexical: dict[str, float], limit: int
) -> list[str]:
    """The best ``limit`` ids by RRF as its paper defines it (``sum of 1 / (60 + rank)``, ranks
    from 1), written out here rather than taken from ``projections.episodic.hybrid.fuse``,
    which the stores call: agreeing with that would prove nothing. Each side ranks by score to
    four significant digits (float noise ties), then id, and is cut at ``limit``; a cosine
    earns a rank only above 1e-6; equal sums go to the better single rank, then the id."""

    def ranked(scores: dict[str, float]) -> list[str]:
        return sorted(scores, key=lambda i: (-float(f"{scores[i]:.4g}"), i))[:limit]

    related = {i: s for i, s in dense.items() if s > 1e-6}
    fused: dict[str, float] = {}
    best: dict[str, int] = {}
    for ranking in (ranked(related), ranked(lexical)):
        for rank, i in enumerate(ranking, start=1):
            fused[i] = fused.get(i, 0.0) + 1 / (60 + rank)
            best[i] = min(best.get(i, rank), rank)
    return sorted(fused, key=lambda i: (-fused[i], best[i], i))[:limit]


async def test_hybrid_search_equals_the_in_process_reference(
    episodic_store: EpisodicMemoryStore,
) -> None:
    """Each backend's hybrid result is exactly what the pure functions compute over the agent's
    live memories: the same ids in the same order, the same lexical scores (so the store's IDF
    is ``ln(1 + (N - n + 0.5) / (n + 0.5))`` over the agent's live memories, forgotten ones and
    other agents' excluded), and cosine similarities."""
    log = conversation_log()
    vectors = vectors_of(log)
    await episodic_store.apply(log)

    for agent_id in CONVERSATIONS:
        for query_text in QUERIES:
            for limit in (3, 8):
                found = await episodic_store.search(
                    agent_id,
                    EMBEDDER.embed(query_text),
                    limit,
                    lexical=query_vector(query_text),
                )
                expected = await expected_hybrid(
                    episodic_store, vectors, agent_id, query_text, limit
                )
                where = f"{agent_id}: {query_text!r} (limit {limit})"
                assert [m.memory_id for m in found] == [i for i, _ in expected], where
                for memory, (_, lexical) in zip(found, expected, strict=True):
                    assert memory.agent_id == agent_id
                    assert memory.lexical == approx_or_none(lexical), where
                    assert memory.similarity == pytest.approx(
                        cosine_of(EMBEDDER.embed(query_text), vectors[memory.memory_id]),
                        abs=cosine_tolerance(episodic_store),
                    ), where


async def test_hybrid_search_finds_words_the_embedding_misses(
    episodic_store: EpisodicMemoryStore,
) -> None:
    """A question whose only content word is inflected differently in the memories: the hashing
    embedding shares no feature with them, the stemmed lexical vector does."""
    await episodic_store.apply(conversation_log())
    query_text = "adopting"

    hybrid = await episodic_store.search(
        "caroline", EMBEDDER.embed(query_text), 3, lexical=query_vector(query_text)
    )

    adoption = [m for m in hybrid if "adoption" in m.content]
    assert len(adoption) == 2
    for memory in adoption:
        assert memory.similarity == pytest.approx(0.0, abs=1e-6)
        assert memory.lexical is not None
        assert memory.lexical > 0.0


async def test_backends_agree_on_hybrid_search(
    edge_store: EdgeEpisodicMemory, client_store: EpisodicMemoryStore
) -> None:
    """Qdrant Edge and the qdrant-client adapter (local mode, or a Qdrant server with
    ``ENGRAM_TEST_BACKEND=containers``) return the same memories in the same order with the
    same scores, for every query, agent, limit and filter."""
    log = conversation_log()
    await edge_store.apply(log)
    await client_store.apply(log)
    filters = [None, *FILTERS]
    compared = 0
    for agent_id in CONVERSATIONS:
        for query_text in QUERIES:
            for memory_filter in filters:
                args = (agent_id, EMBEDDER.embed(query_text), 5)
                lexical = query_vector(query_text)
                on_edge = await edge_store.search(*args, lexical=lexical, filter=memory_filter)
                on_client = await client_store.search(*args, lexical=lexical, filter=memory_filter)
                where = f"{agent_id}: {query_text!r} {memory_filter}"
                assert [m.memory_id for m in on_edge] == [m.memory_id for m in on_client], where
                for a, b in zip(on_edge, on_client, strict=True):
                    assert a.similarity == pytest.approx(
                        b.similarity, abs=cosine_tolerance(edge_store, exact=1e-6)
                    ), where
                    assert a.lexical == approx_or_none(b.lexical), where
                compared += bool(on_edge)
    assert compared > len(QUERIES) * len(CONVERSATIONS), "most searches found something"


FILTERS = [
    MemoryFilter(tags=("lgbtq",)),
    MemoryFilter(tags=("Art", "MUSIC")),
    MemoryFilter(kinds=("episodic",)),
    MemoryFilter(kinds=("summary_l1",)),
    MemoryFilter(kinds=("summary_l1", "summary_l2", "episodic")),
    MemoryFilter(min_importance=0.9),
    MemoryFilter(year_from=2023),
    MemoryFilter(year_from=2022, year_to=2022),
    MemoryFilter(step_from=2, step_to=6),
    MemoryFilter(step_to=3),
    MemoryFilter(tags=("family",), year_from=2023, min_importance=0.75, step_from=1),
]


@pytest.mark.parametrize("memory_filter", FILTERS, ids=str)
async def test_filters_select_what_the_filter_admits(
    episodic_store: EpisodicMemoryStore, memory_filter: MemoryFilter
) -> None:
    """The store's native filter keeps exactly what ``MemoryFilter.admits`` keeps, in listing
    and in search (dense and hybrid), and a limit counts only admitted memories."""
    log = conversation_log()
    await episodic_store.apply(log)

    for agent_id in CONVERSATIONS:
        everything = await episodic_store.memories(agent_id)
        admitted = [m for m in everything if memory_filter.admits(m)]
        listed = await episodic_store.memories(agent_id, filter=memory_filter)
        assert listed == admitted, agent_id
        if len(admitted) > 1:
            first = await episodic_store.memories(agent_id, limit=1, filter=memory_filter)
            assert first == admitted[:1]
        query_text = "family art support camping"
        query = EMBEDDER.embed(query_text)
        for lexical in (None, query_vector(query_text)):
            found = await episodic_store.search(
                agent_id, query, 50, lexical=lexical, filter=memory_filter
            )
            assert {m.memory_id for m in found} <= {m.memory_id for m in admitted}
            if lexical is None:
                assert len(found) == len(admitted), "dense search ranks every admitted memory"
    assert any([await episodic_store.memories(a, filter=memory_filter) for a in CONVERSATIONS])


async def test_tags_match_whatever_their_case(episodic_store: EpisodicMemoryStore) -> None:
    await episodic_store.apply(conversation_log())

    upper = await episodic_store.memories("caroline", filter=MemoryFilter(tags=("LgBtQ",)))

    assert len(upper) == 5
    assert all("lgbtq" in {t.casefold() for t in m.tags} for m in upper)
    assert {t for m in upper for t in m.tags} >= {"LGBTQ", "lgbtq"}, "stored as given"


async def test_kinds_an_episodic_store_does_not_hold_match_nothing(
    episodic_store: EpisodicMemoryStore,
) -> None:
    await episodic_store.apply(conversation_log())
    query = EMBEDDER.embed("support group")

    for kinds in (("working",), ("fact",), ("procedure",), ("working", "fact", "procedure")):
        nothing = MemoryFilter(kinds=kinds)
        assert await episodic_store.memories("caroline", filter=nothing) == []
        assert await episodic_store.search("caroline", query, 5, filter=nothing) == []
        assert (
            await episodic_store.search(
                "caroline", query, 5, lexical=query_vector("support group"), filter=nothing
            )
            == []
        )
    summaries = MemoryFilter(kinds=("summary_l1",))
    assert await episodic_store.memories("caroline", levels=[0], filter=summaries) == []
    assert [m.level for m in await episodic_store.memories("caroline", filter=summaries)] == [1]
    mixed = MemoryFilter(kinds=("working", "summary_l1"))
    assert [m.level for m in await episodic_store.memories("caroline", filter=mixed)] == [1]


async def test_reapplying_keeps_one_sparse_vector_per_point(
    episodic_store: EpisodicMemoryStore,
) -> None:
    """Applying the log again (a redelivery, a replay) replaces each point's sparse vector
    rather than adding one: the IDF statistics, and so every lexical score, stay those of one
    vector per live memory."""
    log = conversation_log()
    query_text = "support group camping painting"
    query, lexical = EMBEDDER.embed(query_text), query_vector(query_text)
    await episodic_store.apply(log)
    once = await episodic_store.search("caroline", query, 10, lexical=lexical)

    await episodic_store.apply(log)
    await episodic_store.apply(log[: len(log) // 2])
    await episodic_store.apply(log[len(log) // 2 :])

    again = await episodic_store.search("caroline", query, 10, lexical=lexical)
    assert [(m.memory_id, m.lexical) for m in again] == [(m.memory_id, m.lexical) for m in once]
    memories = await episodic_store.memories("caroline")
    assert await episodic_store.count("caroline") == len(memories) == 17
    reference = lexical_scores(query_text, memories)
    for memory in again:
        assert memory.lexical == approx_or_none(reference.get(memory.memory_id))


async def test_stopword_queries_and_zero_vectors_rank_by_the_other_signal(
    episodic_store: EpisodicMemoryStore,
) -> None:
    await episodic_store.apply(conversation_log())

    words_only = await episodic_store.search(
        "melanie", np.zeros(EMBEDDING_DIM, dtype=np.float32), 3, lexical=query_vector("pottery")
    )
    assert {m.content for m in words_only} == {
        "I signed up for a pottery class and made a bowl",
        "The pottery kiln cracked my vase, I was disappointed",
    }
    assert len(words_only) == 2, "without a dense ranking only lexical matches rank"
    assert all(m.similarity == 0.0 for m in words_only)

    query = EMBEDDER.embed("pottery class")
    stopwords = await episodic_store.search(
        "melanie", query, 3, lexical=query_vector("what was it")
    )
    assert [m.memory_id for m in stopwords] == [
        m.memory_id for m in await episodic_store.search("melanie", query, 3)
    ]
    assert all(m.lexical is None for m in stopwords)


async def _legacy_edge(path: Path) -> EpisodicMemoryStore:
    """An Edge store as created before hybrid search: a shard with the dense vector only."""
    shard = qe.EdgeShard.create(
        str(path / SHARD_DIR),
        qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=EMBEDDING_DIM, distance=qe.Distance.Cosine)),
    )
    shard.close()
    return EdgeEpisodicMemory.open(path, EMBEDDING_DIM)


async def _legacy_client(path: Path) -> EpisodicMemoryStore:
    """A local-mode collection as created before hybrid search: the dense vector only."""
    client = AsyncQdrantClient(path=str(path))
    await client.create_collection(
        "engram_episodic",
        vectors_config=qmodels.VectorParams(size=EMBEDDING_DIM, distance=qmodels.Distance.COSINE),
    )
    await client.close()
    return await QdrantServerEpisodicMemory.open(path, dim=EMBEDDING_DIM)


@pytest.mark.parametrize("legacy", [_legacy_edge, _legacy_client], ids=["edge", "qdrant-local"])
async def test_a_store_from_before_hybrid_search_answers_dense_only(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    legacy: Callable[[Path], Awaitable[EpisodicMemoryStore]],
) -> None:
    """It keeps applying and searching, ignores the lexical query, filters tags as stored, and
    says (once per store) to rebuild it."""
    with caplog.at_level(logging.WARNING, logger="projections.episodic.hybrid"):
        store = await legacy(tmp_path / "old")
    try:
        assert "engram replay" in caplog.text
        await store.apply(conversation_log())
        query_text = "pottery class"
        query = EMBEDDER.embed(query_text)

        hybrid = await store.search("melanie", query, 4, lexical=query_vector(query_text))

        assert hybrid == await store.search("melanie", query, 4)
        assert all(m.lexical is None for m in hybrid)
        assert hybrid[0].content == "I signed up for a pottery class and made a bowl"
        assert caplog.text.count("engram replay") == 1
        tagged = await store.memories("caroline", filter=MemoryFilter(tags=("LGBTQ",)))
        assert {t for m in tagged for t in m.tags} >= {"LGBTQ", "lgbtq"}, "as given, and lower"
        mixed = await store.memories("caroline", filter=MemoryFilter(tags=("LgBtQ",)))
        assert len(mixed) == 3, "an old store matches the lowercase tags only"
        assert (await store.memories("bob", filter=MemoryFilter(year_from=2023)))[0].year == 2023
    finally:
        await store.close()


async def test_a_new_edge_store_keeps_its_sparse_vector_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "hybrid"
    store = EdgeEpisodicMemory.open(path, EMBEDDING_DIM)
    query = EMBEDDER.embed("pottery")
    try:
        await store.apply(conversation_log())
        before = await store.search("melanie", query, 3, lexical=query_vector("pottery"))
    finally:
        await store.close()
    reopened = EdgeEpisodicMemory.open(path, EMBEDDING_DIM)
    try:
        assert reopened.lexical
        assert await reopened.search("melanie", query, 3, lexical=query_vector("pottery")) == before
        assert before[0].lexical is not None
    finally:
        await reopened.close()


async def test_ties_at_the_cut_go_by_id_on_every_backend(tmp_path: Path) -> None:
    """Forty memories that score alike for "rain" on both signals (the same words but a number,
    the same length; only float noise tells their cosines apart): which three make the cut
    must not depend on the order, nor the noise, a backend returns equal scores with, so both
    answer what the in-process reference ranks by id."""
    log = log_of("alice", [(f"rain number {i}", EPISODIC) for i in range(40)])
    edge = EdgeEpisodicMemory.open(tmp_path / "edge", EMBEDDING_DIM)
    client = await QdrantServerEpisodicMemory.open(":memory:", dim=EMBEDDING_DIM)
    try:
        answers = []
        for store in (edge, client):
            await store.apply(log)
            found = await store.search(
                "alice", EMBEDDER.embed("rain"), 3, lexical=query_vector("rain")
            )
            expected = await expected_hybrid(store, vectors_of(log), "alice", "rain", 3)
            assert [m.memory_id for m in found] == [i for i, _ in expected]
            answers.append([m.memory_id for m in found])
        assert answers[0] == answers[1]
        assert len(answers[0]) == 3
    finally:
        await edge.close()
        await client.close()
