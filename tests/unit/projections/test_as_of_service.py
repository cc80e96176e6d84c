"""The query service's ``as_of``: handed to the deployment's recall, never recorded, refused
with the status that says why."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

import pytest

from projections.history import LogUnavailableError
from projections.retrieval.as_of import AsOfNotInLogError
from projections.retrieval.models import AsOfPosition, RetrievalRequest, RetrievalResponse
from projections.retrieval.scoring import Clock
from schemas.memory_events import MemoryRetrieved
from schemas.topics import Topics
from tests.unit.projections.test_read_your_writes import (
    AGENT,
    MarkedEpisodic,
    MarkedWorking,
    app_over,
    client_for,
    post,
)

TOPICS = Topics("tenant-a.")
WHEN = "2026-03-01T10:00:00+00:00"


class Recall:
    """What the deployment injects, answering from a memory it was told to have."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.asked: list[tuple[str, RetrievalRequest]] = []
        self.failure = failure

    @property
    def point_topics(self) -> Collection[str]:
        return (*TOPICS.agent_inputs, TOPICS.items, TOPICS.lifecycle)

    async def __call__(self, agent_id: str, request: RetrievalRequest) -> RetrievalResponse:
        self.asked.append((agent_id, request))
        if self.failure is not None:
            raise self.failure
        return RetrievalResponse(
            agent_id=agent_id,
            mode=request.mode,
            clock=Clock("seq", 0),
            working_count=0,
            episodic_count=0,
            results=(),
            took_ms=1.0,
        )


async def test_as_of_is_answered_by_the_recall_and_not_recorded() -> None:
    recall, records = Recall(), list[MemoryRetrieved]()

    async def record(event: MemoryRetrieved) -> None:
        records.append(event)

    app = app_over(MarkedWorking(), MarkedEpisodic(), recall=recall, on_retrieval=record)
    position = {"topic": TOPICS.items, "partition": 1, "offset": 7}
    for as_of, expected in (
        (WHEN, datetime(2026, 3, 1, 10, tzinfo=UTC)),
        (position, AsOfPosition(**position)),
    ):
        response = await post(app, {"top_k": 3, "as_of": as_of})
        assert response.status_code == 200, response.text
        assert recall.asked[-1][0] == AGENT
        assert recall.asked[-1][1].as_of == expected
    assert records == []
    assert (await post(app, {"top_k": 3})).status_code == 200
    assert len(records) == 1


@pytest.mark.parametrize(
    ("failure", "status", "said"),
    [
        (
            AsOfNotInLogError("past the end", log_end=4),
            409,
            {"detail": "past the end", "log_end": 4},
        ),
        (AsOfNotInLogError("in the future"), 409, {"detail": "in the future", "log_end": None}),
        (
            LogUnavailableError("broker down"),
            503,
            {"detail": "event log unavailable: broker down"},
        ),
        (TimeoutError("too slow"), 503, {"detail": "event log unavailable: too slow"}),
    ],
)
async def test_a_recall_that_fails_says_why(
    failure: Exception, status: int, said: dict[str, object]
) -> None:
    app = app_over(MarkedWorking(), MarkedEpisodic(), recall=Recall(failure))
    response = await post(app, {"as_of": WHEN})
    assert response.status_code == status, response.text
    assert response.json() == said


async def test_without_a_recall_as_of_is_unavailable() -> None:
    response = await post(app_over(MarkedWorking(), MarkedEpisodic()), {"as_of": WHEN})
    assert response.status_code == 503
    assert "reads no event log" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"as_of": "yesterday"}, "as_of"),
        ({"as_of": "2026-03-01T10:00:00"}, "as_of"),  # a time without its offset
        ({"as_of": {"topic": "x", "partition": 0}}, "as_of"),
        (
            {"as_of": WHEN, "after": [{"topic": TOPICS.observations, "partition": 0, "offset": 1}]},
            "give one of them",
        ),
    ],
)
async def test_a_malformed_as_of_is_refused_naming_it(body: dict[str, object], field: str) -> None:
    recall = Recall()
    response = await post(app_over(MarkedWorking(), MarkedEpisodic(), recall=recall), body)
    assert response.status_code == 422, response.text
    assert field in response.text
    assert recall.asked == []


async def test_the_document_names_the_topics_a_point_may_name() -> None:
    app = app_over(MarkedWorking(), MarkedEpisodic(), recall=Recall())
    async for client in client_for(app):
        schema = (await client.get("/openapi.json")).json()
    topic = schema["components"]["schemas"]["AsOfPosition"]["properties"]["topic"]
    assert topic["enum"] == sorted(Recall().point_topics)
    request = schema["components"]["schemas"]["RetrievalRequest"]
    assert {"$ref": "#/components/schemas/AsOfPosition"} in request["properties"]["as_of"]["anyOf"]
    assert {
        "not": {
            "required": ["as_of", "after"],
            "properties": {"as_of": {"not": {"type": "null"}}, "after": {"minItems": 1}},
        }
    } in request["allOf"]
