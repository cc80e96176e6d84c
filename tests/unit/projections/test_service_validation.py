"""The HTTP layer's answers to bad input and unavailable stores.

The stores here are in-test lists: requests refused with 422 never reach a store, and the 503
cases only need a store that raises. End-to-end retrieval over Redis and Qdrant is tested in
``tests/integration``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from processors.embedding import HashingEmbedder
from processors.lexical import SparseQuery
from projections.episodic.candidates import CandidateSignals, Scope
from projections.history import (
    AgentHistory,
    LogPosition,
    LogUnavailableError,
    PositionedEvent,
    build_timeline,
)
from projections.interfaces import ProjectionError
from projections.memory import StoredMemory
from projections.retrieval.engine import RetrievalEngine
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.models import RetrievalRequest
from projections.service.app import create_app
from schemas.codec import decode_retrieval, encode_event
from schemas.memory_events import DerivedEvent, MemoryRetrieved, SurpriseReading

AGENT = "H001"
URL = f"/v1/agents/{AGENT}/retrieve"


def stored(seq: int, destination: str, importance: float, year: int) -> StoredMemory:
    return StoredMemory.model_validate(
        {
            "memory_id": f"memory-{seq}",
            "agent_id": AGENT,
            "content": f"Year {year}: event {seq}",
            "importance": importance,
            "destination": destination,
            "seq": seq,
            "occurred_at": datetime(2024, 1, 1, tzinfo=UTC),
            "year": year,
            "source_event_id": f"event-{seq}",
            "source_event_type": "observation",
        }
    )


class ListWorkingMemory:
    """A working-memory store over a list; ``failure`` makes every read and ping raise it."""

    def __init__(
        self, items: Sequence[StoredMemory] = (), failure: ProjectionError | None = None
    ) -> None:
        self.items = list(items)
        self.failure = failure

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        raise NotImplementedError("retrieval never writes")

    async def memories(self, agent_id: str) -> list[StoredMemory]:
        if self.failure:
            raise self.failure
        return [m for m in self.items if m.agent_id == agent_id]

    async def arousal(self, agent_id: str) -> SurpriseReading | None:
        return None

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        return None

    async def ping(self) -> None:
        if self.failure:
            raise self.failure

    async def close(self) -> None:
        return None


class ListEpisodicMemory:
    """An episodic store over a list; ``search`` returns the list as is, without similarity."""

    def __init__(
        self, items: Sequence[StoredMemory] = (), failure: ProjectionError | None = None
    ) -> None:
        self.items = list(items)
        self.failure = failure

    async def apply(self, events: Sequence[DerivedEvent]) -> None:
        raise NotImplementedError("retrieval never writes")

    async def memories(
        self,
        agent_id: str,
        limit: int = 1000,
        levels: Sequence[int] | None = None,
        *,
        filter: MemoryFilter | None = None,
    ) -> list[StoredMemory]:
        if self.failure:
            raise self.failure
        return [
            m
            for m in self.items
            if m.agent_id == agent_id and (levels is None or m.level in levels)
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
        return len(self.items)

    async def applied_offset(self, topic: str, partition: int) -> int | None:
        return None

    async def ping(self) -> None:
        if self.failure:
            raise self.failure

    async def close(self) -> None:
        return None


def app_over(
    working: ListWorkingMemory | None = None,
    episodic: ListEpisodicMemory | None = None,
    **options: Any,
) -> FastAPI:
    engine = RetrievalEngine(
        working or ListWorkingMemory([stored(2, "working", 0.5, 5)]),
        episodic or ListEpisodicMemory([stored(1, "episodic", 0.9, 1)]),
        HashingEmbedder(64),
    )
    return create_app(engine, **options)


async def client_for(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engram.test") as client:
        yield client


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async for client in client_for(app_over()):
        yield client


def messages(response: httpx.Response) -> list[str]:
    return [entry["msg"] for entry in response.json()["detail"]]


def request_schema(document: dict[str, Any]) -> Draft202012Validator:
    """The retrieval request's schema in the OpenAPI document, its references resolved."""
    registry = Registry().with_resource(
        "urn:openapi", Resource.from_contents(document, default_specification=DRAFT202012)
    )
    reference = {"$ref": "urn:openapi#/components/schemas/RetrievalRequest"}
    return Draft202012Validator(reference, registry=registry)


