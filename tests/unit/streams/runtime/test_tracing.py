"""Traces join publish, batch and retrieval by event id; off (or without the extra) there are
no hooks at all."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from projections.retrieval.models import RetrievalRequest, RetrievalResponse
from schemas.agent_events import Observation
from streams.runtime.tracing import EVENT_ID_HEADER, Tracing, start_tracing
from streams.settings import EngramSettings


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Any:
    """An SDK provider with an in-memory exporter, as the process's (without touching
    OpenTelemetry's global, which can be set once per process)."""
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


def traced(tmp_path: Path) -> Tracing:
    started = start_tracing(EngramSettings(data_dir=tmp_path, tracing=True), "engram-test")
    assert started is not None
    return started


def event(agent: str = "H001") -> Observation:
    return Observation(agent_id=agent, content="the door is open")


def test_off_gives_no_hooks(tmp_path: Path) -> None:
    assert start_tracing(EngramSettings(data_dir=tmp_path), "engram-test") is None


def test_on_without_the_extra_says_so_and_gives_no_hooks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with caplog.at_level(logging.WARNING, "engram.tracing"):
        assert start_tracing(EngramSettings(data_dir=tmp_path, tracing=True), "x") is None
    assert "engram[tracing]" in caplog.text


def test_a_batch_links_the_publishes_of_its_records_by_event_id(
    exported: Any, tmp_path: Path
) -> None:
    hooks = traced(tmp_path)
    first, second = event(), event("H002")
    headers_1 = hooks.publish_headers(first, "agent.observations")
    headers_2 = dict(hooks.publish_headers(second, "agent.observations"))
    assert dict(headers_1)[EVENT_ID_HEADER] == first.event_id.encode()
    assert "traceparent" in dict(headers_1)
    # Faust hands headers over as a list or a mapping; a tick has none.
    with hooks.batch([headers_1, headers_2, None]):
        pass
    publish_1, publish_2, batch = exported.get_finished_spans()
    assert (publish_1.name, batch.name) == ("engram.publish", "engram.batch")
    assert publish_1.attributes is not None
    assert publish_1.attributes["engram.event_id"] == first.event_id
    assert batch.attributes is not None
    assert batch.attributes["engram.records"] == 3
    assert list(batch.attributes["engram.event_ids"]) == [first.event_id, second.event_id]
    linked = {link.context.span_id: link.attributes for link in batch.links}
    assert set(linked) == {publish_1.context.span_id, publish_2.context.span_id}
    assert linked[publish_2.context.span_id] == {"engram.event_id": second.event_id}


def test_a_retrieval_names_the_events_its_memories_came_from(exported: Any, tmp_path: Path) -> None:
    hooks = traced(tmp_path)
    results = (
        SimpleNamespace(source_event_id="e1", memory_id="m1"),
        SimpleNamespace(source_event_id="e2", memory_id="m2"),
    )
    with hooks.retrieval("H001", RetrievalRequest(query="door")) as answered:
        answered(cast(RetrievalResponse, SimpleNamespace(results=results)))
    (span,) = exported.get_finished_spans()
    assert span.name == "engram.retrieve"
    attributes: Any = span.attributes
    assert attributes["engram.agent_id"] == "H001"
    assert attributes["engram.mode"] == "relevance"  # a query without a mode ranks by relevance
    assert list(attributes["engram.event_ids"]) == ["e1", "e2"]
    assert list(attributes["engram.memory_ids"]) == ["m1", "m2"]
