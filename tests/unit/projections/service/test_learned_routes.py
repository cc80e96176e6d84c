"""``POST /v1/agents/{agent_id}/tools/select`` and the clients' ``select_tool``: seed 002's
example over HTTP, the refusals of bad input by field, and the document that describes both.
The app is the real one (its learned memory over a :class:`FieldStore`), reached in process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from projections.learned.reads import MAX_EXCLUDED_TOOLS, ToolChoice
from projections.service.client import AsyncEngramClient, EngramClient
from tests.unit.projections.learned.learning_agents import (
    ATTRIBUTE_TOOL,
    HEALTH,
    SPEED,
    FieldStore,
    seed_tools,
)
from tests.unit.projections.test_service_validation import app_over, messages

BASE = "http://engram.test"
URL = "/v1/agents/P1/tools/select"


@pytest.fixture
def store() -> FieldStore:
    store = FieldStore()
    seed_tools(store)
    return store


@pytest.fixture
async def client(store: FieldStore) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app_over(learned=store.memory()))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        yield client


async def test_the_seed_prompts_are_selected_or_missed(client: httpx.AsyncClient) -> None:
    speed = await client.post(URL, json={"prompt": SPEED})
    assert speed.status_code == 200, speed.text
    selected = ToolChoice.model_validate(speed.json())
    assert (selected.reason, selected.threshold) == ("selected", 0.4)
    assert selected.selected is not None
    assert selected.selected.name == ATTRIBUTE_TOOL
    assert selected.similarity == pytest.approx(0.4721, abs=1e-4)

    health = await client.post(URL, json={"prompt": HEALTH, "exclude": []})
    missed = ToolChoice.model_validate(health.json())
    assert (missed.reason, missed.selected) == ("below_threshold", None)
    assert missed.closest is not None
    assert missed.closest.name == ATTRIBUTE_TOOL


async def test_exclude_and_min_similarity_reach_the_selection(client: httpx.AsyncClient) -> None:
    excluded = await client.post(URL, json={"prompt": SPEED, "exclude": [ATTRIBUTE_TOOL]})
    assert excluded.json()["reason"] == "all_excluded"
    lowered = await client.post(URL, json={"prompt": HEALTH, "min_similarity": 0.25})
    assert (lowered.json()["reason"], lowered.json()["threshold"]) == ("selected", 0.25)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "prompt: Field required"),
        ({"prompt": ""}, "prompt: String should have at least 1 character"),
        ({"prompt": " \n\t"}, "prompt: must not be blank (whitespace alone)"),
        ({"prompt": SPEED, "min_similarity": 1.5}, "min_similarity: Input should be less than"),
        ({"prompt": SPEED, "min_similarity": "high"}, "min_similarity: Input should be a valid"),
        ({"prompt": SPEED, "exclude": ATTRIBUTE_TOOL}, "exclude: Input should be a valid"),
        ({"prompt": SPEED, "exclude": [""]}, "exclude.0: String should have at least 1"),
        ({"prompt": SPEED, "exclude": ["x" * 129]}, "exclude.0: String should have at most 128"),
        (
            {"prompt": SPEED, "exclude": [f"t{i}" for i in range(MAX_EXCLUDED_TOOLS + 1)]},
            f"exclude: Tuple should have at most {MAX_EXCLUDED_TOOLS} items",
        ),
        ({"prompt": SPEED, "top_k": 3}, "top_k: Extra inputs are not permitted"),
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], message: str
) -> None:
    response = await client.post(URL, json=body)
    assert response.status_code == 422
    [said] = messages(response)
    assert said.startswith(message), said


async def test_a_bad_agent_id_and_a_body_that_is_not_json_are_refused(
    client: httpx.AsyncClient,
) -> None:
    bad_agent = await client.post("/v1/agents/a%20b/tools/select", json={"prompt": SPEED})
    assert bad_agent.status_code == 422
    assert messages(bad_agent)[0].startswith("agent_id:")
    not_json = await client.post(
        URL, content=b"{prompt", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 422


async def test_without_learned_memory_the_route_answers_503() -> None:
    transport = httpx.ASGITransport(app=app_over())
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        response = await client.post(URL, json={"prompt": SPEED})
    assert response.status_code == 503
    assert "learned memory unavailable" in response.json()["detail"]


async def test_the_document_describes_the_request_and_the_answer(
    client: httpx.AsyncClient,
) -> None:
    document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/v1/agents/{agent_id}/tools/select"]["post"]
    assert {"200", "422"} <= set(operation["responses"])
    assert operation["tags"] == ["learned"]
    schemas = document["components"]["schemas"]
    request = schemas["ToolSelectRequest"]
    assert request["additionalProperties"] is False
    assert request["required"] == ["prompt"]
    similarity = request["properties"]["min_similarity"]
    assert (similarity["default"], similarity["minimum"], similarity["maximum"]) == (0.4, -1, 1)
    assert request["properties"]["exclude"]["maxItems"] == MAX_EXCLUDED_TOOLS
    reasons = schemas["ToolChoice"]["properties"]["reason"]["enum"]
    assert reasons == ["selected", "below_threshold", "no_tools", "all_excluded"]


async def test_the_async_client_answers_what_the_memory_reads(store: FieldStore) -> None:
    transport = httpx.ASGITransport(app=app_over(learned=store.memory()))
    async with AsyncEngramClient(BASE, transport=transport) as client:
        answered = await client.select_tool("P1", HEALTH, exclude=["Unknown"], min_similarity=0.2)
    read = await store.memory().select_tool("P1", HEALTH, exclude=["Unknown"], min_similarity=0.2)
    assert answered == read
    assert answered.reason == "selected"


def test_the_sync_client_sends_the_body_and_leaves_the_default_to_the_service() -> None:
    sent: list[dict[str, Any]] = []
    answer = ToolChoice(
        reason="no_tools", selected=None, closest=None, similarity=None, threshold=0.4
    )

    def service(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        assert request.url.path == URL
        return httpx.Response(200, text=answer.model_dump_json())

    with EngramClient(BASE, transport=httpx.MockTransport(service)) as client:
        assert client.select_tool("P1", SPEED) == answer
        client.select_tool("P1", SPEED, exclude=(t for t in ["a", "b"]), min_similarity=0.5)
        with pytest.raises(TypeError, match=r"exclude=\['SetPlayerAttribute'\]"):
            client.select_tool("P1", SPEED, exclude=ATTRIBUTE_TOOL)
    assert sent == [
        {"prompt": SPEED, "exclude": []},
        {"prompt": SPEED, "exclude": ["a", "b"], "min_similarity": 0.5},
    ]
