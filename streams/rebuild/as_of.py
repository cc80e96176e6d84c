"""Any recall reproduced: a retrieval answered from the memory as it stood at a point of the
log, and a recorded retrieval run again beside its record.

The memory at a point is built from the log alone: the agent's partition of ``memory.items``
and ``memory.lifecycle`` is read from the beginning, cut at the point
(:mod:`streams.rebuild.log_cut`, which also defines the point), and the agent's events before
the cut are applied, in emission order, to scratch stores: a Redis namespace of its own in the
deployment's Redis (``{namespace}.recall-{random}``) and a Qdrant Edge shard in a temporary
directory, both the production adapters, both deleted once the answer is ranked (a process
killed meanwhile leaves the namespace behind; its keys match ``{namespace}.recall-*``). The
same :class:`~projections.retrieval.engine.RetrievalEngine` then ranks them.

Cost: a read of the agent's whole partition of the derived log, every agent's records of it
(other agents' are passed over by their key, undecoded), so O(the partition), bounded by
:attr:`LogRecaller.timeout`; ``again`` also reads the partition of ``memory.access`` to find
the record. Ranking the rebuilt memory costs what a live retrieval does.

A recorded retrieval (:meth:`LogRecaller.again`) is found by its event id on the agent's
partition of ``memory.access`` (the agent's id says which partition; without it every
partition would be read). Its request is the record's ``parameters`` (mode, query, current
year or step, filters, weights: everything but the read-your-writes wait); nothing in the
scoring reads a clock (an omitted year or step is the newest memory's + 1), so the same memory
gives the same ranking. The memory is rebuilt at the record's ``occurred_at`` (stamped by the
query service once it had answered), and before any batch that derived the record itself or a
later retrieval (logged after it, whatever the clocks say). The record holds no store
positions, so a batch whose marker was logged in the milliseconds before the answer counts
here even if the stores had not applied it yet when they were read; a difference then names
the memories it wrote.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from pydantic import TypeAdapter, ValidationError

from processors.embedding import Embedder
from projections.episodic.candidates import CANDIDATE_LIMIT, RELEVANCE_CANDIDATE_LIMIT
from projections.episodic.factory import open_episodic_store
from projections.interfaces import EpisodicMemoryStore, ProjectionError
from projections.retrieval.as_of import AsOfUnknownTopicError
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.log_end import LogEnds
from projections.retrieval.models import AsOfPosition, RetrievalRequest, RetrievalResponse
from projections.retrieval.recall_diff import Ranked, RecallComparison, compare, memory_fates
from projections.working.redis_store import RedisWorkingMemory
from schemas.codec import decode_derived_record, decode_retrieval
from schemas.envelope import AgentId
from schemas.errors import EngramError
from schemas.memory_events import (
    FACTS_READ_MODE,
    DerivedEvent,
    MemoryRetrieved,
    SourcePosition,
)
from schemas.readable_errors import readable_reason
from schemas.topics import Topics
from streams.eventlog.agent_partition import AgentPartition, read_agent_partition
from streams.eventlog.derived_log import decode_opened
from streams.eventlog.history import partition_for
from streams.eventlog.log_ends import BrokerLogEnds
from streams.privacy.sealing import RecordSealer
from streams.rebuild.log_cut import CutLog, LoggedRecord, LogPoint, cut_at, epoch_ms

log = logging.getLogger("engram.recall")

Decoded = TypeVar("Decoded")
Count = Callable[[int], None]
"""Called with a number of records: how many there are to read, or how many more were read."""

LAST = "last"
"""Stands for the agent's latest recorded retrieval where an event id is asked for."""

_AGENT_ID: TypeAdapter[str] = TypeAdapter(AgentId)

SCRATCH_READ_LIMIT = 100_000
"""Every memory of the rebuilt agent, to tell which memories it held: far above capacities."""


class RetrievalNotFoundError(EngramError, LookupError):
    """No retrieval with that event id among the agent's records on ``memory.access``."""


@dataclass
class Recalled:
    """A retrieval answered from the memory at a point, and how that memory was rebuilt."""

    response: RetrievalResponse
    point: LogPoint
    cut: CutLog
    held: frozenset[str]
    """The memory ids of the rebuilt memory (both stores), ranked or not."""
    records_read: int
    seconds: float


@dataclass
class Repeated:
    """A recorded retrieval run again: the record, where it is, and the answer recomputed."""

    record: MemoryRetrieved
    where: SourcePosition
    request: RetrievalRequest
    recalled: Recalled
    comparison: RecallComparison


