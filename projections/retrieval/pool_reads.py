"""What a retrieval reads of an agent's memories: both stores at once, and of the episodic
store the candidates its mode ranks (:mod:`projections.episodic.candidates`), or the whole pool.

Each mode asks for the signals it ranks by, so that a memory it would rank high is among the
candidates: the seed modes for recency and importance (their scores grow with both), the
weighted mode for its context too (the request's tags and the query's keywords), the
generative mode for all of them, the relevance mode for the query's nearest embeddings and
best keyword matches alone, and the recent mode for the newest by the events' time, read
within its window (:func:`read_filter`), which it ranks by that alone. A request with a query
reads every candidate's cosine with it, whatever the mode, as a search of the whole pool does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from processors.embedding import keywords
from processors.lexical import query_vector
from projections.episodic.candidates import CandidateSignals
from projections.interfaces import EpisodicMemoryStore, ProjectionError, WorkingMemoryStore
from projections.memory import StoredMemory
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.models import DEFAULT_RECENT_DAYS, MAX_CONTEXT_TAGS, RetrievalRequest
from projections.retrieval.recent import window_filter

POINTS_PER_SOURCE = 2
"""How many points of the episodic store one source event may have outside scope active: the
archived memory and the copy promoted from it, which share their time. The recent mode ranks
by that time alone, so it reads this many times its bound there: read by the bound alone, a
pair took two of its places and :func:`one_per_source` kept one, and in scope archive the
archived copies of memories still in working memory, which it leaves out, took places too;
fewer than ``top_k`` came back although more were in the window."""


def _by_the_query_alone(request: RetrievalRequest, vector: np.ndarray | None) -> bool:
    """Whether the request's mode ranks by the query's signals alone: ``relevance`` with a
    query vector that has a direction (stopwords alone embed to zeros, and then it falls back
    on recency and importance)."""
    return request.mode == "relevance" and vector is not None and bool(np.any(vector))


def candidate_bound(
    request: RetrievalRequest, vector: np.ndarray | None, limit: int | None, relevance_limit: int
) -> int | None:
    """How many candidates each signal of the request's mode brings (None: the whole pool):
    ``relevance_limit`` when it ranks by the query's signals alone, which measured better for
    it (:data:`~projections.episodic.scope.RELEVANCE_CANDIDATE_LIMIT`), else ``limit``."""
    if limit is None:
        return None
    return relevance_limit if _by_the_query_alone(request, vector) else limit


def context_tags(request: RetrievalRequest) -> tuple[str, ...]:
    """The tags the weighted mode's context matches (:func:`~projections.retrieval.scoring.
    context_of`): the request's, then the query's keywords in their order, at most
    :data:`MAX_CONTEXT_TAGS` in all, so a long query does not make the store's read long (a
    memory tagged with a later keyword still scores ``C = 1`` if another signal brings it)."""
    words = keywords(request.query) if request.query else []
    wanted = dict.fromkeys(tag.casefold() for tag in (*request.tags, *words))
    return tuple(wanted)[:MAX_CONTEXT_TAGS]


def read_filter(request: RetrievalRequest) -> MemoryFilter | None:
    """What a memory read for ``request`` must meet: its filter and, in mode recent, the
    window, so that the store reads only what is in it (a pinned request's: its
    ``current_time``; unpinned, the request's filter alone)."""
    if request.mode == "recent" and request.current_time is not None:
        days = request.days or DEFAULT_RECENT_DAYS
        return window_filter(request.filter, request.current_time, days)
    return request.filter


def signals_for(
    request: RetrievalRequest, vector: np.ndarray | None, limit: int
) -> CandidateSignals:
    """The candidates ``request``'s mode needs, ``limit`` per signal."""
    lexical = query_vector(request.query) if request.query else None
    if _by_the_query_alone(request, vector):
        return CandidateSignals(limit, vector=vector, lexical=lexical)
    if request.mode == "recent":
        copies = 1 if request.scope == "active" else POINTS_PER_SOURCE
        return CandidateSignals(limit * copies, occurred=True, vector=vector)
    tags = context_tags(request) if request.mode == "weighted" else ()
    with_query = request.mode in ("weighted", "generative")
    return CandidateSignals(
        limit,
        recency=True,
        importance=True,
        vector=vector,
        lexical=lexical if with_query else None,
        tags=tags,
    )


async def read_pools(
    working_store: WorkingMemoryStore,
    episodic_store: EpisodicMemoryStore,
    agent_id: str,
    vector: np.ndarray | None,
    request: RetrievalRequest,
    *,
    levels: Sequence[int],
    read_working: bool,
    candidate_limit: int | None,
    episodic_limit: int,
) -> tuple[list[StoredMemory], list[StoredMemory]]:
    """Both stores at once, promoted copies of working memories left out; in ``request.scope``
    (for the archive, working memory is read only to leave out what is still active). Waits for both
    even when one fails, so no read outlives the request; two store failures are reported
    together. ``candidate_limit`` None reads the whole episodic pool (up to
    ``episodic_limit``) rather than its candidates."""
    working, episodic = await asyncio.gather(
        _read_working(working_store, agent_id, read_working),
        _read_episodic(
            episodic_store, agent_id, vector, request, levels, candidate_limit, episodic_limit
        ),
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
    # The archive holds every working memory too: those still in working memory are active,
    # and without_copies_of leaves them out of the archive (same source event and level).
    episodic = one_per_source(without_copies_of(working, episodic))
    if request.scope == "archive":
        return [], episodic
    return working, episodic


async def _read_working(store: WorkingMemoryStore, agent_id: str, read: bool) -> list[StoredMemory]:
    """Working memory whole: its capacity bounds it (10 by default)."""
    if not read:
        return []
    return await store.memories(agent_id)


async def _read_episodic(
    store: EpisodicMemoryStore,
    agent_id: str,
    vector: np.ndarray | None,
    request: RetrievalRequest,
    levels: Sequence[int],
    candidate_limit: int | None,
    episodic_limit: int,
) -> list[StoredMemory]:
    """The memories the request's levels and filter select (the store filters natively): the
    candidates of its mode, or with ``candidate_limit`` None every one. With a query each
    carries its cosine; the keyword half of relevance is computed over what was read, working
    memories included, rather than by the store's own hybrid search, which sees episodic
    memories only."""
    if not levels:
        return []
    memory_filter = read_filter(request)
    if candidate_limit is not None:
        signals = signals_for(request, vector, candidate_limit)
        return await store.candidates(
            agent_id, signals, levels=levels, filter=memory_filter, scope=request.scope
        )
    if request.scope != "active":
        signals = signals_for(request, vector, episodic_limit)
        return await store.candidates(
            agent_id, signals, levels=levels, filter=memory_filter, scope=request.scope
        )
    # A query of stopwords only embeds to zeros, which has no direction to search by.
    if vector is not None and np.any(vector):
        return await store.search(
            agent_id, vector, episodic_limit, levels=levels, filter=memory_filter
        )
    return await store.memories(agent_id, episodic_limit, levels=levels, filter=memory_filter)


async def read_beside(
    store: EpisodicMemoryStore,
    agent_id: str,
    vector: np.ndarray | None,
    request: RetrievalRequest,
    levels: Sequence[int],
    seqs: Sequence[int],
) -> list[StoredMemory]:
    """The agent's memories at ``seqs`` in the request's scope, levels and filter, each with
    its cosine when ``vector`` has a direction (the turns beside a first ranking's best:
    :mod:`projections.retrieval.conversation_context`), one per source (:func:`one_per_source`)."""
    if not seqs or not levels:
        return []
    signals = CandidateSignals(vector=vector, at_seqs=tuple(seqs))
    return one_per_source(
        await store.candidates(
            agent_id, signals, levels=levels, filter=read_filter(request), scope=request.scope
        )
    )


def one_per_source(memories: Sequence[StoredMemory]) -> list[StoredMemory]:
    """``memories`` with one memory per source event and level, in their order: of a working
    memory that left for the archive and the copy promoted from it (same event, same level,
    same content, so the same score), the promoted copy, which is still active; else the lowest
    id. A ranking keeps the first of each (:func:`~projections.retrieval.scoring.unique`), and a
    store returns equal scores in either order: left to that, one query answered with either
    memory from one call to the next."""
    best: dict[tuple[str, int], StoredMemory] = {}
    for memory in memories:
        key = (memory.source_event_id, memory.level)
        kept = best.get(key)
        if kept is None or _preference(memory) < _preference(kept):
            best[key] = memory
    chosen = {memory.memory_id for memory in best.values()}
    out: list[StoredMemory] = []
    for memory in memories:
        if memory.memory_id in chosen:
            chosen.discard(memory.memory_id)
            out.append(memory)
    return out


def _preference(memory: StoredMemory) -> tuple[bool, str]:
    return memory.destination != "episodic", memory.memory_id


def without_copies_of(
    working: Sequence[StoredMemory], episodic: Sequence[StoredMemory]
) -> list[StoredMemory]:
    """``episodic`` without the promoted copies of memories still in ``working``: a copy shares
    its original's source event and level. The level is part of the key because a summary's
    source event is the one that triggered it, which may also be remembered on its own."""
    originals = {(m.source_event_id, m.level) for m in working}
    return [m for m in episodic if (m.source_event_id, m.level) not in originals]