async def admitted_by_the_document(client: httpx.AsyncClient, body: dict[str, Any]) -> bool:
    document = (await client.get("/openapi.json")).json()
    return request_schema(document).is_valid(body)


async def test_a_valid_request_is_answered(client: httpx.AsyncClient) -> None:
    """The control for every 422 below: the same route accepts a well-formed request."""
    body = {"top_k": 2, "current_year": 5, "query": "flood", "mode": "two_phase"}
    response = await client.post(URL, json=body)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["agent_id"] == AGENT
    assert [r["store"] for r in body["results"]] == ["working", "episodic"]
    assert body["results"][1]["breakdown"]["decay"] == pytest.approx(0.95**4)


async def test_a_query_without_a_mode_is_answered_by_relevance_over_every_memory(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(URL, json={"top_k": 2, "query": "flood"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["mode"], body["scope"]) == ("relevance", "all")
    assert all(r["breakdown"]["mode"] == "relevance" for r in body["results"])
    chosen = await client.post(URL, json={"query": "flood", "mode": "saliency"})
    assert (chosen.json()["mode"], chosen.json()["scope"]) == ("saliency", "active")
    narrowed = await client.post(URL, json={"query": "flood", "scope": "active"})
    assert (narrowed.json()["mode"], narrowed.json()["scope"]) == ("relevance", "active")
    plain = await client.post(URL, json={})
    assert (plain.json()["mode"], plain.json()["scope"]) == ("two_phase", "active")


@pytest.mark.parametrize("agent_id", ["bad%20id", "x" * 201, "agent%7Cone"])
async def test_bad_agent_id_is_refused(client: httpx.AsyncClient, agent_id: str) -> None:
    response = await client.post(f"/v1/agents/{agent_id}/retrieve", json={})
    assert response.status_code == 422
    [message] = messages(response)
    assert message.startswith("agent_id: ")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"top_k": 0}, "top_k"),
        ({"top_k": 101}, "top_k"),
        ({"top_k": "many"}, "top_k"),
        ({"mode": "newest"}, "mode"),
        ({"bogus": 1}, "bogus"),
        ({"current_step": -1}, "current_step"),
        ({"mode": "weighted", "weights": {"recency": -0.5}}, "weights.recency"),
        ({"mode": "weighted", "weights": {"novelty": 1.0}}, "weights.novelty"),
        ({"tags": ["flood", ""]}, "tags.1"),
        ({"query": ""}, "query"),
        ({"query": " \n\t\u3000"}, "query"),
        ({"levels": []}, "levels"),
        ({"levels": [0, 0]}, "levels"),
        ({"levels": [3]}, "levels.0"),
        ({"mode": "constrained", "profile": "GENEROUS"}, "profile"),
        ({"mode": "constrained", "arousal": 1.5}, "arousal"),
        ({"mode": "generative", "generative": {"recency": -1}}, "generative.recency"),
        # Past the bound, a score overflowed to infinity (answered as "score": null).
        ({"mode": "weighted", "weights": {"recency": 1.7e308}}, "weights.recency"),
        ({"mode": "generative", "generative": {"importance": 1e7}}, "generative.importance"),
        ({"mode": "generative", "generative": {"recency_decay": 0}}, "generative.recency_decay"),
        ({"filter": {"kinds": ["semantic"]}}, "filter.kinds.0"),
        ({"filter": {"min_importance": 2}}, "filter.min_importance"),
        ({"filter": {"tags": [""]}}, "filter.tags.0"),
        ({"filter": {"year": 3}}, "filter.year"),
        ({"current_year": 2**53 + 1}, "current_year"),
        ({"current_step": 2**53 + 1}, "current_step"),
        ({"filter": {"year_to": -(2**53) - 1}}, "filter.year_to"),
        ({"tags": ["flood", "\u3000\t"]}, "tags.1"),
        ({"mode": "recent", "days": 0}, "days"),
        ({"mode": "recent", "days": -7}, "days"),
        ({"mode": "recent", "days": 1e300}, "days"),
        # A number was read as Unix seconds: the year 2026 as 1970-01-01T00:33:46Z.
        ({"current_time": 2026}, "current_time"),
        ({"filter": {"occurred_after": 1.7e9}}, "filter.occurred_after"),
    ],
)
async def test_bad_field_is_refused_by_name(
    client: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    response = await client.post(URL, json=body)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert [entry["msg"].split(":")[0] for entry in detail] == [field]
    assert all(set(entry) == {"loc", "msg", "type"} for entry in detail)
    assert not await admitted_by_the_document(client, body)


@pytest.mark.parametrize(
    "body",
    [
        {"current_time": 2026},
        {"current_time": "2026"},
        {"mode": "recent", "current_time": " -1700000000.5"},
        {"filter": {"occurred_before": "1700000000"}},
        {"current_time": "2.026e3"},
        {"as_of": 5},
    ],
)
async def test_a_number_for_a_time_is_refused_not_read_as_unix_seconds(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    """``2026`` meant as a year, or an offset meant as an as-of, was read as Unix seconds and
    answered about 1970-01-01T00:33:46Z (``engram retrieve --time 2026`` too)."""
    response = await client.post(URL, json=body)
    assert response.status_code == 422, response.text
    assert any("is a number, not a time: give ISO 8601" in m for m in messages(response))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"current_year": 3, "current_step": 30}, "not both"),
        ({"current_step": 3, "current_time": "2026-01-01T00:00:00Z"}, "not both"),
        ({"weights": {"recency": 1.0}}, "only to mode 'weighted'"),
        ({"mode": "weighted", "weights": {"recency": 0, "importance": 0, "context": 0}}, "one"),
        ({"profile": "MINIMAL"}, "profile applies only to mode 'constrained'"),
        ({"mode": "basic", "arousal": 0.3}, "arousal applies only to mode 'constrained'"),
        ({"mode": "weighted", "generative": {}}, "generative applies only to mode 'generative'"),
        ({"mode": "relevance", "query": None}, "give a query"),
        (
            {"mode": "generative", "generative": {"recency": 0, "importance": 0, "relevance": 0}},
            "one",
        ),
        ({"mode": "constrained", "weights": {}}, "weights apply only to mode 'weighted'"),
        ({"days": 7}, "days applies only to mode 'recent'"),
        ({"mode": "saliency", "days": 3}, "days applies only to mode 'recent'"),
        ({"mode": "recent", "current_year": 3}, "mode 'recent' counts days of the wall clock"),
        ({"mode": "recent", "current_step": 3}, "give current_time"),
    ],
)
async def test_inconsistent_request_is_refused_with_the_reason(
    client: httpx.AsyncClient, body: dict[str, Any], reason: str
) -> None:
    """Refused, and outside the request schema of the OpenAPI document as well: a request the
    document admits is one the service answers."""
    response = await client.post(URL, json=body)
    assert response.status_code == 422
    [message] = messages(response)
    assert reason in message
    assert not await admitted_by_the_document(client, body)


