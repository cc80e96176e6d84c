"""A retrieval from the memory as it stood at a point of the log (the request's ``as_of``).

The projections hold the memory as it is now; what it was at an earlier point is only in the
log. The query service does not read the log (that is the deployment's business, as for the
history): the deployment injects a :class:`LogRecall`, which rebuilds the agent's memory from
its partition of the derived log up to the point, into scratch stores, and ranks it with the
same engine. What a point is, and what a rebuild costs, is in ``projections/README.md``
("Recall").

A recall is an audit, not the agent remembering: it is not recorded on ``memory.access``, so
it never counts as a use of a memory (the pruning of summaries reads those uses).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from projections.retrieval.models import RetrievalRequest, RetrievalResponse
from schemas.errors import EngramError

RECALL_TIMEOUT_S = 30.0
"""Longest the query service gives one retrieval with ``as_of`` (reading the agent's partition
of the derived log, rebuilding its memory, ranking); past it, it answers 503. Clients wait that
long for an answer."""


class AsOfNotInLogError(EngramError, LookupError):
    """The point of ``as_of`` is not in the log: a position at or past the end of its partition,
    on a partition the agent's records are not on, a published record the processors have not
    derived yet, or a time in the future. The request is well formed; the log does not hold
    that point (yet), so it is answered 409 at once."""

    def __init__(self, detail: str, *, log_end: int | None = None) -> None:
        super().__init__(detail)
        self.log_end = log_end


class AsOfUnknownTopicError(AsOfNotInLogError):
    """The point of ``as_of`` names a topic this log does not have: a malformed request, not a
    point the log lacks (yet), so it is answered 422, as the same mistake in ``after`` is."""


class AsOfNotInLog(BaseModel):
    """The body of a 409 for ``as_of``: why the log does not hold that point."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    detail: str
    log_end: int | None = Field(
        default=None,
        description="For a position past the end: the offset the partition's next record gets.",
    )


class LogRecall(Protocol):
    """Answers a retrieval whose request has ``as_of`` from the memory rebuilt at that point.

    Raises :class:`AsOfNotInLogError` for a point the log does not hold,
    :class:`projections.history.LogUnavailableError` or ``TimeoutError`` when the log cannot be
    read in time, and :class:`projections.interfaces.ProjectionError` when the scratch stores
    cannot be written.
    """

    @property
    def point_topics(self) -> Collection[str]:
        """The topics a position of ``as_of`` may name: those the processors consume and the
        derived log they write."""

    async def __call__(self, agent_id: str, request: RetrievalRequest) -> RetrievalResponse: ...
