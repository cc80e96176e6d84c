"""The engine: which episodic memories are copies of working ones, and the dispatch of every
mode and filter over in-test stores (the real stores are in the integration suite)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, get_args

import numpy as np
import pytest

from processors.embedding import HashingEmbedder
from processors.lexical import SparseQuery
from projections.episodic.candidates import CandidateSignals, Scope
from projections.memory import StoredMemory
from projections.retrieval.basic import Arousal, StoredArousal
from projections.retrieval.breakdowns import (
    ConstrainedBreakdown,
    RelevanceBreakdown,
    TwoPhaseBreakdown,
)
from projections.retrieval.engine import (
    RetrievalEngine,
    rank,
    relevance_of,
    relevance_parts,
    without_copies_of,
)
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.models import Mode, RetrievalRequest
from projections.retrieval.pool_reads import one_per_source
from schemas.memory_events import DerivedEvent, Destination, EmaState, SurpriseReading


def memory(
    memory_id: str, source_event_id: str, *, level: int = 0, destination: Destination = "episodic"
) -> StoredMemory:
    return StoredMemory(
        memory_id=memory_id,
        agent_id="H001",
        content=memory_id,
        importance=0.8,
        destination=destination,
        seq=1,
        occurred_at=datetime(2024, 1, 1, tzinfo=UTC),
        source_event_id=source_event_id,
        source_event_type="observation",
        level=level,
    )


def test_a_copy_is_dropped_while_its_original_is_in_working_memory() -> None:
    original = memory("original", "event-1", destination="working")
    copy = memory("copy", "event-1")
    other = memory("other", "event-2")

    assert without_copies_of([original], [copy, other]) == [other]
    assert without_copies_of([], [copy, other]) == [copy, other], "FIFO took the original"


def test_a_summary_of_the_same_source_event_is_no_copy() -> None:
    trigger = memory("trigger", "event-1", destination="working")
    l1 = memory("l1", "event-1", level=1)
    l2 = memory("l2", "event-1", level=2)

    assert without_copies_of([trigger], [l1, l2]) == [l1, l2]


class ListedWorking:
    """Working memory as a list; counts reads so a test can see it was spared."""

    def __init__(self, memories: Sequence[StoredMemory]) -> None:
        self.items = list(memories)
        self.reads = 0
        self.readings: dict[str, SurpriseReading] = {}

    async def memories(self, agent_id: str) -> list[StoredMemory]:
        self.reads += 1
        return sorted((m for m in self.items if m.agent_id == agent_id), key=lambda m: -m.seq)

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        raise NotImplementedError("retrieval never writes")

    async def advance(self, positions: Mapping[tuple[str, int], int]) -> None:
        raise NotImplementedError("retrieval never writes")

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        return None

    async def arousal(self, agent_id: str) -> SurpriseReading | None:
        return self.readings.get(agent_id)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


class ListedEpisodic(ListedWorking):
    """Episodic memory as a list; a search fills in the cosine similarity as the stores do."""

    def __init__(self, memories: Sequence[StoredMemory]) -> None:
        super().__init__(memories)
        self.levels_read: list[tuple[int, ...]] = []
        self.filters: list[MemoryFilter | None] = []
        self.bounds: list[int] = []

    async def memories(  # type: ignore[override]
        self,
        agent_id: str,
        limit: int = 1000,
        levels: Sequence[int] | None = None,
        *,
        filter: MemoryFilter | None = None,
    ) -> list[StoredMemory]:
        self.reads += 1
        self.levels_read.append(tuple(levels or ()))
        self.filters.append(filter)
        return [
            m
            for m in await super().memories(agent_id)
            if (levels is None or m.level in levels) and (filter is None or filter.admits(m))
        ][:limit]

    async def candidates(
        self,
        agent_id: str,
        signals: CandidateSignals,
        levels: Sequence[int] | None = None,
        *,
        filter: MemoryFilter | None = None,
        scope: Scope = "active",
    ) -> list[StoredMemory]:
        """The whole pool (smaller than any candidate bound), as a store returns it; these
        stores keep no archive."""
        self.bounds.append(signals.limit)
        if signals.vector is not None and signals.nearest:
            return await self.search(agent_id, signals.vector, 1000, levels, filter=filter)
        return await self.memories(agent_id, 1000, levels, filter=filter)

    async def search(
        self,
        agent_id: str,
        vector: np.ndarray,
        limit: int,
        levels: Sequence[int] | None = None,
        *,
        lexical: SparseQuery | None = None,
        filter: MemoryFilter | None = None,
    ) -> list[StoredMemory]:
        assert lexical is None, "the engine blends keywords over the pool itself"
        found = await self.memories(agent_id, limit, levels, filter=filter)
        return [
            m.model_copy(update={"similarity": float(vector @ EMBEDDER.embed(m.content))})
            for m in found
        ]

    async def count(self, agent_id: str | None = None) -> int:
        return len(self.items)


EMBEDDER = HashingEmbedder(64)


def remembered(
    seq: int,
    content: str,
    *,
    destination: Destination = "episodic",
    importance: float = 0.5,
    tags: tuple[str, ...] = (),
    level: int = 0,
) -> StoredMemory:
    return StoredMemory(
        memory_id=f"m{seq}",
        agent_id=AGENT,
        content=content,
        importance=importance,
        destination=destination,
        seq=seq,
        year=seq,
        tags=tags,
        occurred_at=datetime(2024, 1, 1, tzinfo=UTC),
        source_event_id=f"event-{seq}",
        source_event_type="observation",
        level=level,
    )


AGENT = "H001"
WORKING = [
    remembered(8, "a quiet day gardening in the backyard", destination="working", importance=0.1),
    remembered(9, "bought groceries at the market", destination="working", importance=0.2),
    remembered(10, "the river is rising again", destination="working", importance=0.4),
]
EPISODIC = [
    remembered(1, "a massive flood breached the levee", importance=1.0, tags=("Flood",)),
    remembered(2, "the insurance agent called about flood cover", importance=0.7, tags=("flood",)),
    remembered(3, "neighbours elevated their house", importance=0.6),
    remembered(4, "the town festival was fun", importance=0.3),
    remembered(5, "storm damaged the roof", importance=0.8, tags=("Storm",)),
    remembered(6, "the season of floods in summary", importance=0.9, level=1),
]


def an_engine(
    arousal_of: Callable[[str], Awaitable[StoredArousal | None]] | None = None,
) -> tuple[RetrievalEngine, ListedWorking, ListedEpisodic]:
    working, episodic = ListedWorking(WORKING), ListedEpisodic(EPISODIC)
    return RetrievalEngine(working, episodic, EMBEDDER, arousal_of=arousal_of), working, episodic


def request(**fields: Any) -> RetrievalRequest:
    return RetrievalRequest.model_validate(fields)


@pytest.mark.parametrize(
    ("fields", "count"),
    [
        ({"mode": "two_phase", "top_k": 4}, 4),
        ({"mode": "weighted", "top_k": 4}, 4),
        ({"mode": "saliency", "top_k": 4}, 4),
        ({"mode": "basic", "top_k": 1}, 7),
        ({"mode": "constrained"}, 7),
        ({"mode": "generative", "top_k": 4}, 4),
        ({"mode": "relevance", "top_k": 4, "query": "flood"}, 4),
        ({"mode": "recent", "top_k": 4, "current_time": "2024-01-02T00:00:00Z"}, 4),
    ],
)
async def test_every_mode_is_dispatched_and_explained(fields: dict[str, Any], count: int) -> None:
    """Basic and constrained return the count their configuration decides, not top_k."""
    engine, _, _ = an_engine()

    response = await engine.retrieve(AGENT, request(**fields))

    assert response.mode == fields["mode"]
    assert len(response.results) == count
    assert {r.breakdown.mode for r in response.results} == {fields["mode"]}
    assert [r.rank for r in response.results] == list(range(1, count + 1))
    assert (response.working_count, response.episodic_count) == (3, 5)


async def test_saliency_trades_importance_against_age() -> None:
    """In year 11 the year-1 flood (1.0 -> 0.368) still beats last year's rising river
    (0.4 -> 0.362); the year-5 storm (0.8 -> 0.439) beats both."""
    engine, _, _ = an_engine()

    response = await engine.retrieve(AGENT, request(mode="saliency", top_k=3, current_year=11))

    assert [r.memory_id for r in response.results] == ["m5", "m1", "m10"]


async def test_constrained_takes_arousal_from_the_request_then_the_agent() -> None:
    stored: dict[str, StoredArousal | None] = {AGENT: Arousal(0.9)}

    async def arousal_of(agent_id: str) -> StoredArousal | None:
        return stored[agent_id]

    engine, _, _ = an_engine(arousal_of)

    agents = await engine.retrieve(AGENT, request(mode="constrained"))
    told = await engine.retrieve(AGENT, request(mode="constrained", arousal=0.0))
    stored[AGENT] = None
    unknown = await engine.retrieve(AGENT, request(mode="constrained", profile="MINIMAL"))

    first = agents.results[0].breakdown
    assert isinstance(first, ConstrainedBreakdown)
    assert (first.profile, first.arousal, first.count, first.system) == (
        "MILLER_STANDARD",
        0.9,
        7,
        "SYSTEM_2",
    )
    assert len(agents.results) == 8, "7 memories recent: only 1 left for the supplement"
    told_first = told.results[0].breakdown
    assert isinstance(told_first, ConstrainedBreakdown)
    assert (told_first.arousal, told_first.count, told_first.system) == (0.0, 5, "SYSTEM_1")
    unknown_first = unknown.results[0].breakdown
    assert isinstance(unknown_first, ConstrainedBreakdown)
    assert (unknown_first.profile, unknown_first.arousal, unknown_first.count) == (
        "MINIMAL",
        0.0,
        3,
    )
    assert len(unknown.results) == 5


async def test_constrained_names_the_system_at_the_agent_types_threshold() -> None:
    """An agent type with ``arousal_threshold`` 0.7 is in System 1 at 0.6, as its stored
    reading says, though seed 003's default 0.5 would call it System 2; a request's own arousal
    reads no store and is judged against seed 003's 0.5."""
    engine, _, _ = an_engine(lambda _: _stored(Arousal(0.6, threshold=0.7)))

    own = await engine.retrieve(AGENT, request(mode="constrained"))
    told = await engine.retrieve(AGENT, request(mode="constrained", arousal=0.6))

    own_first, told_first = own.results[0].breakdown, told.results[0].breakdown
    assert isinstance(own_first, ConstrainedBreakdown)
    assert isinstance(told_first, ConstrainedBreakdown)
    assert (own_first.arousal, own_first.count, own_first.system) == (0.6, 6, "SYSTEM_1")
    assert (told_first.arousal, told_first.count, told_first.system) == (0.6, 6, "SYSTEM_2")