@pytest.mark.parametrize(
    "body",
    [
        {"mode": "constrained", "arousal": 0.3, "profile": "MINIMAL", "current_step": 3},
        {"mode": "weighted", "weights": {"recency": 0, "importance": 0, "relevance": 1}},
        {"mode": "weighted", "weights": {"recency": 0, "importance": 0, "context": 0.1}},
        {"mode": "generative", "generative": {"recency": 0, "importance": 0}},
        {"mode": "relevance", "query": "flood", "current_year": None, "current_step": 4},
        {"mode": "two_phase", "weights": None, "arousal": None, "generative": None},
        {"mode": "recent"},
        {"mode": "recent", "days": 0.5, "current_time": "2024-01-01T12:00:00+02:00"},
        {"mode": "recent", "current_year": None, "days": None},
    ],
)
async def test_what_the_document_admits_across_fields_is_answered(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    assert await admitted_by_the_document(client, body)
    response = await client.post(URL, json=body)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "memory_filter", [{"year_from": 5, "year_to": 2}, {"step_from": 9, "step_to": 1}]
)
async def test_a_range_ending_before_it_starts_is_answered_with_nothing(
    client: httpx.AsyncClient, memory_filter: dict[str, int]
) -> None:
    """No JSON Schema can compare two fields, so the document admits such a range: it is an
    empty interval, not an error."""
    body = {"filter": memory_filter}
    assert await admitted_by_the_document(client, body)
    response = await client.post(URL, json=body)
    assert response.status_code == 200, response.text
    assert response.json()["results"] == []


