"""The retrieval engine: read one agent's memories from both stores, rank them, explain the rank.

Working memory is small (its capacity, 10 by default) and read whole; of the episodic store the
engine reads the candidates of the request's mode, a bounded set the store picks by recency,
importance and relevance to the query (:mod:`projections.retrieval.pool_reads`,
:mod:`projections.episodic.candidates`), so the cost of a retrieval does not grow with the
agent's pool. It ranks them in process with the pure functions of
:mod:`projections.retrieval.scoring`: for a pool within the candidate bound, exactly as the
whole pool.

Modes. :func:`~projections.retrieval.ranking.rank` dispatches the request's mode to its pure
scoring function (two_phase and weighted in :mod:`~projections.retrieval.scoring`, saliency,
basic and constrained, generative, by_relevance, recent in their own modules). The constrained
mode's arousal is the request's, else the agent's stored one (the working store's latest
surprise reading, or ``arousal_of``), else 0; a stored reading's System 1 / System 2 label uses
the threshold stored with it (the agent type's). The recent mode's window ends at the
request's ``current_time``, now when it has none (the service pins it first, so that its
record says which).

Relevance. The weighted mode keeps seed 003's keyword overlap. The generative and relevance
modes rank by hybrid relevance (:func:`relevance_parts`): the cosine of the query embedding
with each memory's, blended with the memory's BM25 over the pool
(:func:`~projections.retrieval.relevance.blended_scores`), then weighed by the period the
query names and lifted by each memory's neighbouring turns
(:mod:`~projections.retrieval.query_relevance`); the turns beside the best matches that the
candidates lack are read in a second, bounded query. Episodic memories come back from
the store's vector search with their cosine; working memories, which Redis keeps without
embeddings, are embedded when a query first needs them (at most the working capacity, 10), and
their vectors kept by text. A semantic
embedder's query is embedded in a worker thread, so a model's milliseconds do not stall the
event loop that serves the other requests.

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
So are positions the log does not hold (:class:`PositionsNotInLogError`), when the deployment
says where the log ends (:mod:`projections.retrieval.log_end`): they are looked for only when
the stores have not applied them at the first poll, so a retrieval whose writes are applied
already never waits for the broker.

One experience, one result. A working memory promoted at year end has an episodic copy with its
own memory id but the same source event and level; while the original is still in working
memory, the copy is dropped before ranking, so it neither shows twice nor counts as considered.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import UTC, datetime

import numpy as np

from processors.embedding import Embedder
from projections.episodic.candidates import CANDIDATE_LIMIT, RELEVANCE_CANDIDATE_LIMIT
from projections.episodic.hybrid import cosines
from projections.interfaces import EpisodicMemoryStore, WorkingMemoryStore
from projections.memory import StoredMemory
from projections.retrieval.basic import StoredArousal
from projections.retrieval.conversation_context import (
    TURNS_READ_BESIDE,
    best_of_each_signal,
    seqs_beside,
)
from projections.retrieval.filters import levels_for
from projections.retrieval.generative import GenerativeWeights
from projections.retrieval.log_end import KnownLogEnds, LogEnds, Partition
from projections.retrieval.models import (
    MissingPosition,
    PendingPosition,
    RecordPosition,
    RetrievalRequest,
    RetrievalResponse,
    RetrievedMemory,
)
from projections.retrieval.pool_reads import (
    candidate_bound,
    read_beside,
    read_filter,
    read_pools,
    without_copies_of,
)
from projections.retrieval.query_relevance import relevance_of, relevance_parts
from projections.retrieval.ranking import rank, weights_of
from projections.retrieval.relevance import dense_share_for
from schemas.errors import EngramError
from schemas.memory_events import SurpriseReading
from schemas.topics import Topics

__all__ = [
    "SOURCE_TOPICS",
    "PositionsNotAppliedError",
    "PositionsNotInLogError",
    "RetrievalEngine",
    "UnknownTopicError",
    "rank",
    "relevance_of",
    "relevance_parts",
    "weights_of",
    "without_copies_of",
]

SOURCE_TOPICS = (*Topics().agent_inputs, Topics().schedule, Topics().access)
"""The topics the processors consume, unprefixed: the only ones whose positions stores record."""

FIRST_POLL_S = 0.005
MAX_POLL_S = 0.05

RELEVANCE_MODES = frozenset({"generative", "relevance"})
"""The modes that rank by hybrid relevance to the query, and so need every memory's cosine."""

