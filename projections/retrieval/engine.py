"""The retrieval engine: read one agent's memories from both stores, rank them, explain the rank.

The stores are small per agent (working capacity 10, episodic 50: seed 004 section 5.1), so the
engine reads all of an agent's memories and ranks them in process with the pure functions of
:mod:`projections.retrieval.scoring`; the stores only have to list and, given a query, search.

Levels. A request names the levels it ranks (0 memories of events by default; summaries only
when asked for). Working memory holds memories of events only, so it is not read at all when
level 0 is not asked for; the episodic store filters by level itself.

One experience, one result. A working memory promoted at year end has an episodic copy with its
own memory id but the same source event and level; while the original is still in working
memory, the copy is dropped before ranking, so it neither shows twice nor counts as considered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import numpy as np

from processors.embedding import Embedder
from projections.interfaces import EpisodicMemoryStore, ProjectionError, WorkingMemoryStore
from projections.memory import StoredMemory
from projections.retrieval.models import RetrievalRequest, RetrievalResponse, RetrievedMemory
from projections.retrieval.scoring import Ranking, Weights, two_phase, weighted

EPISODIC_READ_LIMIT = 1000
"""Far above the episodic capacity of 50, so a read returns every memory even while eviction
lags behind recording; the ranking then sees the whole store, as the seeds' engines do."""


class RetrievalEngine:
    def __init__(
        self,
        working: WorkingMemoryStore,
        episodic: EpisodicMemoryStore,
        embedder: Embedder,
        *,
        episodic_limit: int = EPISODIC_READ_LIMIT,
    ) -> None:
        if episodic_limit < 1:
            raise ValueError("episodic_limit must be at least 1")
        self._working = working
        self._episodic = episodic
        self._embedder = embedder
        self._episodic_limit = episodic_limit

    async def retrieve(self, agent_id: str, request: RetrievalRequest) -> RetrievalResponse:
        """Rank the agent's memories as ``request`` asks.

        Raises :class:`ProjectionError` when a store cannot be read: a retrieval from one store
        only would silently change what the agent remembers.
        """
        started = time.perf_counter()
        working, episodic = await self._read(agent_id, request.query, request.levels)
        weights: Weights | None = None
        ranking: Ranking
        if request.mode == "weighted":
            weights = request.weights or Weights()
            ranking = weighted(
                [*working, *episodic],
                top_k=request.top_k,
                current_year=request.current_year,
                current_step=request.current_step,
                context_tags=request.tags,
                query_text=request.query,
                weights=weights,
            )
        else:
            ranking = two_phase(
                working,
                episodic,
                top_k=request.top_k,
                current_year=request.current_year,
                current_step=request.current_step,
            )
        results = tuple(
            RetrievedMemory(
                **scored.memory.model_dump(),
                rank=rank,
                store=scored.store,
                score=scored.score,
                breakdown=scored.breakdown,
            )
            for rank, scored in enumerate(ranking.results, start=1)
        )
        return RetrievalResponse(
            agent_id=agent_id,
            mode=request.mode,
            clock=ranking.clock,
            weights=weights,
            working_count=len(working),
            episodic_count=len(episodic),
            results=results,
            took_ms=(time.perf_counter() - started) * 1000.0,
        )

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
        self, agent_id: str, query: str | None, levels: Sequence[int]
    ) -> tuple[list[StoredMemory], list[StoredMemory]]:
        """Both stores at once, promoted copies of working memories left out. Waits for both
        even when one fails, so no read outlives the request; two store failures are reported
        together."""
        working, episodic = await asyncio.gather(
            self._read_working(agent_id, levels),
            self._read_episodic(agent_id, query, levels),
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

    async def _read_working(self, agent_id: str, levels: Sequence[int]) -> list[StoredMemory]:
        if 0 not in levels:
            return []
        return await self._working.memories(agent_id)

    async def _read_episodic(
        self, agent_id: str, query: str | None, levels: Sequence[int]
    ) -> list[StoredMemory]:
        if query is not None:
            vector = self._embedder.embed(query)
            # A query of stopwords only embeds to zeros, which has no direction to search by.
            if np.any(vector):
                return await self._episodic.search(
                    agent_id, vector, self._episodic_limit, levels=levels
                )
        return await self._episodic.memories(agent_id, self._episodic_limit, levels=levels)


def without_copies_of(
    working: Sequence[StoredMemory], episodic: Sequence[StoredMemory]
) -> list[StoredMemory]:
    """``episodic`` without the promoted copies of memories still in ``working``: a copy shares
    its original's source event and level. The level is part of the key because a summary's
    source event is the one that triggered it, which may also be remembered on its own."""
    originals = {(m.source_event_id, m.level) for m in working}
    return [m for m in episodic if (m.source_event_id, m.level) not in originals]
