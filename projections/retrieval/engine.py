"""The retrieval engine: read one agent's memories from both stores, rank them, explain the rank.

The stores are small per agent (working capacity 10, episodic 50: seed 004 section 5.1), so the
engine reads all of an agent's memories and ranks them in process with the pure functions of
:mod:`projections.retrieval.scoring`; the stores only have to list and, given a query, search.
"""

from __future__ import annotations

import asyncio
import time

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
        working, episodic = await self._read(agent_id, request.query)
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
        self, agent_id: str, query: str | None
    ) -> tuple[list[StoredMemory], list[StoredMemory]]:
        """Both stores at once. Waits for both even when one fails, so no read outlives the
        request; two store failures are reported together."""
        working, episodic = await asyncio.gather(
            self._working.memories(agent_id),
            self._read_episodic(agent_id, query),
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
        return working, episodic

    async def _read_episodic(self, agent_id: str, query: str | None) -> list[StoredMemory]:
        if query is not None:
            vector = self._embedder.embed(query)
            # A query of stopwords only embeds to zeros, which has no direction to search by.
            if np.any(vector):
                return await self._episodic.search(agent_id, vector, self._episodic_limit)
        return await self._episodic.memories(agent_id, self._episodic_limit)
