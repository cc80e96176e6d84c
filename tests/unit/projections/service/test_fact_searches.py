"""Seed 000's ``access_count`` through the query service: a facts read with a query (the
seed's ``search``) is recorded like a retrieval, the processors count it on the facts it
returned, and ``GET .../facts``, the async client and the MCP ``recall_fact`` tool show the
count. The app is the real one over a :class:`FieldStore`, reached in process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from mcp import Client

from projections.learned.reads import Facts
from projections.service.client import AsyncEngramClient
from projections.service.mcp_server import create_mcp_server
from projections.service.tools import ToolContext, memory_tools
from schemas.codec import decode_retrieval, encode_event
from schemas.memory_events import FACTS_READ_MODE
from tests.unit.projections.learned.learning_agents import FieldStore, LearningAgent
from tests.unit.projections.test_memory_tools import text_of
from tests.unit.projections.test_service_validation import RecordingHook, app_over

pytestmark = pytest.mark.timeout(60)

BASE = "http://engram.test"
URL = "/v1/agents/P1/facts"


@pytest.fixture
def store() -> FieldStore:
    return FieldStore()


@pytest.fixture
def agent(store: FieldStore) -> LearningAgent:
    """P1 knows its house's roof and the premium of its flood insurance."""
    agent = LearningAgent(store, "P1")
    agent.state_fact("house", "roof", "clay tiles")
    agent.state_fact("flood insurance", "premium", "$1,200 a year")
    return agent


@asynccontextmanager
async def client_over(
    store: FieldStore, hook: RecordingHook | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    app = app_over(learned=store.memory(), on_retrieval=hook)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as c:
        yield c


async def test_a_read_with_a_query_is_recorded_and_a_listing_is_not(
    store: FieldStore, agent: LearningAgent
) -> None:
    hook = RecordingHook()
    async with client_over(store, hook) as client:
        searched = await client.get(URL, params={"query": "flood insurance premium", "top_k": 2})
        listed = await client.get(URL)
    assert (searched.status_code, listed.status_code) == (200, 200)
    [record] = hook.events
    answer = Facts.model_validate(searched.json())
    assert record.mode == FACTS_READ_MODE
    assert record.agent_id == "P1"
    assert record.parameters == {
        "query": "flood insurance premium",
        "top_k": 2,
        "history": False,
        "min_confidence": 0.0,
    }
    assert [(i.memory_id, i.rank, i.score, i.store) for i in record.results] == [
        (fact.fact_id, rank, fact.score, "facts") for rank, fact in enumerate(answer.facts, 1)
    ]
    assert len(record.results) == 2
    assert decode_retrieval(encode_event(record)) == record, "what goes on memory.access"


async def test_the_counts_read_back_once_the_processors_counted_the_searches(
    store: FieldStore, agent: LearningAgent
) -> None:
    """Two searches that return the premium only: 2 on it, 0 on the roof, never searched."""
    hook = RecordingHook()
    app = app_over(learned=store.memory(), on_retrieval=hook)
    async with AsyncEngramClient(BASE, transport=httpx.ASGITransport(app=app)) as client:
        for _ in range(2):
            found = await client.facts("P1", "flood insurance premium", top_k=1)
            assert [f.attribute for f in found.facts] == ["premium"]
        assert {f.attribute: f.access_count for f in (await client.facts("P1")).facts} == {
            "roof": 0,
            "premium": 0,
        }, "counted by the processors, not by the read"
        agent.searched(*hook.events)
        counts = {f.attribute: f.access_count for f in (await client.facts("P1")).facts}
    assert counts == {"premium": 2, "roof": 0}
    assert len(hook.events) == 2, "the listings were not recorded"


async def test_a_superseded_fact_keeps_the_count_it_had(
    store: FieldStore, agent: LearningAgent
) -> None:
    hook = RecordingHook()
    async with client_over(store, hook) as client:
        await client.get(URL, params={"query": "house roof", "top_k": 1})
        agent.searched(*hook.events)
        agent.state_fact("house", "roof", "slate")
        await client.get(URL, params={"query": "house roof", "top_k": 5, "history": True})
        agent.searched(hook.events[-1])
        facts = Facts.model_validate((await client.get(URL, params={"history": True})).json())
    roofs = {f.value: (f.current, f.access_count) for f in facts.facts if f.attribute == "roof"}
    assert roofs == {"clay tiles": (False, 1), "slate": (True, 1)}


async def test_a_search_is_answered_whatever_becomes_of_its_record(
    store: FieldStore, agent: LearningAgent
) -> None:
    failing = RecordingHook(failure=RuntimeError("broker buffer full"))
    app = app_over(learned=store.memory(), on_retrieval=failing)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as c:
        answered = await c.get(URL, params={"query": "premium"})
    assert answered.status_code == 200
    assert (app.state.retrieval_audit.recorded, app.state.retrieval_audit.failed) == (0, 1)

    hook = RecordingHook()
    without = app_over(on_retrieval=hook)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=without), base_url=BASE) as c:
        refused = await c.get(URL, params={"query": "premium"})
    assert refused.status_code == 503
    assert hook.events == [], "an unanswered search is no use of a fact"


async def test_recall_fact_tells_the_model_how_often_each_fact_was_searched(
    store: FieldStore, agent: LearningAgent
) -> None:
    hook = RecordingHook()
    app = app_over(learned=store.memory(), on_retrieval=hook)
    async with (
        AsyncEngramClient(BASE, transport=httpx.ASGITransport(app=app)) as service,
        Client(create_mcp_server(memory_tools(), ToolContext(service))) as mcp,
    ):
        await mcp.call_tool("recall_fact", {"agent_id": "P1", "query": "premium", "limit": 1})
        agent.searched(*hook.events)
        result = await mcp.call_tool("recall_fact", {"agent_id": "P1", "query": "insurance"})
    assert not result.is_error, text_of(result)
    answer = Facts.model_validate(result.structured_content)
    assert {f.attribute: f.access_count for f in answer.facts} == {"premium": 1, "roof": 0}
    lines = text_of(result).splitlines()
    assert "- flood insurance premium: $1,200 a year (returned by 1 earlier search)" in lines
    assert "- house roof: clay tiles (no earlier search returned it)" in lines
    assert [r.mode for r in hook.events] == [FACTS_READ_MODE, FACTS_READ_MODE]


async def test_a_fact_superseded_without_its_end_is_listed_not_a_failure() -> None:
    """Past the pairs the worker tracks, a replaced fact has no end: ``recall_fact`` with
    history formatted its missing end as a date and failed (TypeError)."""
    store = FieldStore()
    LearningAgent(store, "P1").state_fact("user", "city", "Paris")
    forgetful = LearningAgent(store, "P1")  # its state keeps no Paris to replace
    forgetful.n = 1
    forgetful.state_fact("user", "city", "Berlin")
    app = app_over(learned=store.memory())
    async with (
        AsyncEngramClient(BASE, transport=httpx.ASGITransport(app=app)) as service,
        Client(create_mcp_server(memory_tools(), ToolContext(service))) as mcp,
    ):
        result = await mcp.call_tool(
            "recall_fact", {"agent_id": "P1", "query": "user city", "history": True}
        )
    assert not result.is_error, text_of(result)
    lines = text_of(result).splitlines()
    assert "- user city: Paris (superseded) (no earlier search returned it)" in lines
    assert "- user city: Berlin (no earlier search returned it)" in lines