EPISODIC_READ_LIMIT = 1000
"""With ``candidate_limit`` None, the most a read of the whole pool returns: far above the
default episodic capacity of 50, so a read returns every memory even while eviction lags behind
recording; the ranking then sees the whole store, as the seeds' engines do."""

WORKING_VECTOR_CACHE = 16_384
"""How many working memories' vectors an engine keeps, by text, least recently used out: a
vector depends on the text alone, and re-embedding an agent's working memories for each query
was ~8% of the service's CPU in relevance mode with the hashing embedder (a model costs far
more). 16,384 covers the working memories of the ~1,600 most recently queried agents, ~31 MB
at 384 dimensions (tracemalloc)."""


class UnknownTopicError(EngramError, ValueError):
    """A position of ``after`` is on a topic the processors do not consume: waiting for it
    could only time out."""

    def __init__(self, index: int, topic: str, consumed: Collection[str] | None = None) -> None:
        where = (
            f"{', '.join(SOURCE_TOPICS)} (with the deployment's prefix)"
            if consumed is None
            else ", ".join(sorted(consumed))
        )
        super().__init__(
            f"topic {topic!r} is not one the processors consume; positions come from "
            f"publishing to {where}"
        )
        self.index = index
        self.topic = topic


class PositionsNotInLogError(EngramError, LookupError):
    """Positions of ``after`` the log does not hold: at or past the end of their partition, or
    on a partition that does not exist. They were not returned by publishing to this log, and
    no wait would see them applied."""

    def __init__(self, missing: Sequence[MissingPosition]) -> None:
        def end(position: MissingPosition) -> str:
            if position.log_end is None:
                return "no such partition"
            return f"the partition ends at {position.log_end}"

        listed = "; ".join(f"{p.topic}[{p.partition}]@{p.offset} ({end(p)})" for p in missing)
        super().__init__(
            f"{len(missing)} position(s) of after are not in the log: {listed}. Positions "
            "come from publishing to this deployment's log"
        )
        self.missing = tuple(missing)


