"""The retrieval engine: read one agent's memories from both stores, rank them, explain the rank.

The stores are small per agent (working capacity 10, episodic 50: seed 004 section 5.1), so the
engine reads all of an agent's memories and ranks them in process with the pure functions of
:mod:`projections.retrieval.scoring`; the stores only have to list and, given a query, search.

Modes. :func:`rank` dispatches the request's mode to its pure scoring function (two_phase and
weighted in :mod:`~projections.retrieval.scoring`, saliency, basic and constrained, generative,
by_relevance in their own modules). Relevance for the generative and relevance modes comes from
:func:`relevance_of`; the constrained mode's arousal is the request's, else the agent's stored
one (``arousal_of``), else 0.

Levels and filters. A request names the levels it ranks (0 memories of events by default;
summaries only when asked for). Working memory holds memories of events only, so it is not read
at all when level 0 is not asked for; the episodic store filters by level itself. A request's
``filter`` with kinds decides the levels instead and spares reading working memory unless it
asks for kind "working" (:func:`~projections.retrieval.filters.levels_for`); every filter is
applied to every memory read before ranking, whichever store it came from.

Read your writes. A request may carry positions returned by publishing (``after``). Before it
reads, the engine polls both stores' applied offsets (5 ms, doubling to 50 ms) until each has
reached every position, up to the request's ``wait_timeout_ms``; then it raises
:class:`PositionsNotAppliedError`, which names what is pending and how far each store is. Only
positions on the topics the processors consume can ever be applied; others are refused at once.

One experience, one result. A working memory promoted at year end has an episodic copy with its
own memory id but the same source event and level; while the original is still in working
memory, the copy is dropped before ranking, so it neither shows twice nor counts as considered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

import numpy as np

from processors.embedding import Embedder
from projections.interfaces import EpisodicMemoryStore, ProjectionError, WorkingMemoryStore
from projections.memory import StoredMemory
from projections.retrieval.basic import DEFAULT_PROFILE, PROFILES, basic, constrained
from projections.retrieval.by_relevance import by_relevance
from projections.retrieval.filters import levels_for
from projections.retrieval.generative import GenerativeWeights, generative
from projections.retrieval.models import (
    PendingPosition,
    RecordPosition,
    RetrievalRequest,
    RetrievalResponse,
    RetrievedMemory,
)
from projections.retrieval.saliency import saliency
from projections.retrieval.scoring import (
    Ranking,
    Weights,
    keyword_set,
    overlap,
    two_phase,
    weighted,
)
from schemas.topics import Topics

SOURCE_TOPICS = (*Topics().agent_inputs, Topics().schedule, Topics().access)
"""The topics the processors consume, unprefixed: the only ones whose positions stores record."""

FIRST_POLL_S = 0.005
MAX_POLL_S = 0.05

EPISODIC_READ_LIMIT = 1000
"""Far above the episodic capacity of 50, so a read returns every memory even while eviction
lags behind recording; the ranking then sees the whole store, as the seeds' engines do."""


class UnknownTopicError(ValueError):
    """A position of ``after`` is on a topic the processors do not consume: waiting for it
    could only time out."""

    def __init__(self, index: int, topic: str) -> None:
        super().__init__(
            f"topic {topic!r} is not one the processors consume; positions come from "
            f"publishing to {', '.join(SOURCE_TOPICS)} (with the deployment's prefix)"
        )
        self.index = index
        self.topic = topic


class PositionsNotAppliedError(TimeoutError):
    """The stores had not applied every position of ``after`` when the wait ended."""

    def __init__(
        self, pending: Sequence[PendingPosition], total: int, waited_s: float, timeout_s: float
    ) -> None:
        def mark(offset: int | None) -> str:
            return "nothing applied" if offset is None else f"at {offset}"

        listed = "; ".join(
            f"{p.topic}[{p.partition}]@{p.offset} (working memory {mark(p.working)}, "
            f"episodic memory {mark(p.episodic)})"
            for p in pending
        )
        super().__init__(
            f"{len(pending)} of {total} positions not applied by the memory stores within "
            f"{timeout_s * 1000:.0f} ms: {listed}. The processors are behind or stopped; "
            "retry, or wait longer with wait_timeout_ms"
        )
        self.pending = tuple(pending)
        self.waited_s = waited_s


