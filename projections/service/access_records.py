"""What the query service records on ``memory.access``: each answered retrieval, and each facts
read with a query (seed 000's ``search``), as a :class:`MemoryRetrieved` handed to a hook.

The record is the audit trail of seed 004 section 8.3 and what the worker counts: the
retrievals of summaries for MUS pruning (seed 001), the facts a search returned for their
``access_count`` (seed 000). A facts read without a query is a listing, and is not recorded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_jsonable_python

from projections.learned.reads import Facts
from projections.retrieval.models import RetrievalRequest, RetrievalResponse
from schemas.envelope import TIME_BOUND
from schemas.memory_events import FACTS_READ_MODE, MemoryRetrieved, RetrievedItem

log = logging.getLogger("projections.service.app")  # where these warnings were always logged

RetrievalHook = Callable[[MemoryRetrieved], Awaitable[None]]
"""Called with the record of every answered retrieval and facts search (the audit trail of
seed 004 section 8.3, and the uses the worker counts). It should only enqueue: the request
waits."""

Recorder = Callable[[str, Callable[[], MemoryRetrieved]], Awaitable[None]]
"""``(agent_id, make the record)``: hands the record to the hook; never raises, so the agent
gets its answer."""


@dataclass
class RetrievalAudit:
    """How many records the hook took and refused; on ``app.state.retrieval_audit``.

    A refused record never fails the read (the agent needs its memories more than the audit
    needs the record), so these counters are where a lost record shows.
    """

    recorded: int = 0
    failed: int = 0


def recorder(hook: RetrievalHook | None, timeout_s: float, audit: RetrievalAudit) -> Recorder:
    """The one recorder of a service, shared by the retrieval and the facts routes."""

    async def record(agent_id: str, make: Callable[[], MemoryRetrieved]) -> None:
        if hook is None:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await hook(make())
        except Exception as error:  # the audit must never cost the agent its memories
            audit.failed += 1
            reason = str(error) or type(error).__name__
            if isinstance(error, TimeoutError):
                reason = f"no answer within {timeout_s} s"
            log.warning("retrieval of %s not recorded: %s", agent_id, reason)
        else:
            audit.recorded += 1

    return record


def retrieval_record(
    agent_id: str, request: RetrievalRequest, response: RetrievalResponse
) -> MemoryRetrieved:
    """The log's record of one answered retrieval: what was asked and what came back, at the
    agent's time the ranking measured ages from (:func:`retrieval_time`)."""
    step, year = retrieval_time(request, response)
    return MemoryRetrieved(
        agent_id=agent_id,
        step=step,
        year=year,
        mode=response.mode,
        # How long it waited for which writes is not part of what was retrieved.
        parameters=request.model_dump(
            mode="json", exclude_none=True, exclude={"after", "wait_timeout_ms"}
        ),
        results=tuple(
            RetrievedItem(
                memory_id=memory.memory_id,
                rank=memory.rank,
                score=memory.score,
                store=memory.store,
                level=getattr(memory, "level", 0),
                breakdown=to_jsonable_python(memory.breakdown),
            )
            for memory in response.results
        ),
        took_ms=response.took_ms,
    )


def retrieval_time(
    request: RetrievalRequest, response: RetrievalResponse
) -> tuple[int | None, int | None]:
    """(step, year) of a retrieval: the caller's, else the clock the service resolved (one past
    the newest memory's step or year, :func:`projections.retrieval.scoring.resolve_clock`); the
    step, when no clock counts in steps, one past the newest step among the results.

    The worker takes it as the summaries' latest access, from which seed 001's recency counts;
    a record without it left that at the summary's making, and a summary retrieved one step
    before its pruning was pruned as if never touched (the usual call gives no time). An agent
    whose events carry years and steps is pruned by steps while its clock counts years, hence
    the step from the results (in any mode whose clock is not in steps, ``recent``'s hours
    too). A clock in seqs or hours gives no year."""
    clock = response.clock
    step = request.current_step
    if step is None:
        steps = [m.step for m in response.results if m.step is not None]
        step = clock.now if clock.axis == "step" else (max(steps) + 1 if steps else None)
    year = request.current_year
    if year is None and request.current_step is None and clock.axis == "year":
        year = clock.now
    # One past the newest may pass the bound an event's time is held to.
    return _within_bound(step), _within_bound(year)


def _within_bound(time: int | None) -> int | None:
    return None if time is None else min(time, TIME_BOUND)


def facts_read_record(
    agent_id: str, parameters: dict[str, Any], answer: Facts, took_ms: float
) -> MemoryRetrieved:
    """The log's record of a facts read with a query: its parameters (the query among them)
    and the facts returned, best first, each scored by its similarity to the query."""
    return MemoryRetrieved(
        agent_id=agent_id,
        mode=FACTS_READ_MODE,
        parameters=parameters,
        results=tuple(
            RetrievedItem(
                memory_id=fact.fact_id,
                rank=rank,
                score=0.0 if fact.score is None else fact.score,
                store="facts",
            )
            for rank, fact in enumerate(answer.facts, start=1)
        ),
        took_ms=took_ms,
    )
