"""Read your writes at the HTTP layer: a retrieval with ``after`` waits for the stores' applied
offsets, answers 504 naming what is missing when they do not get there, 422 on positions it
could never see applied, and 409 at once on positions the log does not hold.

The stores are in-test: a memory becomes visible together with its applied offset, as in the
real stores (one Lua call, one checkpointed batch), so a retrieval that did not wait would miss
it. The real pipeline is tested in ``tests/integration/streams/rebuild/test_read_your_writes.py``.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from processors.embedding import HashingEmbedder
from processors.lexical import SparseQuery
from projections.episodic.candidates import CandidateSignals, Scope
from projections.interfaces import ProjectionError
from projections.memory import StoredMemory
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.models import (
    MAX_AFTER_POSITIONS,
    MissingPosition,
    PendingPosition,
    RecordPosition,
    RetrievalRequest,
)
from projections.service.app import create_app
from projections.service.client import (
    AsyncEngramClient,
    NotInLogError,
    QueryError,
    WaitTimeoutError,
)
from schemas.memory_events import DerivedEvent, MemoryRetrieved, SurpriseReading
from schemas.topics import Topics
from streams.eventlog.publisher import Position

pytestmark = pytest.mark.timeout(60)

AGENT = "H001"
URL = f"/v1/agents/{AGENT}/retrieve"
OBSERVATIONS = Topics().observations
BASE = "http://engram.test"


def memory(seq: int, destination: str) -> StoredMemory:
    return StoredMemory.model_validate(
        {
            "memory_id": f"memory-{seq}",
            "agent_id": AGENT,
            "content": f"event {seq}",
            "importance": 0.9 if destination == "episodic" else 0.3,
            "destination": destination,
            "seq": seq,
            "occurred_at": datetime(2024, 1, 1, tzinfo=UTC),
            "source_event_id": f"event-{seq}",
            "source_event_type": "observation",
        }
    )


class MarkedStore:
    """Memories with the source offset that wrote them; both become visible at once.

    ``reads`` counts applied-offset reads per partition; ``failure`` makes them raise.
    """

    def __init__(self) -> None:
        self.written: list[tuple[tuple[str, int], int, StoredMemory]] = []
        self.marks: dict[tuple[str, int], int] = {}
        self.reads: Counter[tuple[str, int]] = Counter()
        self.failure: ProjectionError | None = None

    def write(self, topic: str, partition: int, offset: int, item: StoredMemory | None) -> None:
        key = (topic, partition)
        if item is not None:
            self.written.append((key, offset, item))
        self.marks[key] = max(self.marks.get(key, -1), offset)

    def visible(self, agent_id: str) -> list[StoredMemory]:
        return [
            m
            for key, offset, m in self.written
            if m.agent_id == agent_id and offset <= self.marks[key]
        ]

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        raise NotImplementedError("retrieval never writes")

    async def advance(self, positions: Mapping[tuple[str, int], int]) -> None:
        raise NotImplementedError("retrieval never writes")

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        self.reads[(topic, partition)] += 1
        if self.failure is not None:
            raise self.failure
        return self.marks.get((topic, partition))

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


class MarkedWorking(MarkedStore):
    async def memories(self, agent_id: str) -> list[StoredMemory]:
        return sorted(self.visible(agent_id), key=lambda m: -m.seq)

    async def arousal(self, agent_id: str) -> SurpriseReading | None:
        return None


class MarkedEpisodic(MarkedStore):
    async def memories(
        self,
        agent_id: str,
        limit: int = 1000,
        levels: Sequence[int] | None = None,
        *,
        filter: MemoryFilter | None = None,
    ) -> list[StoredMemory]:
        return sorted(self.visible(agent_id), key=lambda m: -m.seq)[:limit]

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
        return await self.memories(agent_id, limit, levels, filter=filter)

    async def count(self, agent_id: str | None = None) -> int:
        return len(self.written)


def app_over(working: MarkedWorking, episodic: MarkedEpisodic, **options: Any) -> FastAPI:
    source_topics = options.pop("source_topics", None)
    log_ends = options.pop("log_ends", None)
    engine = RetrievalEngine(
        working, episodic, HashingEmbedder(64), source_topics=source_topics, log_ends=log_ends
    )
    return create_app(engine, **options)


class Log:
    """Where the log's partitions end, as the broker would say; ``asked`` records each lookup,
    and ``failure`` makes one raise."""

    def __init__(self, ends: Mapping[tuple[str, int], int]) -> None:
        self.ends = dict(ends)
        self.asked: list[frozenset[tuple[str, int]]] = []
        self.failure: Exception | None = None

    async def __call__(self, partitions: Collection[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.asked.append(frozenset(partitions))
        if self.failure is not None:
            raise self.failure
        return {key: self.ends[key] for key in partitions if key in self.ends}


async def client_for(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        yield client


def at(offset: int, partition: int = 0, topic: str = OBSERVATIONS) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "offset": offset}


async def post(app: FastAPI, body: dict[str, Any]) -> httpx.Response:
    async for client in client_for(app):
        return await client.post(URL, json=body)
    raise AssertionError("no client")


async def test_applied_positions_are_answered_with_what_they_wrote() -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    working.write(OBSERVATIONS, 0, 4, memory(1, "working"))
    episodic.write(OBSERVATIONS, 0, 4, None)
    response = await post(app_over(working, episodic), {"after": [at(4)]})
    assert response.status_code == 200, response.text
    assert [r["content"] for r in response.json()["results"]] == ["event 1"]


async def test_the_retrieval_waits_until_both_stores_have_applied() -> None:
    """The memories only exist once applied: a retrieval that did not wait would miss them."""
    working, episodic = MarkedWorking(), MarkedEpisodic()

    async def processors() -> None:
        await asyncio.sleep(0.05)
        working.write(OBSERVATIONS, 1, 7, memory(1, "working"))
        await asyncio.sleep(0.05)
        episodic.write(OBSERVATIONS, 1, 6, memory(2, "episodic"))
        await asyncio.sleep(0.05)
        episodic.write(OBSERVATIONS, 1, 7, None)  # the working memory's record, a no-op here

    behind = asyncio.create_task(processors())
    response = await post(
        app_over(working, episodic), {"after": [at(7, partition=1)], "wait_timeout_ms": 20_000}
    )
    await behind
    assert response.status_code == 200, response.text
    body = response.json()
    assert [r["content"] for r in body["results"]] == ["event 1", "event 2"]
    assert body["waited_ms"] > 0


async def test_without_after_nothing_is_awaited() -> None:
    """The control of the test above: the same stores, read at once, miss the memories."""
    working, episodic = MarkedWorking(), MarkedEpisodic()
    working.written.append(((OBSERVATIONS, 0), 7, memory(1, "working")))
    working.marks[(OBSERVATIONS, 0)] = 6
    response = await post(app_over(working, episodic), {})
    assert response.status_code == 200
    assert response.json()["results"] == []
    assert response.json()["waited_ms"] == 0
    assert (working.reads, episodic.reads) == (Counter(), Counter())


async def test_a_timeout_is_504_naming_each_pending_position_and_each_store() -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    working.write(OBSERVATIONS, 0, 3, None)
    working.write(OBSERVATIONS, 1, 9, None)
    episodic.write(OBSERVATIONS, 1, 9, None)
    body = {"after": [at(10), at(8, partition=1), at(4)], "wait_timeout_ms": 200}

    response = await post(app_over(working, episodic), body)

    assert response.status_code == 504, response.text
    answer = response.json()
    assert answer["pending"] == [at(10) | {"working": 3, "episodic": None}]
    assert answer["waited_ms"] >= 200
    assert answer["detail"].startswith("1 of 2 positions not applied")
    assert "within 200 ms" in answer["detail"]
    assert (
        f"{OBSERVATIONS}[0]@10 (working memory at 3, episodic memory nothing applied)"
        in (answer["detail"])
    )


async def test_a_store_that_got_there_is_not_read_again() -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    working.write(OBSERVATIONS, 0, 5, None)
    response = await post(app_over(working, episodic), {"after": [at(5)], "wait_timeout_ms": 150})
    assert response.status_code == 504
    assert working.reads[(OBSERVATIONS, 0)] == 1
    assert episodic.reads[(OBSERVATIONS, 0)] > 1


@pytest.mark.parametrize(("mark", "status"), [(5, 200), (4, 504)])
async def test_a_zero_timeout_checks_once(mark: int, status: int) -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    for store in (working, episodic):
        store.write(OBSERVATIONS, 0, mark, None)
    response = await post(app_over(working, episodic), {"after": [at(5)], "wait_timeout_ms": 0})
    assert response.status_code == status, response.text
    assert working.reads[(OBSERVATIONS, 0)] == 1


async def test_a_store_failing_during_the_wait_is_503() -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    episodic.failure = ProjectionError("qdrant down")
    response = await post(app_over(working, episodic), {"after": [at(1)]})
    assert response.status_code == 503
    assert "qdrant down" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"after": [at(-1)]}, "after.0.offset"),
        ({"after": [at(2**53 + 1)]}, "after.0.offset"),
        ({"after": [at(0, partition=-1)]}, "after.0.partition"),
        ({"after": [at(0), at(0, topic="")]}, "after.1.topic"),
        ({"after": [at(0, topic="agent observations")]}, "after.0.topic"),
        ({"after": [at(0) | {"epoch": 1}]}, "after.0.epoch"),
        ({"after": [{"topic": OBSERVATIONS, "offset": 1}]}, "after.0.partition"),
        ({"after": [at(i) for i in range(MAX_AFTER_POSITIONS + 1)]}, "after"),
        ({"after": at(0)}, "after"),
        ({"wait_timeout_ms": -1}, "wait_timeout_ms"),
        ({"wait_timeout_ms": 30_001}, "wait_timeout_ms"),
        ({"wait_timeout_ms": 1.5}, "wait_timeout_ms"),
        ({"wait_timeout_ms": "soon"}, "wait_timeout_ms"),
    ],
)
async def test_bad_positions_and_timeouts_are_refused_by_name(
    body: dict[str, Any], field: str
) -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    response = await post(app_over(working, episodic), body)
    assert response.status_code == 422, response.text
    assert [e["msg"].split(":")[0] for e in response.json()["detail"]] == [field]
    assert (working.reads, episodic.reads) == (Counter(), Counter())


@pytest.mark.parametrize(
    "topic", [Topics().items, Topics().deadletter, "agent.observations.old", "elsewhere"]
)
async def test_a_topic_the_processors_do_not_consume_is_422(topic: str) -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    response = await post(app_over(working, episodic), {"after": [at(1), at(1, topic=topic)]})
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "after", 1, "topic"]
    assert error["msg"].startswith(f"after.1.topic: topic {topic!r} is not one")
    assert (working.reads, episodic.reads) == (Counter(), Counter())


@pytest.mark.parametrize(
    ("topic", "status"),
    [("tenant-a.agent.decisions", 200), ("tenant-b.agent.decisions", 422)],
)
async def test_configured_source_topics_are_matched_exactly(topic: str, status: int) -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    for store in (working, episodic):
        store.write(topic, 0, 1, None)
    app = app_over(working, episodic, source_topics=Topics("tenant-a.").agent_inputs)
    response = await post(app, {"after": [at(1, topic=topic)]})
    assert response.status_code == status, response.text


async def test_every_source_topic_is_accepted_whatever_its_prefix() -> None:
    topics = Topics("e2e1234.")
    consumed = (*topics.agent_inputs, topics.schedule, topics.access)
    working, episodic = MarkedWorking(), MarkedEpisodic()
    for store in (working, episodic):
        for topic in consumed:
            store.write(topic, 0, 1, None)
    response = await post(
        app_over(working, episodic), {"after": [at(1, topic=t) for t in consumed]}
    )
    assert response.status_code == 200, response.text


async def test_the_audit_record_leaves_the_wait_out() -> None:
    """The record says what was retrieved; the positions would only bloat memory.access."""
    records: list[MemoryRetrieved] = []

    async def hook(event: MemoryRetrieved) -> None:
        records.append(event)

    working, episodic = MarkedWorking(), MarkedEpisodic()
    for store in (working, episodic):
        store.write(OBSERVATIONS, 0, 1, None)
    body = {"top_k": 3, "after": [at(1)], "wait_timeout_ms": 1000}
    response = await post(app_over(working, episodic, on_retrieval=hook), body)
    assert response.status_code == 200, response.text
    [record] = records
    assert "after" not in record.parameters
    assert "wait_timeout_ms" not in record.parameters
    assert RetrievalRequest.model_validate(record.parameters) == RetrievalRequest(top_k=3)


async def test_a_timeout_is_not_recorded_as_a_retrieval() -> None:
    records: list[MemoryRetrieved] = []

    async def hook(event: MemoryRetrieved) -> None:
        records.append(event)

    app = app_over(MarkedWorking(), MarkedEpisodic(), on_retrieval=hook)
    response = await post(app, {"after": [at(1)], "wait_timeout_ms": 0})
    assert response.status_code == 504
    assert records == []


async def test_openapi_documents_the_wait() -> None:
    async for client in client_for(app_over(MarkedWorking(), MarkedEpisodic())):
        schema = (await client.get("/openapi.json")).json()
    operation = schema["paths"]["/v1/agents/{agent_id}/retrieve"]["post"]
    assert "504" in operation["responses"]
    request = schema["components"]["schemas"]["RetrievalRequest"]
    timeout = request["properties"]["wait_timeout_ms"]
    assert (timeout["default"], timeout["minimum"], timeout["maximum"]) == (5000, 0, 30000)
    assert request["properties"]["after"]["maxItems"] == MAX_AFTER_POSITIONS


async def test_the_client_takes_published_positions_and_raises_on_a_timeout() -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    working.write(OBSERVATIONS, 0, 2, memory(1, "working"))
    episodic.write(OBSERVATIONS, 0, 2, None)
    episodic.write(Topics().decisions, 1, 0, None)
    transport = httpx.ASGITransport(app=app_over(working, episodic))
    async with AsyncEngramClient(BASE, transport=transport) as client:
        published = [Position(OBSERVATIONS, 0, 2), at(0, partition=1, topic=Topics().decisions)]
        with pytest.raises(WaitTimeoutError) as timed_out:
            await client.retrieve(AGENT, after=published, wait_timeout_ms=100)

        working.write(Topics().decisions, 1, 0, None)
        answer = await client.retrieve(AGENT, after=published, wait_timeout_ms=100)

        # Positions given beside a request are added to its own.
        request = RetrievalRequest(after=(RecordPosition(**at(2)),), wait_timeout_ms=0)
        with pytest.raises(WaitTimeoutError) as merged:
            await client.retrieve(AGENT, request, after=[Position(OBSERVATIONS, 0, 3)])
    assert [p.offset for p in merged.value.pending] == [3]
    error = timed_out.value
    assert isinstance(error, QueryError)
    assert error.status == 504
    assert error.pending == (
        PendingPosition(topic=Topics().decisions, partition=1, offset=0, working=None, episodic=0),
    )
    assert error.waited_ms >= 100
    assert "1 of 2 positions not applied" in str(error)
    assert [m.content for m in answer.results] == ["event 1"]


@pytest.mark.parametrize(
    "after",
    [
        "agent.observations-5",
        "agent.observations:0:x",
        ":0:5",
        "agent observations:0:5",  # no topic's name: --as-of refused it, --after took it
        "agent.observations:\u00b2:5",
    ],
)
def test_the_command_line_refuses_a_malformed_position(after: str) -> None:
    from typer.testing import CliRunner

    from streams.cli.main import app as cli

    result = CliRunner().invoke(cli, ["retrieve", "H1", "--after", after, "--url", BASE])
    assert result.exit_code == 2, result.output
    assert f"--after: {after!r} is not topic:partition:offset" in result.output


async def test_a_wait_follows_a_switch_of_stores() -> None:
    """A retrieval reads the stores in use when its wait ends, so it waits for those."""
    stale = MarkedWorking(), MarkedEpisodic()
    rebuilt = MarkedWorking(), MarkedEpisodic()
    rebuilt[0].write(OBSERVATIONS, 0, 3, memory(1, "working"))
    rebuilt[1].write(OBSERVATIONS, 0, 3, None)
    engine = RetrievalEngine(*stale, HashingEmbedder(64))

    async def switch() -> None:
        await asyncio.sleep(0.05)
        engine.use(*rebuilt)

    switching = asyncio.create_task(switch())
    request = RetrievalRequest(after=(RecordPosition(**at(3)),), wait_timeout_ms=20_000)
    response = await engine.retrieve(AGENT, request)
    await switching
    assert [m.content for m in response.results] == ["event 1"]
    assert rebuilt[0].reads[(OBSERVATIONS, 0)] >= 1


async def test_a_position_past_the_end_of_the_log_is_409_at_once() -> None:
    """The log ends before it: no wait would see it applied, so none is made. "At once" is
    counted, not timed: each store's mark is read once per partition, the log asked once,
    and the answer is the refusal, although 30 s of waiting were allowed."""
    working, episodic = MarkedWorking(), MarkedEpisodic()
    for store in (working, episodic):
        store.write(OBSERVATIONS, 0, 4, None)
    log = Log({(OBSERVATIONS, 0): 5, (OBSERVATIONS, 1): 0})
    body = {"after": [at(4), at(5), at(0, partition=1), at(0, partition=2)]}
    body["wait_timeout_ms"] = 30_000

    response = await post(app_over(working, episodic, log_ends=log), body)

    assert response.status_code == 409, response.text
    once = Counter({(OBSERVATIONS, 0): 1, (OBSERVATIONS, 1): 1, (OBSERVATIONS, 2): 1})
    assert (working.reads, episodic.reads) == (once, once)
    answer = response.json()
    assert answer["missing"] == [
        at(5) | {"log_end": 5},
        at(0, partition=1) | {"log_end": 0},
        at(0, partition=2) | {"log_end": None},
    ]
    assert answer["detail"].startswith("3 position(s) of after are not in the log")
    assert f"{OBSERVATIONS}[0]@5 (the partition ends at 5)" in answer["detail"]
    assert f"{OBSERVATIONS}[2]@0 (no such partition)" in answer["detail"]
    assert len(log.asked) == 1


async def test_a_position_in_the_log_is_waited_for() -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    log = Log({(OBSERVATIONS, 0): 8})

    async def processors() -> None:
        await asyncio.sleep(0.05)
        working.write(OBSERVATIONS, 0, 7, memory(1, "working"))
        episodic.write(OBSERVATIONS, 0, 7, None)

    behind = asyncio.create_task(processors())
    body = {"after": [at(7)], "wait_timeout_ms": 20_000}
    response = await post(app_over(working, episodic, log_ends=log), body)
    await behind
    assert response.status_code == 200, response.text
    assert [r["content"] for r in response.json()["results"]] == ["event 1"]


async def test_positions_applied_at_the_first_look_cost_no_lookup() -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    for store in (working, episodic):
        store.write(OBSERVATIONS, 0, 4, None)
    log = Log({})
    response = await post(app_over(working, episodic, log_ends=log), {"after": [at(4)]})
    assert response.status_code == 200, response.text
    assert log.asked == []


async def test_known_ends_are_not_asked_for_again() -> None:
    """A log only grows: a position below an end looked up once stays in the log."""
    working, episodic = MarkedWorking(), MarkedEpisodic()
    log = Log({(OBSERVATIONS, 0): 10})
    app = app_over(working, episodic, log_ends=log)
    for offset in (9, 3, 9):
        response = await post(app, {"after": [at(offset)], "wait_timeout_ms": 0})
        assert response.status_code == 504, response.text
    assert len(log.asked) == 1


async def test_without_an_answer_from_the_log_the_wait_goes_on() -> None:
    """An end that cannot be looked up is not a missing position: the retrieval waits as it
    would without lookups, and answers 504 when its writes do not arrive."""
    working, episodic = MarkedWorking(), MarkedEpisodic()
    log = Log({})
    log.failure = ConnectionError("broker unreachable")
    body = {"after": [at(100)], "wait_timeout_ms": 100}
    response = await post(app_over(working, episodic, log_ends=log), body)
    assert response.status_code == 504, response.text
    assert len(log.asked) == 1


async def test_the_document_names_the_topics_a_position_may_name() -> None:
    consumed = Topics("tenant-a.").agent_inputs
    app = app_over(MarkedWorking(), MarkedEpisodic(), source_topics=consumed)
    async for client in client_for(app):
        schema = (await client.get("/openapi.json")).json()
    topic = schema["components"]["schemas"]["RecordPosition"]["properties"]["topic"]
    assert topic["enum"] == sorted(consumed)
    assert topic["examples"] == ["tenant-a.agent.observations"]
    operation = schema["paths"]["/v1/agents/{agent_id}/retrieve"]["post"]
    refused = operation["responses"]["409"]["content"]["application/json"]["schema"]
    assert refused["anyOf"] == [
        {"$ref": "#/components/schemas/NotInLog"},
        {"$ref": "#/components/schemas/AsOfNotInLog"},
    ]


@pytest.mark.parametrize(
    ("topic", "admitted"),
    [
        ("agent.observations", True),
        ("e2e1234.memory.access", True),
        ("memory.items", False),
        ("agent.observations.old", False),
    ],
)
async def test_without_configured_topics_the_document_names_their_endings(
    topic: str, admitted: bool
) -> None:
    async for client in client_for(app_over(MarkedWorking(), MarkedEpisodic())):
        schema = (await client.get("/openapi.json")).json()
    pattern = schema["components"]["schemas"]["RecordPosition"]["properties"]["topic"]["pattern"]
    assert (re.search(pattern, topic) is not None) is admitted


async def test_the_client_raises_on_positions_the_log_does_not_hold() -> None:
    working, episodic = MarkedWorking(), MarkedEpisodic()
    log = Log({(OBSERVATIONS, 0): 3})
    transport = httpx.ASGITransport(app=app_over(working, episodic, log_ends=log))
    async with AsyncEngramClient(BASE, transport=transport) as client:
        with pytest.raises(NotInLogError) as refused:
            await client.retrieve(AGENT, after=[Position(OBSERVATIONS, 0, 3)])
    error = refused.value
    assert isinstance(error, QueryError)
    assert error.status == 409
    assert error.missing == (MissingPosition(topic=OBSERVATIONS, partition=0, offset=3, log_end=3),)
    assert "not in the log" in str(error)