class RetrievalEngine:
    def __init__(
        self,
        working: WorkingMemoryStore,
        episodic: EpisodicMemoryStore,
        embedder: Embedder,
        *,
        episodic_limit: int = EPISODIC_READ_LIMIT,
        source_topics: Collection[str] | None = None,
        arousal_of: Callable[[str], Awaitable[float | None]] | None = None,
    ) -> None:
        """``source_topics`` are the exact topics positions may name; by default any topic
        whose name ends with one of :data:`SOURCE_TOPICS`, whatever the prefix.
        ``arousal_of`` reads an agent's stored arousal (None: not known) for the constrained
        mode; without it, or when it knows none, arousal is 0 (System 1)."""
        if episodic_limit < 1:
            raise ValueError("episodic_limit must be at least 1")
        self._arousal_of = arousal_of
        self._working = working
        self._episodic = episodic
        self._embedder = embedder
        self._episodic_limit = episodic_limit
        self._source_topics = None if source_topics is None else frozenset(source_topics)

    def use(self, working: WorkingMemoryStore, episodic: EpisodicMemoryStore) -> None:
        """Serve another projection version from the next read on. Both stores change in one
        step, so no retrieval reads one version's working memory with another's episodic."""
        self._working, self._episodic = working, episodic

    async def retrieve(self, agent_id: str, request: RetrievalRequest) -> RetrievalResponse:
        """Rank the agent's memories as ``request`` asks.

        Raises :class:`ProjectionError` when a store cannot be read: a retrieval from one store
        only would silently change what the agent remembers.
        """
        waited_s = 0.0
        if request.after:
            waited_s = await self.wait_for(request.after, request.wait_timeout_ms / 1000)
        started = time.perf_counter()
        levels, read_working = levels_for(request.filter, request.levels)
        working, episodic = await self._read(agent_id, request.query, levels, read_working)
        if request.filter is not None:
            admits = request.filter.admits
            working = [m for m in working if admits(m)]
            episodic = [m for m in episodic if admits(m)]
        arousal = 0.0
        if request.mode == "constrained" and request.arousal is None:
            arousal = await self._arousal(agent_id)
        ranking = rank(request, working, episodic, arousal=arousal)
        results = tuple(
            RetrievedMemory(
                **scored.memory.model_dump(),
                rank=place,
                store=scored.store,
                score=scored.score,
                breakdown=scored.breakdown,
            )
            for place, scored in enumerate(ranking.results, start=1)
        )
        return RetrievalResponse(
            agent_id=agent_id,
            mode=request.mode,
            clock=ranking.clock,
            weights=request.weights or Weights() if request.mode == "weighted" else None,
            generative=(
                request.generative or GenerativeWeights() if request.mode == "generative" else None
            ),
            working_count=len(working),
            episodic_count=len(episodic),
            results=results,
            took_ms=(time.perf_counter() - started) * 1000.0,
            waited_ms=waited_s * 1000.0,
        )

    async def wait_for(self, positions: Sequence[RecordPosition], timeout_s: float) -> float:
        """Wait until both stores have applied every position; return the seconds waited.

        Raises :class:`UnknownTopicError` before any wait, :class:`PositionsNotAppliedError`
        once ``timeout_s`` has passed (the stores are read at least once, so 0 only checks),
        and :class:`ProjectionError` when a store cannot be read. Marks never go back, so a
        store that reached a position is not read for it again, unless :meth:`use` switched
        stores meanwhile: the wait is for the stores the retrieval will read.
        """
        for index, position in enumerate(positions):
            if not self._consumed(position.topic):
                raise UnknownTopicError(index, position.topic)
        wanted: dict[tuple[str, int], int] = {}
        for position in positions:
            key = (position.topic, position.partition)
            wanted[key] = max(wanted.get(key, -1), position.offset)
        everything = sorted((key, name) for key in wanted for name in ("episodic", "working"))
        marks: dict[tuple[tuple[str, int], str], int | None] = {}
        pending = everything
        polled: tuple[WorkingMemoryStore, EpisodicMemoryStore] | None = None
        started = time.monotonic()
        deadline = started + timeout_s
        delay = FIRST_POLL_S
        while True:
            if polled != (self._working, self._episodic):
                polled = (self._working, self._episodic)
                pending = everything
            stores: dict[str, WorkingMemoryStore | EpisodicMemoryStore] = {
                "working": polled[0],
                "episodic": polled[1],
            }
            read = await asyncio.gather(
                *(stores[name].applied_offset(*key) for key, name in pending),
                return_exceptions=True,
            )
            for item, outcome in zip(pending, read, strict=True):
                if isinstance(outcome, BaseException):
                    raise outcome
                marks[item] = outcome
            pending = [
                (key, name)
                for key, name in pending
                if (mark := marks[(key, name)]) is None or mark < wanted[key]
            ]
            now = time.monotonic()
            if not pending:
                return now - started
            if now >= deadline:
                late = sorted({key for key, _ in pending})
                raise PositionsNotAppliedError(
                    [
                        PendingPosition(
                            topic=topic,
                            partition=partition,
                            offset=wanted[(topic, partition)],
                            working=marks[((topic, partition), "working")],
                            episodic=marks[((topic, partition), "episodic")],
                        )
                        for topic, partition in late
                    ],
                    total=len(wanted),
                    waited_s=now - started,
                    timeout_s=timeout_s,
                )
            await asyncio.sleep(min(delay, deadline - now))
            delay = min(delay * 2, MAX_POLL_S)

    async def _arousal(self, agent_id: str) -> float:
        """The agent's stored arousal, clamped to [0, 1]; 0 when none is known."""
        if self._arousal_of is None:
            return 0.0
        stored = await self._arousal_of(agent_id)
        return 0.0 if stored is None else min(max(stored, 0.0), 1.0)

    def _consumed(self, topic: str) -> bool:
        if self._source_topics is not None:
            return topic in self._source_topics
        return topic.endswith(SOURCE_TOPICS)

    async def readiness(self) -> dict[str, str]:
        """``"ok"`` or the reason, per store; both are pinged at once so a probe waits for the
        slower one only."""
        outcomes = await asyncio.gather(
            self._working.ping(), self._episodic.ping(), return_exceptions=True
        )
        checks: dict[str, str] = {}
        for name, outcome in zip(("working", "episodic"), outcomes, strict=True):
            if isinstance(outcome, Exception):
                checks[name] = str(outcome) or type(outcome).__name__
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                checks[name] = "ok"
        return checks

    async def _read(
        self, agent_id: str, query: str | None, levels: Sequence[int], read_working: bool
    ) -> tuple[list[StoredMemory], list[StoredMemory]]:
        """Both stores at once, promoted copies of working memories left out. Waits for both
        even when one fails, so no read outlives the request; two store failures are reported
        together."""
        # One version for both reads, whatever :meth:`use` does while they run.
        working_store, episodic_store = self._working, self._episodic
        working, episodic = await asyncio.gather(
            self._read_working(working_store, agent_id, read_working),
            self._read_episodic(episodic_store, agent_id, query, levels),
            return_exceptions=True,
        )
        if isinstance(working, BaseException) or isinstance(episodic, BaseException):
            failures = [r for r in (working, episodic) if isinstance(r, BaseException)]
            unexpected = [f for f in failures if not isinstance(f, ProjectionError)]
            if unexpected:
                raise unexpected[0]
            if len(failures) == 1:
                raise failures[0]
            raise ProjectionError("; ".join(str(f) for f in failures)) from failures[0]
        return working, without_copies_of(working, episodic)

    @staticmethod
    async def _read_working(
        store: WorkingMemoryStore, agent_id: str, read: bool
    ) -> list[StoredMemory]:
        if not read:
            return []
        return await store.memories(agent_id)

    async def _read_episodic(
        self, store: EpisodicMemoryStore, agent_id: str, query: str | None, levels: Sequence[int]
    ) -> list[StoredMemory]:
        if not levels:
            return []
        if query is not None:
            vector = self._embedder.embed(query)
            # A query of stopwords only embeds to zeros, which has no direction to search by.
            if np.any(vector):
                return await store.search(agent_id, vector, self._episodic_limit, levels=levels)
        return await store.memories(agent_id, self._episodic_limit, levels=levels)