async def _stored(arousal: StoredArousal) -> StoredArousal:
    return arousal


async def test_constrained_without_an_arousal_source_is_system_1() -> None:
    engine, _, _ = an_engine()

    response = await engine.retrieve(AGENT, request(mode="constrained"))

    sources = [r.breakdown.source for r in response.results]  # type: ignore[union-attr]
    assert sources == ["recent"] * 5 + ["supplement"] * 2


async def test_a_stored_arousal_outside_zero_one_is_clamped() -> None:
    async def excited(agent_id: str) -> StoredArousal | None:
        return Arousal(3.0)

    engine, _, _ = an_engine(excited)

    response = await engine.retrieve(AGENT, request(mode="constrained"))

    first = response.results[0].breakdown
    assert isinstance(first, ConstrainedBreakdown)
    assert (first.arousal, first.count) == (1.0, 7)


class CountingEmbedder:
    """The test embedder, noting every text it embeds."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    @property
    def id(self) -> str:
        return EMBEDDER.id

    @property
    def dim(self) -> int:
        return EMBEDDER.dim

    def embed(self, text: str) -> np.ndarray:
        self.texts.append(text)
        return EMBEDDER.embed(text)


async def test_working_memories_are_embedded_once_across_queries() -> None:
    embedder = CountingEmbedder()
    working = ListedWorking(WORKING)
    engine = RetrievalEngine(working, ListedEpisodic(EPISODIC), embedder)
    asked = request(mode="relevance", query="the river", top_k=10)

    first = await engine.retrieve(AGENT, asked)
    again = await engine.retrieve(AGENT, asked)
    working.items.append(
        remembered(11, "the levee is being repaired", destination="working", importance=0.3)
    )
    later = await engine.retrieve(AGENT, asked)

    texts = [m.content for m in reversed(WORKING)]  # newest first, as the store lists them
    assert embedder.texts == [
        "the river",
        *texts,
        "the river",
        "the river",
        "the levee is being repaired",
    ]
    assert [(r.memory_id, r.score) for r in again.results] == [
        (r.memory_id, r.score) for r in first.results
    ]
    assert len(later.results) == len(first.results) + 1


async def test_relevance_mode_ranks_by_the_query_and_shows_its_parts() -> None:
    engine, _, _ = an_engine()

    response = await engine.retrieve(AGENT, request(mode="relevance", query="flood", top_k=10))

    assert engine.dense_share == 0.75, "the hashing embedder's default"
    assert [r.memory_id for r in response.results][:2] == ["m1", "m2"], "shorter text, more BM25"
    top = response.results[0].breakdown
    assert isinstance(top, RelevanceBreakdown)
    assert top.parts["lexical_norm"] == 1.0, "the pool's best keyword match"
    assert top.parts["similarity"] > 0.0, "episodic memories were searched by vector"
    for result in response.results:
        parts = result.breakdown.parts  # type: ignore[union-attr]
        blended = 0.75 * max(parts["similarity"], 0.0) + 0.25 * parts.get("lexical_norm", 0.0)
        assert parts["own"] == pytest.approx(blended)
        lifted = (blended + 0.5 * parts.get("context", 0.0)) / 1.5
        assert result.score == pytest.approx(lifted), "lifted by its conversation's best turn"
    working = [r for r in response.results if r.store == "working"]
    assert working, "top_k 10 reaches working memory"
    assert all("similarity" in r.breakdown.parts for r in working), (  # type: ignore[union-attr]
        "working memories are embedded at query time"
    )


async def test_a_dense_share_of_one_ranks_by_the_cosine_alone() -> None:
    working, episodic = ListedWorking(WORKING), ListedEpisodic(EPISODIC)
    engine = RetrievalEngine(working, episodic, EMBEDDER, dense_share=1.0)

    response = await engine.retrieve(AGENT, request(mode="relevance", query="flood", top_k=10))

    parts = [r.breakdown.parts for r in response.results]  # type: ignore[union-attr]
    assert all(p["own"] == pytest.approx(max(p["similarity"], 0.0)) for p in parts)
    with pytest.raises(ValueError, match="dense_share"):
        RetrievalEngine(working, episodic, EMBEDDER, dense_share=1.5)


@pytest.mark.parametrize(
    ("fields", "bound"),
    [
        ({"mode": "relevance", "query": "flood"}, 7),
        # A query of stopwords embeds to zeros: relevance falls back to recency and importance.
        ({"mode": "relevance", "query": "the and of"}, 30),
        ({"mode": "generative", "query": "flood"}, 30),
        ({"mode": "two_phase"}, 30),
    ],
)
async def test_relevance_by_the_query_alone_reads_with_its_own_bound(
    fields: dict[str, Any], bound: int
) -> None:
    working, episodic = ListedWorking(WORKING), ListedEpisodic(EPISODIC)
    engine = RetrievalEngine(
        working, episodic, EMBEDDER, candidate_limit=30, relevance_candidate_limit=7
    )

    await engine.retrieve(AGENT, request(**fields))

    assert episodic.bounds == [bound]


async def test_the_turns_beside_are_read_once_candidates_fill_the_relevance_bound() -> None:
    """Five candidates fill a relevance bound of 3, not the others' 30: the turns beside the
    best are read as well (a second read, for their seqs)."""
    working, episodic = ListedWorking(WORKING), ListedEpisodic(EPISODIC)
    engine = RetrievalEngine(
        working, episodic, EMBEDDER, candidate_limit=30, relevance_candidate_limit=3
    )

    await engine.retrieve(AGENT, request(mode="relevance", query="flood"))

    assert len(episodic.bounds) == 2, "the turns beside were not read"
    assert episodic.bounds[0] == 3


async def test_without_a_candidate_bound_relevance_reads_the_whole_pool_too() -> None:
    working, episodic = ListedWorking(WORKING), ListedEpisodic(EPISODIC)
    engine = RetrievalEngine(
        working, episodic, EMBEDDER, candidate_limit=None, relevance_candidate_limit=7
    )

    answer = await engine.retrieve(AGENT, request(mode="relevance", query="flood"))

    assert episodic.bounds == [], "candidates were read instead of the pool"
    assert answer.episodic_count == sum(1 for m in EPISODIC if m.level == 0)
    with pytest.raises(ValueError, match="candidate limits must be at least 1"):
        RetrievalEngine(working, episodic, EMBEDDER, relevance_candidate_limit=0)


async def test_the_filter_is_passed_to_the_episodic_store() -> None:
    engine, _, episodic = an_engine()
    flood = MemoryFilter(tags=("FLOOD",), min_importance=0.5)

    await engine.retrieve(AGENT, request(mode="relevance", query="flood", filter=flood))
    await engine.retrieve(AGENT, request(mode="saliency", filter=flood))

    assert episodic.filters == [flood, flood], "searched, then listed, both filtered natively"


async def test_constrained_reads_the_working_stores_surprise_reading_by_default() -> None:
    engine, working, _ = an_engine()
    working.readings[AGENT] = SurpriseReading(
        strategy="ema",
        observed=0.9,
        expectation=0.1,
        surprise=0.8,
        arousal=1.0,
        threshold=0.5,
        system="SYSTEM_2",
        state=EmaState(expectation=0.7, observations=3),
    )

    response = await engine.retrieve(AGENT, request(mode="constrained", top_k=10))

    first = response.results[0].breakdown
    assert isinstance(first, ConstrainedBreakdown)
    assert (first.arousal, first.count) == (1.0, 7)


async def test_generative_weighs_relevance_into_the_rank() -> None:
    engine, _, _ = an_engine()
    only_relevance = {"recency": 0.0, "importance": 0.0, "relevance": 1.0}

    plain = await engine.retrieve(AGENT, request(mode="generative", top_k=1))
    relevant = await engine.retrieve(
        AGENT,
        request(mode="generative", top_k=2, query="market groceries", generative=only_relevance),
    )

    assert plain.generative is not None
    assert plain.generative.recency == 1.0
    assert [r.memory_id for r in plain.results] == ["m10"]
    assert relevant.results[0].memory_id == "m9"
    assert relevant.generative is not None
    assert relevant.generative.importance == 0.0


async def test_a_filter_applies_in_every_mode() -> None:
    engine, _, _ = an_engine()
    flood = {"tags": ["FLOOD"]}
    needs = {"relevance": {"query": "flood"}, "recent": {"current_time": "2024-01-02T00:00:00Z"}}

    for mode in get_args(Mode):
        response = await engine.retrieve(
            AGENT, request(mode=mode, filter=flood, **needs.get(mode, {}))
        )
        assert {r.memory_id for r in response.results} == {"m1", "m2"}, mode
        assert (response.working_count, response.episodic_count) == (0, 2)


async def test_kinds_choose_the_stores_and_levels_read() -> None:
    engine, working, episodic = an_engine()

    episodic_only = await engine.retrieve(AGENT, request(filter={"kinds": ["episodic"]}, top_k=10))
    assert working.reads == 0
    assert {r.store for r in episodic_only.results} == {"episodic"}
    assert episodic.levels_read[-1] == (0,)

    summaries = await engine.retrieve(AGENT, request(filter={"kinds": ["summary_l1"]}))
    assert [r.memory_id for r in summaries.results] == ["m6"]
    assert episodic.levels_read[-1] == (1,)

    working_only = await engine.retrieve(AGENT, request(filter={"kinds": ["working"]}, top_k=10))
    assert working.reads == 1
    assert [r.memory_id for r in working_only.results] == ["m10", "m9", "m8"]


async def test_kinds_of_later_layers_read_nothing_and_return_nothing() -> None:
    engine, working, episodic = an_engine()

    response = await engine.retrieve(AGENT, request(filter={"kinds": ["fact", "procedure"]}))

    assert response.results == ()
    assert (working.reads, episodic.reads) == (0, 0)


async def test_importance_and_year_filters() -> None:
    engine, _, _ = an_engine()

    important = await engine.retrieve(
        AGENT, request(mode="saliency", top_k=10, filter={"min_importance": 0.7})
    )
    window = await engine.retrieve(
        AGENT, request(mode="saliency", top_k=10, filter={"year_from": 3, "year_to": 8})
    )

    assert {r.memory_id for r in important.results} == {"m1", "m2", "m5"}
    assert {r.memory_id for r in window.results} == {"m3", "m4", "m5", "m8"}


def test_relevance_blends_the_cosine_with_the_pools_best_keyword_match() -> None:
    words = remembered(1, "flood insurance renewal").model_copy(update={"similarity": 0.2})
    searched = remembered(2, "water in the basement").model_copy(update={"similarity": 0.4})
    unembedded = remembered(3, "flood")

    assert relevance_of(None, [words, searched]) == {"m1": 0.0, "m2": 0.0}
    relevance = relevance_of("flood", [words, searched, unembedded], dense_share=0.5)
    parts = relevance_parts("flood", [words, searched, unembedded], dense_share=0.5)

    own = {key: shown["own"] for key, shown in parts.items()}
    assert parts["m2"]["similarity"] == 0.4
    assert own["m2"] == pytest.approx(0.2), "no stem shared: half the cosine"
    assert parts["m3"]["lexical_norm"] == 1.0, "the shorter text has the higher BM25"
    assert "similarity" not in parts["m3"]
    assert parts["m1"]["lexical_norm"] < 1.0
    assert own["m1"] == pytest.approx(0.5 * 0.2 + 0.5 * parts["m1"]["lexical_norm"])
    assert own["m3"] == pytest.approx(0.5)
    # The three are consecutive turns of one moment: m2 sits between m1 and m3.
    assert parts["m2"]["context"] == pytest.approx(max(own["m1"], own["m3"]))
    assert relevance["m2"] == pytest.approx((own["m2"] + 0.5 * parts["m2"]["context"]) / 1.5)
    assert relevance == {key: shown["relevance"] for key, shown in parts.items()}


def test_rank_without_a_mode_is_two_phase() -> None:
    ranking = rank(request(top_k=4), WORKING, EPISODIC[:5])

    assert [s.memory.memory_id for s in ranking.results] == ["m10", "m9", "m8", "m1"]
    assert all(isinstance(s.breakdown, TwoPhaseBreakdown) for s in ranking.results)


@pytest.mark.parametrize("order", ["original first", "copy first"])
async def test_an_archived_original_gives_way_to_its_promoted_copy_in_either_order(
    order: str,
) -> None:
    """Both hold the same content and score; a store returns them in either order, and the
    answer must not depend on it (a recorded retrieval run again would differ)."""
    original = memory("original", "event-1", destination="working")  # left for the archive
    copy = memory("copy", "event-1")
    pair = [original, copy] if order == "original first" else [copy, original]
    engine = RetrievalEngine(ListedWorking([]), ListedEpisodic(pair), EMBEDDER)

    answer = await engine.retrieve("H001", request(mode="saliency", scope="all", top_k=10))

    assert [r.memory_id for r in answer.results] == ["copy"]
    assert one_per_source([original, copy, original]) == [copy]