async def test_malformed_json_is_refused(client: httpx.AsyncClient) -> None:
    response = await client.post(
        URL, content=b'{"top_k": ', headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    [message] = messages(response)
    assert message.startswith("body: not valid JSON")


async def test_store_failure_is_503_with_the_reason() -> None:
    failure = ProjectionError("redis at localhost:6390 refused the connection")
    app = app_over(working=ListWorkingMemory(failure=failure))
    async for client in client_for(app):
        response = await client.post(URL, json={})
    assert response.status_code == 503
    assert response.json() == {
        "detail": "memory store unavailable: redis at localhost:6390 refused the connection"
    }


async def test_both_store_failures_are_reported() -> None:
    app = app_over(
        working=ListWorkingMemory(failure=ProjectionError("redis down")),
        episodic=ListEpisodicMemory(failure=ProjectionError("qdrant down")),
    )
    async for client in client_for(app):
        response = await client.post(URL, json={})
    assert response.status_code == 503
    assert "redis down" in response.json()["detail"]
    assert "qdrant down" in response.json()["detail"]


async def test_health_and_readiness(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "alive"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "checks": {"working": "ok", "episodic": "ok"}}


async def test_readiness_names_the_failing_backend() -> None:
    app = app_over(episodic=ListEpisodicMemory(failure=ProjectionError("qdrant: no answer")))
    async for client in client_for(app):
        response = await client.get("/readyz")
        health = await client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "not_ready",
        "checks": {"working": "ok", "episodic": "qdrant: no answer"},
    }
    assert health.status_code == 200


async def test_a_hanging_readiness_check_times_out() -> None:
    async def hangs() -> dict[str, str]:
        await asyncio.sleep(60)
        return {}

    app = app_over(readiness=hangs, readiness_timeout_s=0.05)
    async for client in client_for(app):
        response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"readiness": "no answer within 0.05 s"}