def rank(
    request: RetrievalRequest,
    working: Sequence[StoredMemory],
    episodic: Sequence[StoredMemory],
    *,
    arousal: float = 0.0,
) -> Ranking:
    """The request's mode applied to memories already read and filtered; pure. ``arousal`` is
    used by the constrained mode only (the request's own arousal, if any, wins). Working
    memories are passed first everywhere, so a memory in both stores is ranked as working."""
    everything = [*working, *episodic]
    year, step = request.current_year, request.current_step
    mode = request.mode
    if mode == "weighted":
        return weighted(
            everything,
            top_k=request.top_k,
            context_tags=request.tags,
            query_text=request.query,
            weights=request.weights or Weights(),
            current_year=year,
            current_step=step,
        )
    if mode == "saliency":
        return saliency(everything, top_k=request.top_k, current_year=year, current_step=step)
    if mode == "basic":
        return basic(everything, current_year=year, current_step=step)
    if mode == "constrained":
        profile = PROFILES[request.profile or DEFAULT_PROFILE]
        chosen = request.arousal if request.arousal is not None else arousal
        return constrained(
            everything, profile=profile, arousal=chosen, current_year=year, current_step=step
        )
    if mode == "generative":
        return generative(
            everything,
            top_k=request.top_k,
            relevance=relevance_of(request.query, everything),
            weights=request.generative,
            current_year=year,
            current_step=step,
        )
    if mode == "relevance":
        if request.query is None:
            raise ValueError("mode 'relevance' ranks by relevance to a query: give a query")
        parts = relevance_parts(request.query, everything)
        return by_relevance(
            everything,
            top_k=request.top_k,
            relevance=_strongest(parts),
            parts=parts,
            current_year=year,
            current_step=step,
        )
    return two_phase(working, episodic, top_k=request.top_k, current_year=year, current_step=step)


