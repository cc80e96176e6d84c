"""The episodic memory contract, run on Qdrant Edge and on the qdrant-client adapter.

Events are real: built by ``processors.recording.record`` from observations whose explicit
``importance`` decides the route (>= 0.7 episodic, else working), so the stores are tested on
exactly what the processors emit, capacity evictions included.
"""

from __future__ import annotations

import random
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.config import ProcessingConfig, load_processing_config
from processors.embedding import HashingEmbedder
from processors.recording import AgentMemoryState, record
from projections.episodic.edge import POSITIONS_FILE, EdgeEpisodicMemory
from projections.episodic.factory import open_episodic_store
from projections.episodic.qdrant_server import QdrantServerEpisodicMemory
from projections.interfaces import EpisodicMemoryStore, ProjectionError
from projections.memory import StoredMemory
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
from tests.integration.fixtures.qdrant import EMBEDDING_DIM
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
        assert memory.similarity == pytest.approx(expected[memory.memory_id], abs=1e-5)
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
    assert exact[0].similarity == pytest.approx(1.0, abs=1e-5)


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
    assert nearest.similarity == pytest.approx(1.0, abs=1e-5)


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
        with pytest.raises(ProjectionError, match="vector size"):
            EdgeEpisodicMemory.open(path, 16)
    finally:
        await reopened.close()
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