class PositionsNotAppliedError(EngramError, TimeoutError):
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
        candidate_limit: int | None = CANDIDATE_LIMIT,
        relevance_candidate_limit: int = RELEVANCE_CANDIDATE_LIMIT,
        source_topics: Collection[str] | None = None,
        arousal_of: Callable[[str], Awaitable[StoredArousal | None]] | None = None,
        dense_share: float | None = None,
        log_ends: LogEnds | None = None,
    ) -> None:
        """``source_topics`` are the exact topics positions may name; by default any topic
        whose name ends with one of :data:`SOURCE_TOPICS`, whatever the prefix. ``log_ends``
        says where the log ends, so a position it does not hold is refused at once
        (:class:`PositionsNotInLogError`) rather than waited for.
        ``arousal_of`` reads an agent's stored arousal (None: not known) for the constrained
        mode; by default the working store's latest surprise reading; when none is known,
        arousal is 0 (System 1). ``dense_share`` is the cosine's share in hybrid relevance,
        by default :func:`~projections.retrieval.relevance.dense_share_for` the embedder.
        ``candidate_limit`` is how many memories each signal of a mode brings from the
        episodic store (:mod:`projections.episodic.candidates`); None reads an agent's whole
        pool, up to ``episodic_limit``, and ranks all of it; ``relevance_candidate_limit`` is
        the bound of ``relevance`` by the query alone (:func:`candidate_bound`)."""
        if episodic_limit < 1:
            raise ValueError("episodic_limit must be at least 1")
        if (candidate_limit is not None and candidate_limit < 1) or relevance_candidate_limit < 1:
            raise ValueError("candidate limits must be at least 1 (None: read the whole pool)")
        self._candidate_limit = candidate_limit
        self._relevance_limit = relevance_candidate_limit
        share = dense_share_for(embedder.id) if dense_share is None else dense_share
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"dense_share must lie in [0, 1], got {share}")
        self.dense_share = share
        self._arousal_of = arousal_of
        # The hashing embedder takes microseconds: a thread hop would cost more than it saves.
        self._embed_in_thread = not embedder.id.startswith("hashing")
        self._working = working
        self._episodic = episodic
        self._embedder = embedder
        self._episodic_limit = episodic_limit
        self._working_vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._source_topics = None if source_topics is None else frozenset(source_topics)
        self._log_ends = None if log_ends is None else KnownLogEnds(log_ends)

    @property
    def source_topics(self) -> frozenset[str] | None:
        """The exact topics positions may name; None: any ending with :data:`SOURCE_TOPICS`."""
        return self._source_topics

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
        request = request.pinned(datetime.now(UTC))
        levels, read_working = levels_for(request.filter, request.levels)
        vector = None if request.query is None else await self._embed(request.query)
        bound = candidate_bound(request, vector, self._candidate_limit, self._relevance_limit)
        # One version for both reads, whatever :meth:`use` does while they run.
        working, episodic = await read_pools(
            self._working,
            self._episodic,
            agent_id,
            vector,
            request,
            levels=levels,
            read_working=read_working,
            candidate_limit=bound,
            episodic_limit=self._episodic_limit,
        )
        if (memory_filter := read_filter(request)) is not None:
            admits = memory_filter.admits
            working = [m for m in working if admits(m)]
            episodic = [m for m in episodic if admits(m)]
        if vector is not None and request.mode in RELEVANCE_MODES and working:
            working = await self._with_similarity(working, vector)
        if request.query and request.mode in RELEVANCE_MODES and request.scope != "archive":
            episodic += await self._turns_beside(
                agent_id, request, vector, levels, working, episodic, bound
            )
        stored: StoredArousal | None = None
        if request.mode == "constrained" and request.arousal is None:
            stored = await self._arousal(agent_id)
        ranking = rank(request, working, episodic, arousal=stored, dense_share=self.dense_share)
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
            scope=request.scope,
            clock=ranking.clock,
            weights=weights_of(request) if request.mode == "weighted" else None,
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

        Raises :class:`UnknownTopicError` before any wait, :class:`PositionsNotInLogError`
        after the first read of the stores when a position not applied yet is not in the log
        either, :class:`PositionsNotAppliedError` once ``timeout_s`` has passed (the stores
        are read at least once, so 0 only checks), and :class:`ProjectionError` when a store
        cannot be read. Marks never go back, so a store that reached a position is not read
        for it again, unless :meth:`use` switched stores meanwhile: the wait is for the stores
        the retrieval will read.
        """
        for index, position in enumerate(positions):
            if not self._consumed(position.topic):
                raise UnknownTopicError(index, position.topic, self._source_topics)
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
        looked_in_the_log = False
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
            if pending and not looked_in_the_log:
                await self._in_the_log({key: wanted[key] for key, _ in pending})
            looked_in_the_log = True
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

    async def _in_the_log(self, wanted: dict[Partition, int]) -> None:
        """Raises :class:`PositionsNotInLogError` for the positions the log does not hold."""
        if self._log_ends is None:
            return
        missing = await self._log_ends.beyond(wanted)
        if missing:
            raise PositionsNotInLogError(
                [
                    MissingPosition(topic=key[0], partition=key[1], offset=wanted[key], log_end=end)
                    for key, end in sorted(missing.items())
                ]
            )

    async def _turns_beside(
        self,
        agent_id: str,
        request: RetrievalRequest,
        vector: np.ndarray | None,
        levels: Sequence[int],
        working: list[StoredMemory],
        episodic: list[StoredMemory],
        limit: int | None,
    ) -> list[StoredMemory]:
        """The episodic memories beside the pool's most relevant ones that the candidates
        left out (:func:`~projections.retrieval.conversation_context.seqs_beside`), so that a
        turn answering the one that matched is ranked with it. Nothing when the whole pool
        was read: fewer candidates than the bound are the whole pool
        (:class:`~projections.episodic.candidates.CandidateSignals`). Of each signal, the
        turns beside the ``min(TURNS_READ_BESIDE, bound)`` best are read. Not for scope
        ``archive``, whose pool holds no working memory to leave the promoted copies out by.
        ``limit`` is the bound the candidates were read with."""
        if limit is None or len(episodic) < limit or not request.query:
            return []
        pool = [*working, *episodic]
        best = best_of_each_signal(request.query, pool, min(TURNS_READ_BESIDE, limit))
        seqs = seqs_beside(best, pool)
        extra = await read_beside(self._episodic, agent_id, vector, request, levels, seqs)
        held = {m.memory_id for m in pool}
        fresh = [m for m in without_copies_of(working, extra) if m.memory_id not in held]
        if (memory_filter := read_filter(request)) is not None:
            fresh = [m for m in fresh if memory_filter.admits(m)]
        return fresh

    async def surprise(self, agent_id: str) -> SurpriseReading | None:
        """The agent's latest surprise reading, as the working store keeps it (seed 003's
        ``get_surprise_trace()``); None before any."""
        return await self._working.arousal(agent_id)

    async def _arousal(self, agent_id: str) -> StoredArousal | None:
        """The agent's stored arousal and its agent type's threshold; None when none is known."""
        if self._arousal_of is not None:
            return await self._arousal_of(agent_id)
        return await self._working.arousal(agent_id)

    async def _embed(self, text: str) -> np.ndarray:
        if self._embed_in_thread:
            return await asyncio.to_thread(self._embedder.embed, text)
        return self._embedder.embed(text)

    async def _with_similarity(
        self, memories: Sequence[StoredMemory], query: np.ndarray
    ) -> list[StoredMemory]:
        """Working memories with their cosine to the query. Redis keeps no embeddings, so a
        working memory is embedded the first time a query needs it (the ten or so of working
        capacity in microseconds with hashing, in one model batch in a worker thread with a
        semantic embedder) and its vector kept by text (:data:`WORKING_VECTOR_CACHE`)."""

        texts = [m.content for m in memories]
        cache = self._working_vectors
        known = {text: cache[text] for text in texts if text in cache}
        missing = [text for text in dict.fromkeys(texts) if text not in known]
        if missing:
            if self._embed_in_thread:
                fresh = await asyncio.to_thread(self._embed_texts, missing)
            else:
                fresh = self._embed_texts(missing)
            known.update(zip(missing, fresh, strict=True))
        # Written back after the await: a concurrent retrieval may have evicted a hit meanwhile.
        for text in texts:
            cache[text] = known[text]
            cache.move_to_end(text)
        while len(cache) > WORKING_VECTOR_CACHE:
            cache.popitem(last=False)
        similarity = cosines(query, np.asarray([known[t] for t in texts], dtype=np.float32))
        pairs = zip(memories, similarity, strict=True)
        return [m.model_copy(update={"similarity": s}) for m, s in pairs]

    def _embed_texts(self, texts: list[str]) -> list[np.ndarray]:
        many = getattr(self._embedder, "embed_many", None)
        if many is not None:
            return list(many(texts))
        return [self._embedder.embed(text) for text in texts]

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
