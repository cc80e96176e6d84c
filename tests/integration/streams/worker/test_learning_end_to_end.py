"""Learning from feedback through the real broker, worker, Redis and HTTP: decisions and their
feedback become procedures and a cached plan, observations facts, read back over HTTP; the
history shows each change."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from projections.service.client import AsyncEngramClient
from schemas.agent_events import Decision, FactStatement, Feedback, Observation
from schemas.topics import Topics
from streams.eventlog.publisher import AsyncPublisher
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"learn{uuid.uuid4().hex[:8]}."


@pytest.fixture(scope="module")
async def node(
    kafka_bootstrap: str,
    redis_server_url: str,
    prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Node]:
    data_dir: Path = tmp_path_factory.mktemp("engram")
    settings = isolated_settings(prefix, data_dir)
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        yield node


async def test_feedback_moves_procedures_and_plans_and_facts_supersede(
    node: Node, kafka_bootstrap: str, prefix: str
) -> None:
    assert node.pipeline is not None
    assert node.http_url is not None
    household = {"agent_id": "H7", "agent_type": "household"}
    elevate = Decision(
        **household,
        year=1,
        skill="elevate",
        content="Elevate the house above the flood line",
        prompt="Protect the house from the spring flood",
        actions=({"tool": "contractor", "input": "raise 2 m", "observation": "booked"},),  # type: ignore[arg-type]
    )
    wait = Decision(**household, year=1, skill="do_nothing", content="Wait and see this year")
    events = [
        elevate,
        wait,
        Feedback(**household, year=2, target_event_id=elevate.event_id, signal=1.0),
        Feedback(**household, year=2, target_event_id=elevate.event_id, signal=0.5),
        Feedback(**household, year=2, target_event_id=wait.event_id, signal=-1.0),
        Observation(
            **household,
            year=2,
            content="The house stands 1 m high",
            fact=FactStatement(subject="house", attribute="elevation", value="1 m"),
        ),
        Observation(
            **household,
            year=3,
            content="The house stands 3 m high",
            fact=FactStatement(subject="house", attribute="elevation", value="3 m"),
        ),
    ]
    async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as publisher:
        positions = [await publisher.publish(event) for event in events]
    await node.pipeline.stats.wait_for(positions)

    async with AsyncEngramClient(node.http_url) as client:
        found = await client.procedures("H7", "elevate the house", min_success_rate=0.5)
        (procedure,) = found.procedures
        assert procedure.name == "elevate"
        assert procedure.success_rate == pytest.approx(0.595)
        assert procedure.usage_count == 2
        everything = await client.procedures("H7", min_success_rate=0.0)
        assert {p.name: round(p.success_rate, 3) for p in everything.procedures} == {
            "elevate": 0.595,
            "do_nothing": 0.45,
        }
        facts = await client.facts("H7", "house elevation", history=True)
        assert [(f.value, f.current) for f in facts.facts] == [("3 m", True), ("1 m", False)]
        hit = await client.lookup_plan("H7", "Protect the house from the spring flood")
        assert hit.hit
        assert hit.plan is not None
        assert hit.plan.decision_event_id == elevate.event_id
        assert hit.score == pytest.approx(1.0)
        miss = await client.lookup_plan("H7", "Plant tomatoes in the garden")
        assert not miss.hit
        timeline = await client.history("H7")
        assert timeline.counts["procedure"] == 5
        assert timeline.counts["plan"] == 3
        assert timeline.counts["fact"] == 2


async def test_a_kind_observed_three_times_in_a_year_becomes_a_derived_fact(
    node: Node, kafka_bootstrap: str, prefix: str
) -> None:
    """Year-end consolidation derives the fact through the broker and the worker; it reads
    back over HTTP with its origin and sources, and the history tells it."""
    assert node.pipeline is not None
    assert node.http_url is not None
    household = {"agent_id": "H8", "agent_type": "household", "importance": 0.3}
    rain = [
        Observation(**household, year=1, kind="heavy.rain", content=f"Year 1: Heavy rain ({i})")
        for i in range(3)
    ]
    events = [*rain, Observation(**household, year=2, content="Year 2: A dry spring")]
    async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as publisher:
        positions = [await publisher.publish(event) for event in events]
    await node.pipeline.stats.wait_for(positions)

    async with AsyncEngramClient(node.http_url) as client:
        (fact,) = (await client.facts("H8", "heavy rain")).facts
        assert (fact.subject, fact.attribute, fact.value) == (
            "H8",
            "recurring heavy.rain",
            "Year 1: Heavy rain (2)",
        )
        assert fact.origin == "derived"
        assert fact.source_event_ids == tuple(e.event_id for e in rain)
        timeline = await client.history("H8")
        (told,) = [e.text for e in timeline.entries if e.kind == "fact"]
        assert "a pattern of 3 observations" in told
