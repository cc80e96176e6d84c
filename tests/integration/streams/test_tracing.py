"""One event's trace through a real node (processors + query service over the session's broker,
Redis and Qdrant Edge): the publish span, the span of the batch that derived and applied it
(linked to the publish through the record's headers), and the retrieval that answered a memory
of it, all naming its event id."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from schemas.agent_events import Observation
from schemas.topics import Topics
from streams.eventlog.publisher import AsyncPublisher
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The process's tracer provider, exporting to memory (OpenTelemetry's global is left as
    it is: it can be set once per process)."""
    sdk_trace = pytest.importorskip(
        "opentelemetry.sdk.trace",
        reason="the 'tracing' extra is not installed (pip install -e '.[tracing]')",
    )
    memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(sdk_trace.export.SimpleSpanProcessor(exporter))
    monkeypatch.setattr("opentelemetry.trace.get_tracer_provider", lambda: provider)
    return exporter


async def finished(exporter: Any, name: str, event_id: str) -> Any:
    """The finished span called ``name`` that names ``event_id``, waited for at most 10 s."""
    for _ in range(100):
        for span in exporter.get_finished_spans():
            ids = span.attributes.get("engram.event_ids") or ()
            if span.name == name and event_id in (*ids, span.attributes.get("engram.event_id")):
                return span
        await asyncio.sleep(0.1)
    raise AssertionError(f"no finished {name} span names {event_id}")


async def test_publish_batch_and_retrieval_are_joined_by_event_id(
    exported: Any, kafka_bootstrap: str, redis_server_url: str, tmp_path: Path
) -> None:
    prefix = f"traces{uuid.uuid4().hex[:8]}."
    settings = isolated_settings(prefix, tmp_path).model_copy(update={"tracing": True})
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        assert node.tracing is not None
        assert node.http_url is not None
        event = Observation(
            agent_id="H001",
            agent_type="household",
            year=1,
            kind="flood.major",
            content="Year 1: the water reached the porch",
            importance=0.9,
        )
        async with AsyncPublisher(
            kafka_bootstrap, topics=Topics(prefix), headers=node.tracing.publish_headers
        ) as publisher:
            position = await publisher.publish(event)
        after = [
            {"topic": position.topic, "partition": position.partition, "offset": position.offset}
        ]
        async with httpx.AsyncClient(base_url=node.http_url, timeout=60.0) as http:
            answer = await http.post(
                "/v1/agents/H001/retrieve",
                json={"after": after, "wait_timeout_ms": 30_000, "current_year": 1},
            )
        assert answer.status_code == 200, answer.text
        assert [m["source_event_id"] for m in answer.json()["results"]] == [event.event_id]
        publish = await finished(exported, "engram.publish", event.event_id)
        batch = await finished(exported, "engram.batch", event.event_id)
        retrieve = await finished(exported, "engram.retrieve", event.event_id)
    assert publish.context.span_id in {link.context.span_id for link in batch.links}
    assert retrieve.attributes["engram.agent_id"] == "H001"