def relevance_parts(
    query: str | None, memories: Sequence[StoredMemory]
) -> dict[str, dict[str, float]]:
    """Per memory id, the relevance signals available now: ``overlap``, the keyword overlap
    coefficient with the query (seed 003, P2), and ``similarity``, the cosine similarity the
    episodic search reported (absent for memories not searched by vector). Without a query
    every memory has overlap 0."""
    query_words = keyword_set(query) if query else frozenset()
    parts: dict[str, dict[str, float]] = {}
    for memory in memories:
        signals = {"overlap": overlap(query_words, keyword_set(memory.content))}
        if query and memory.similarity is not None:
            signals["similarity"] = memory.similarity
        parts[memory.memory_id] = signals
    return parts


def relevance_of(query: str | None, memories: Sequence[StoredMemory]) -> dict[str, float]:
    """Relevance to ``query`` by memory id: the stronger of keyword overlap and search
    similarity (both in [0, 1] for our embeddings), so a memory matching by words is not
    ranked below one matching only by vector, nor the reverse. 0 for all without a query."""
    return _strongest(relevance_parts(query, memories))


def _strongest(parts: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {key: max(signals.values(), default=0.0) for key, signals in parts.items()}


def without_copies_of(
    working: Sequence[StoredMemory], episodic: Sequence[StoredMemory]
) -> list[StoredMemory]:
    """``episodic`` without the promoted copies of memories still in ``working``: a copy shares
    its original's source event and level. The level is part of the key because a summary's
    source event is the one that triggered it, which may also be remembered on its own."""
    originals = {(m.source_event_id, m.level) for m in working}
    return [m for m in episodic if (m.source_event_id, m.level) not in originals]