@dataclass
class LogRecaller:
    """Answers retrievals from the memory at a point of the log (the query service's
    :class:`projections.retrieval.as_of.LogRecall`, and ``engram recall``)."""

    bootstrap: str
    topics: Callable[[], Topics]
    """The topics of now: the derived log the active projection version continues."""
    partitions: int
    redis_url: str
    namespace: str
    """The deployment's Redis namespace: scratch namespaces are made beside it."""
    embedder: Embedder
    dense_share: float | None = None
    candidate_limit: int | None = CANDIDATE_LIMIT
    """As the query service's (``ENGRAM_RETRIEVAL_CANDIDATES``), so a recall ranks alike."""
    relevance_candidate_limit: int = RELEVANCE_CANDIDATE_LIMIT
    """As the query service's (``ENGRAM_RELEVANCE_CANDIDATES``)."""
    sealer: RecordSealer = field(default_factory=lambda: RecordSealer(None))
    timeout: float = 60.0
    """Longest one recall may take, reading the log included."""
    log_ends: LogEnds | None = None
    """Where source partitions end (the service's own lookups); else one is made per recall."""
    concurrent: int = 2
    """Recalls built at once; the rest wait for a turn within their timeout."""
    _turns: asyncio.Semaphore | None = field(default=None, init=False)

    @property
    def point_topics(self) -> frozenset[str]:
        topics = self.topics()
        return frozenset(
            (*topics.agent_inputs, topics.schedule, topics.access, topics.items, topics.lifecycle)
        )

    async def __call__(self, agent_id: str, request: RetrievalRequest) -> RetrievalResponse:
        if request.as_of is None:
            raise ValueError("a recall needs as_of")
        recalled = await self.recall(agent_id, request, point_of(request.as_of))
        return recalled.response

    async def recall(
        self,
        agent_id: str,
        request: RetrievalRequest,
        point: LogPoint,
        *,
        total: Count | None = None,
        advance: Count | None = None,
    ) -> Recalled:
        """``request`` answered from the agent's memory at ``point``; raises
        :class:`AsOfNotInLogError`, :class:`LogUnavailableError`, or ``TimeoutError`` past
        :attr:`timeout`."""
        started = time.perf_counter()
        topics = self.topics()
        partition = partition_for(_AGENT_ID.validate_python(agent_id), self.partitions)
        async with self._bounded(f"recalling the memory of {agent_id}"):
            ends = await self._source_end(point, topics)
            keep_at = point.position
            read = await self._read(
                [topics.items, topics.lifecycle], partition, agent_id, keep_at, total, advance
            )
            records = _decoded(read, decode_derived_record)
            cut = cut_at(
                [LoggedRecord(where, record, ms) for where, record, ms in records],
                point,
                agent_id=agent_id,
                partition=partition,
                topics=topics,
                now=datetime.now(UTC),
                ends={**ends, **read.ends},
            )
            response, held = await self._rank(agent_id, request, cut.events)
        return Recalled(
            response, point, cut, held, read.total, seconds=time.perf_counter() - started
        )

    async def again(
        self,
        agent_id: str,
        event_id: str,
        *,
        total: Count | None = None,
        advance: Count | None = None,
    ) -> Repeated:
        """The recorded retrieval ``event_id`` of ``agent_id``, run again on the memory rebuilt
        as it stood when it was served, beside its record."""
        record, where = await self.find(agent_id, event_id, total=total, advance=advance)
        if record.mode == FACTS_READ_MODE:
            raise ValueError(
                f"{record.event_id} is a search of {agent_id}'s facts, not a retrieval of "
                "memories: there is no memory to rebuild for it"
            )
        try:
            request = RetrievalRequest.model_validate(record.parameters)
        except ValidationError as exc:
            raise ValueError(
                f"retrieval {record.event_id} was recorded with parameters this version does not "
                f"take as a request: {readable_reason(exc.errors()[0])}"
            ) from None
        point = LogPoint(time=record.occurred_at, served_before=where)
        recalled = await self.recall(agent_id, request, point, total=total, advance=advance)
        fates = memory_fates(
            recalled.cut.events,
            recalled.cut.later,
            written_ms=recalled.cut.written_ms,
            point_ms=epoch_ms(record.occurred_at),
        )
        comparison = compare(
            [Ranked.recorded(item) for item in record.results],
            [Ranked.recomputed(memory) for memory in recalled.response.results],
            fates,
        )
        return Repeated(record, where, request, recalled, comparison)

    async def find(
        self,
        agent_id: str,
        event_id: str,
        *,
        total: Count | None = None,
        advance: Count | None = None,
    ) -> tuple[MemoryRetrieved, SourcePosition]:
        """The record of retrieval ``event_id`` (:data:`LAST`: the agent's latest retrieval of
        memories, a facts search passed over) and where it is on ``memory.access``."""
        topics = self.topics()
        partition = partition_for(_AGENT_ID.validate_python(agent_id), self.partitions)
        async with self._bounded(f"finding retrieval {event_id} of {agent_id}"):
            read = await self._read([topics.access], partition, agent_id, None, total, advance)
        retrievals = [
            (where, record)
            for where, record, _ in _decoded(read, decode_retrieval)
            if record.agent_id == agent_id
        ]
        of_memories = [(w, r) for w, r in retrievals if r.mode != FACTS_READ_MODE]
        if event_id == LAST and of_memories:
            return of_memories[-1][1], of_memories[-1][0]
        for where, record in retrievals:
            if record.event_id == event_id:
                return record, where
        searches = len(retrievals) - len(of_memories)
        counts = _counted(len(of_memories), "retrieval", "retrievals") + " of memories"
        if searches:
            counts += f" and {_counted(searches, 'search', 'searches')} of facts (not recalled)"
        raise RetrievalNotFoundError(
            f"no retrieval {event_id!r} of {agent_id} on {topics.access} (partition "
            f"{partition}, {counts} of the agent read): `engram history {agent_id}` lists its "
            "retrievals with their event ids"
        )

    @asynccontextmanager
    async def _bounded(self, doing: str) -> AsyncIterator[None]:
        """One recall at a time per turn, the whole within :attr:`timeout`."""
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.concurrent)
        try:
            async with asyncio.timeout(self.timeout), self._turns:
                yield
        except TimeoutError:
            raise TimeoutError(
                f"{doing} from {self.bootstrap} took longer than {self.timeout:g} s"
            ) from None

    async def _source_end(self, point: LogPoint, topics: Topics) -> dict[tuple[str, int], int]:
        """The end of a source partition a position names, to tell a record not derived yet
        from one not in the log at all; a position on any other topic is refused."""
        position = point.position
        if position is None or position.topic in (topics.items, topics.lifecycle):
            return {}
        if position.topic not in self.point_topics:
            raise AsOfUnknownTopicError(
                f"{position.topic!r} is not a topic of this log: a point names one of "
                + ", ".join(sorted(self.point_topics))
            )
        key = (position.topic, position.partition)
        if self.log_ends is not None:
            ends = await self.log_ends([key])
        else:
            lookup = await BrokerLogEnds(self.bootstrap, self.partitions).start()
            try:
                ends = await lookup([key])
            finally:
                await lookup.stop()
        return {key: ends[key]} if key in ends else {}

    async def _read(
        self,
        names: Iterable[str],
        partition: int,
        agent_id: str,
        keep_at: SourcePosition | None,
        total: Count | None,
        advance: Count | None,
    ) -> AgentPartition:
        return await read_agent_partition(
            self.bootstrap,
            list(names),
            partition,
            self.partitions,
            agent_id,
            self.sealer,
            keep_at=keep_at,
            total=total,
            advance=advance,
        )

    async def _rank(
        self, agent_id: str, request: RetrievalRequest, events: list[DerivedEvent]
    ) -> tuple[RetrievalResponse, frozenset[str]]:
        async with scratch_stores(self.redis_url, self.namespace, self.embedder.dim) as stores:
            working, episodic = stores
            if events:
                await working.apply(events)
                await episodic.apply(events)
            engine = RetrievalEngine(
                working,
                episodic,
                self.embedder,
                dense_share=self.dense_share,
                candidate_limit=self.candidate_limit,
                relevance_candidate_limit=self.relevance_candidate_limit,
            )
            response = await engine.retrieve(agent_id, request)
            held = [m.memory_id for m in await working.memories(agent_id)]
            held += [m.memory_id for m in await episodic.memories(agent_id, SCRATCH_READ_LIMIT)]
        return response, frozenset(held)


