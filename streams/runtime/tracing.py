"""OpenTelemetry traces of an event's way through Engram, joined by its event id.

Three spans, each carrying the event ids it concerns in ``engram.event_id(s)``:

- ``engram.publish`` (producer): the publisher puts its context in the record's ``traceparent``
  header and the event id in ``engram-event-id``;
- ``engram.batch`` (consumer, in a worker): one per batch, around deriving and applying it,
  with a link to the publish span of each of its records (up to the SDK's link limit,
  ``OTEL_SPAN_LINK_COUNT_LIMIT``, 128 by default) and every event id in ``engram.event_ids``;
- ``engram.retrieve`` (in the query service): the retrieval, with the source event ids of the
  memories it answered.

Optional twice over: without ``ENGRAM_TRACING=true``, or without the ``tracing`` extra (the
OpenTelemetry SDK and OTLP exporter), :func:`start_tracing` gives None and the processes get no
hooks, so nothing runs per event or per batch. The exporter is configured by OpenTelemetry's
own variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ...). A process whose
code installed an SDK tracer provider already keeps it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from projections.retrieval.models import RetrievalRequest, RetrievalResponse
from schemas.agent_events import AgentEvent
from streams.settings import EngramSettings

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

log = logging.getLogger("engram.tracing")

__all__ = ["EVENT_ID_HEADER", "Tracing", "start_tracing"]

EVENT_ID_HEADER = "engram-event-id"
RecordHeaders = Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None
"""A Kafka record's headers as the clients hand them over (Faust: a list or a mapping)."""


class Tracing:
    """The spans Engram's processes make; its methods are the hooks they are given."""

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry import propagate, trace

        self._tracer = tracer
        self._propagate = propagate
        self._trace = trace

    def publish_headers(self, event: AgentEvent, topic: str) -> list[tuple[str, bytes]]:
        """The headers of a record being published, from a span that marks its hand-off."""
        kind = self._trace.SpanKind.PRODUCER
        attributes = {
            "messaging.system": "kafka",
            "messaging.destination.name": topic,
            "engram.event_id": event.event_id,
            "engram.agent_id": event.agent_id,
        }
        carrier: dict[str, str] = {}
        with self._tracer.start_as_current_span("engram.publish", kind=kind, attributes=attributes):
            self._propagate.inject(carrier)
        headers = [(name, value.encode()) for name, value in carrier.items()]
        headers.append((EVENT_ID_HEADER, event.event_id.encode()))
        return headers

    @contextmanager
    def batch(self, headers: Iterable[RecordHeaders]) -> Iterator[None]:
        """Around deriving and applying one batch of records with these headers."""
        links: list[Any] = []
        event_ids: list[str] = []
        records = 0
        for record in headers:
            records += 1
            pairs = _header_map(record)
            event_id = pairs.get(EVENT_ID_HEADER)
            if event_id is not None:
                event_ids.append(event_id)
            span = self._trace.get_current_span(self._propagate.extract(pairs))
            context = span.get_span_context()
            if context.is_valid:
                links.append(self._trace.Link(context, {"engram.event_id": event_id or ""}))
        attributes: dict[str, Any] = {"engram.records": records, "engram.event_ids": event_ids}
        with self._tracer.start_as_current_span(
            "engram.batch", kind=self._trace.SpanKind.CONSUMER, links=links, attributes=attributes
        ):
            yield

    @contextmanager
    def retrieval(
        self, agent_id: str, request: RetrievalRequest
    ) -> Iterator[Callable[[RetrievalResponse], None]]:
        """Around one retrieval; the caller hands the answer to what this yields."""
        mode = "as_of" if request.as_of is not None else request.mode
        attributes: dict[str, Any] = {
            "engram.agent_id": agent_id,
            "engram.mode": mode,
            "engram.after": len(request.after),
        }
        with self._tracer.start_as_current_span(
            "engram.retrieve", kind=self._trace.SpanKind.SERVER, attributes=attributes
        ) as span:

            def answered(response: RetrievalResponse) -> None:
                span.set_attribute(
                    "engram.event_ids", [m.source_event_id for m in response.results]
                )
                span.set_attribute("engram.memory_ids", [m.memory_id for m in response.results])

            yield answered


def _header_map(headers: RecordHeaders) -> dict[str, str]:
    if not headers:
        return {}
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return {name: value.decode("utf-8", "replace") for name, value in pairs if value is not None}


def start_tracing(settings: EngramSettings, service: str) -> Tracing | None:
    """The process's tracing as ``ENGRAM_TRACING`` asks, or None (off, or the extra missing:
    said once in the log). ``service`` names the process unless ``OTEL_SERVICE_NAME`` does."""
    if not settings.tracing:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "ENGRAM_TRACING is on but the OpenTelemetry SDK is not installed "
            "(pip install 'engram[tracing]'): no traces"
        )
        return None
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning(
                "ENGRAM_TRACING is on but the OTLP exporter is not installed "
                "(pip install 'engram[tracing]'): no traces"
            )
            return None
        name = os.environ.get("OTEL_SERVICE_NAME") or service
        provider = TracerProvider(resource=Resource.create({"service.name": name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    log.info("tracing on", extra={"service": service})
    return Tracing(provider.get_tracer("engram"))
