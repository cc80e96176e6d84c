"""The demo of the README, on the real stack: households recall their floods, and the Year-11
trace of seed 003 comes out as the seed computes it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from projections.service.client import AsyncEngramClient
from schemas.topics import Topics
from streams.demo import TRACE_AGENT, run_demo
from streams.eventlog.publisher import AsyncPublisher
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
async def node(kafka_bootstrap: str, redis_server_url: str, tmp_path: Path) -> AsyncIterator[Node]:
    prefix = f"demo{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path)
    started = await Node(settings, Endpoints(kafka_bootstrap, redis_server_url)).start()
    try:
        yield started
    finally:
        await started.stop()


async def test_the_flood_households_recall_their_floods_and_the_trace_reproduces(
    node: Node, kafka_bootstrap: str
) -> None:
    assert node.pipeline is not None
    assert node.http_url is not None
    topics = Topics(node.settings.topic_prefix)
    async with (
        AsyncPublisher(kafka_bootstrap, topics=topics, linger=0.005) as publisher,
        AsyncEngramClient(node.http_url) as client,
    ):
        outcome = await run_demo(publisher, client, node.pipeline.stats, households=3, years=3)

    # Year 1 flooded everyone; in year 2 each household recalls it from episodic memory, with
    # the 0.95-per-year decay of seed 004 applied to the 0.9 of a major flood.
    for house in ("H001", "H002", "H003"):
        recalled = outcome.recalls[(house, 2)].results
        floods = [m for m in recalled if "major flood" in m.content and m.store == "episodic"]
        assert floods, [m.content for m in recalled]
        assert floods[0].score == pytest.approx(0.9 * 0.95)
        assert outcome.decisions[(house, 1)] == "buy_insurance"

    # The summaries shown are the ones the log says were made, and the history has every
    # recall the demo made (one per year) and a consolidation per year ended with memories.
    assert outcome.summaries is not None
    assert outcome.history is not None
    made = [e.memory_id for e in outcome.history.entries if e.kind == "summarised"]
    assert {m.memory_id for m in outcome.summaries.results} == set(made[-3:])
    assert outcome.history.counts["retrieved"] >= 3
    assert 1 <= outcome.history.counts["consolidated"] <= 2

    # Year 1's decisions answered the yearly request, so year 2 finds their plans cached; the
    # year-3 flood is feedback on year 2's decisions, which moves their procedures' rates.
    assert all(outcome.plan_lookups[(house, 2)].hit for house in ("H001", "H002", "H003"))
    assert not outcome.plan_lookups[("H001", 1)].hit
    rates = {
        p.success_rate for procedures in outcome.procedures.values() for p in procedures.procedures
    }
    assert rates - {0.5}, rates
    assert outcome.history.counts["procedure"] >= 3

    trace = outcome.trace
    assert trace is not None
    assert trace.agent_id == TRACE_AGENT
    first, second = trace.results
    assert first.content.startswith("Year 1: A massive flood")
    assert first.score == pytest.approx(0.384, abs=1e-3)
    assert second.score == pytest.approx(0.315, abs=1e-3)