def point_of(as_of: AsOfPosition | datetime) -> LogPoint:
    """The point a request's ``as_of`` names."""
    if isinstance(as_of, datetime):
        return LogPoint(time=as_of)
    return LogPoint(
        position=SourcePosition(topic=as_of.topic, partition=as_of.partition, offset=as_of.offset)
    )


@asynccontextmanager
async def scratch_stores(
    redis_url: str, namespace: str, dim: int
) -> AsyncIterator[tuple[RedisWorkingMemory, EpisodicMemoryStore]]:
    """An empty working store (a namespace of its own beside ``namespace``) and an empty
    Qdrant Edge shard (in a temporary directory), deleted on the way out."""
    scratch = f"{namespace[:80]}.recall-{uuid.uuid4().hex[:12]}"
    directory = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="engram-recall-"))
    working = RedisWorkingMemory.from_url(redis_url, scratch)
    episodic: EpisodicMemoryStore | None = None
    try:
        episodic = await open_episodic_store(
            qdrant_url=None, qdrant_path=directory, collection="episodic", dim=dim
        )
        yield working, episodic
    finally:
        try:
            await working.clear()
        except ProjectionError as exc:  # the answer (or the error that ended it) comes first
            log.warning("scratch namespace %s not deleted: %s", scratch, exc)
        finally:
            await working.close()
            if episodic is not None:
                await episodic.close()
            await asyncio.to_thread(shutil.rmtree, directory, True)


def _counted(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _decoded(
    read: AgentPartition, decode: Callable[[bytes], Decoded]
) -> list[tuple[SourcePosition, Decoded, int]]:
    out = []
    for where, value, ms in read.records:
        decoded = decode_opened(where, value, decode)
        if decoded is not None:
            out.append((where, decoded, ms))
    return out