async def test_openapi_documents_the_contract(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    assert schema["info"]["title"] == "Engram query service"
    operation = schema["paths"]["/v1/agents/{agent_id}/retrieve"]["post"]
    assert {"200", "422", "503"} <= set(operation["responses"])
    [agent_id] = operation["parameters"]
    assert agent_id["schema"]["maxLength"] == 200
    request = schema["components"]["schemas"]["RetrievalRequest"]
    assert request["additionalProperties"] is False
    assert request["properties"]["top_k"]["maximum"] == 100
    levels = request["properties"]["levels"]
    assert (levels["default"], levels["minItems"], levels["uniqueItems"]) == ([0], 1, True)
    assert request["properties"]["mode"]["enum"] == [
        "two_phase",
        "weighted",
        "saliency",
        "basic",
        "constrained",
        "generative",
        "relevance",
        "recent",
    ]
    assert "MemoryFilter" in schema["components"]["schemas"]
    breakdowns = schema["components"]["schemas"]["RetrievedMemory"]["properties"]["breakdown"]
    assert set(breakdowns["discriminator"]["mapping"]) == {
        "two_phase",
        "weighted",
        "saliency",
        "basic",
        "constrained",
        "generative",
        "relevance",
        "recent",
    }


@pytest.mark.parametrize(
    "body",
    [
        {"mode": "saliency", "current_year": 5},
        {"mode": "basic"},
        {"mode": "constrained", "profile": "MINIMAL", "arousal": 1.0},
        {"mode": "generative", "query": "flood", "generative": {"relevance": 2.0}},
        {"mode": "relevance", "query": "event"},
        {"mode": "recent", "current_time": "2024-01-03T00:00:00Z"},
        {"filter": {"kinds": ["episodic"], "year_from": 1}},
    ],
)
async def test_every_mode_answers_over_http_with_its_breakdown(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    response = await client.post(URL, json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    mode = body.get("mode", "two_phase")
    assert answer["mode"] == mode
    assert answer["results"]
    assert {r["breakdown"]["mode"] for r in answer["results"]} == {mode}


class RecordingHook:
    """Keeps what the service hands to ``on_retrieval``; ``failure`` makes it raise instead."""

    def __init__(self, failure: Exception | None = None, delay: float = 0.0) -> None:
        self.events: list[MemoryRetrieved] = []
        self.failure = failure
        self.delay = delay

    async def __call__(self, event: MemoryRetrieved) -> None:
        await asyncio.sleep(self.delay)
        if self.failure is not None:
            raise self.failure
        self.events.append(event)


async def test_a_retrieval_is_recorded_with_what_was_asked_and_returned() -> None:
    hook = RecordingHook()
    app = app_over(on_retrieval=hook)
    body = {"top_k": 2, "current_year": 5, "query": "flood", "mode": "two_phase"}
    async for client in client_for(app):
        response = await client.post(URL, json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    [event] = hook.events
    assert (event.agent_id, event.year, event.step) == (AGENT, 5, None)
    assert event.mode == "two_phase"
    # The request as the service read it, defaults included: enough to replay the retrieval.
    assert body.items() <= event.parameters.items()
    assert event.parameters["mode"] == "two_phase"
    assert RetrievalRequest.model_validate(event.parameters) == RetrievalRequest(**body)
    assert [item.model_dump() for item in event.results] == [
        {
            "memory_id": r["memory_id"],
            "rank": r["rank"],
            "score": r["score"],
            "store": r["store"],
            "level": 0,
            "breakdown": r["breakdown"],
        }
        for r in answer["results"]
    ]
    assert event.results[0].breakdown is not None
    assert event.results[0].breakdown["mode"] == "two_phase"
    assert [item.memory_id for item in event.results] == ["memory-2", "memory-1"]
    assert event.took_ms == answer["took_ms"]
    # What goes on the log decodes back to the same record: written at version 1 (a retrieval
    # of memories, which a worker of version 1 reads), read back at the current version.
    assert event.schema_version == 1
    assert decode_retrieval(encode_event(event)) == event.model_copy(update={"schema_version": 2})
    assert app.state.retrieval_audit.recorded == 1


async def test_a_step_clocked_weighted_retrieval_is_recorded_with_its_step() -> None:
    hook = RecordingHook()
    body = {"mode": "weighted", "current_step": 40, "tags": ["flood"]}
    async for client in client_for(app_over(on_retrieval=hook)):
        response = await client.post(URL, json=body)
    assert response.status_code == 200, response.text
    [event] = hook.events
    assert (event.step, event.year, event.mode) == (40, None, "weighted")
    assert event.parameters["tags"] == ["flood"]


async def test_refused_retrievals_are_not_recorded() -> None:
    hook = RecordingHook()
    app = app_over(
        working=ListWorkingMemory(failure=ProjectionError("redis down")), on_retrieval=hook
    )
    async for client in client_for(app):
        unavailable = await client.post(URL, json={})
        invalid = await client.post(URL, json={"top_k": 0})
    assert (unavailable.status_code, invalid.status_code) == (503, 422)
    assert hook.events == []


@pytest.mark.parametrize(
    ("hook", "reason"),
    [
        (RecordingHook(failure=RuntimeError("broker buffer full")), "broker buffer full"),
        (RecordingHook(delay=60), "no answer within 0.05 s"),
    ],
)
async def test_a_failing_or_hanging_hook_does_not_fail_the_retrieval(
    hook: RecordingHook, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = app_over(on_retrieval=hook, on_retrieval_timeout_s=0.05)
    async for client in client_for(app):
        response = await client.post(URL, json={"current_year": 5})
    assert response.status_code == 200, response.text
    assert [r["memory_id"] for r in response.json()["results"]] == ["memory-2", "memory-1"]
    audit = app.state.retrieval_audit
    assert (audit.recorded, audit.failed) == (0, 1)
    assert any(reason in record.getMessage() for record in caplog.records)


HISTORY_URL = f"/v1/agents/{AGENT}/history"


class StubHistory:
    """Answers every history request with a one-entry timeline, or raises ``failure``."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.failure = failure

    async def __call__(self, agent_id: str, limit: int) -> AgentHistory:
        self.calls.append((agent_id, limit))
        if self.failure is not None:
            raise self.failure
        event = MemoryRetrieved(
            agent_id=agent_id, mode="two_phase", parameters={}, results=(), took_ms=0.5
        )
        position = LogPosition(topic="memory.access", partition=0, offset=3)
        return build_timeline(agent_id, [PositionedEvent(event, position)], limit=limit)


async def test_history_is_served_from_the_reader() -> None:
    reader = StubHistory()
    async for client in client_for(app_over(history=reader)):
        default = await client.get(HISTORY_URL)
        limited = await client.get(HISTORY_URL, params={"limit": 7})
    assert default.status_code == 200, default.text
    assert reader.calls == [(AGENT, 100), (AGENT, 7)]
    history = AgentHistory.model_validate_json(default.content)
    assert history.agent_id == AGENT
    [entry] = history.entries
    assert (entry.kind, entry.position.offset) == ("retrieved", 3)
    assert history.counts["retrieved"] == 1
    assert limited.status_code == 200, limited.text


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/agents/bad%20id/history", "agent_id"),
        (f"{HISTORY_URL}?limit=0", "limit"),
        (f"{HISTORY_URL}?limit=10001", "limit"),
        (f"{HISTORY_URL}?limit=all", "limit"),
    ],
)
async def test_bad_history_request_is_refused_by_name(path: str, field: str) -> None:
    reader = StubHistory()
    async for client in client_for(app_over(history=reader)):
        response = await client.get(path)
    assert response.status_code == 422
    [message] = messages(response)
    assert message.startswith(f"{field}: ")
    assert reader.calls == []


@pytest.mark.parametrize(
    ("failure", "detail"),
    [
        (
            LogUnavailableError("cannot read the event log at k:9092: refused"),
            "event log unavailable: cannot read the event log at k:9092: refused",
        ),
        (
            TimeoutError("reading the history of H001 took longer than 15 s"),
            "event log unavailable: reading the history of H001 took longer than 15 s",
        ),
    ],
)
async def test_an_unreadable_log_is_503_with_the_reason(failure: Exception, detail: str) -> None:
    async for client in client_for(app_over(history=StubHistory(failure))):
        response = await client.get(HISTORY_URL)
    assert response.status_code == 503
    assert response.json() == {"detail": detail}


async def test_history_without_a_log_is_503() -> None:
    async for client in client_for(app_over()):
        response = await client.get(HISTORY_URL)
    assert response.status_code == 503
    assert "reads no event log" in response.json()["detail"]


async def test_openapi_documents_the_history_route(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    operation = schema["paths"]["/v1/agents/{agent_id}/history"]["get"]
    assert {"200", "422", "503"} <= set(operation["responses"])
    limit = next(p for p in operation["parameters"] if p["name"] == "limit")
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 10_000)
