"""The Faust application: a thin shell that feeds batches of raw records to the pipeline.

Built by ``create_processor_app`` (no global app at import time). One agent reads all three
agent topics as raw bytes, so each event costs one Faust hop (PARTS.md: ~200 us per hop).
The per-agent capacity state lives in a Faust table (changelog-backed, so a restarted or
rebalanced worker continues where the last one stopped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust
from faust.types import EventT, StreamT
from processors.batch import RawRecord
from schemas.topics import Topics

from streams.ingest import IngestPipeline
from streams.settings import EngramSettings


class TableStates:
    """The pipeline's view of the Faust table holding per-agent capacity state."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def get(self, agent_id: str) -> dict[str, Any] | None:
        value: dict[str, Any] | None = self._table.get(agent_id)
        return value

    def set(self, agent_id: str, state: dict[str, Any]) -> None:
        self._table[agent_id] = state


@dataclass
class ProcessorApp:
    app: faust.App
    topics: Topics
    bind: Any
    """Call with an :class:`IngestPipeline` factory before starting the app."""


def create_processor_app(settings: EngramSettings, bootstrap: str) -> ProcessorApp:
    topics = Topics(settings.topic_prefix)
    (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
    app = faust.App(
        f"{settings.topic_prefix}{settings.app_id}",
        broker=f"kafka://{bootstrap}",
        store="memory://",
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        producer_linger=settings.producer_linger,
        producer_max_batch_size=1 << 20,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=max(settings.session_timeout / 6, 0.5),
        broker_rebalance_timeout=max(settings.session_timeout * 2, 10.0),
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=False,
        web_enabled=False,
        datadir=str(settings.data_dir / "faust" / f"{settings.topic_prefix}{settings.app_id}"),
        table_cleanup_interval=3600.0,
    )
    source = app.topic(*topics.agent_inputs, key_serializer="raw", value_serializer="raw")
    table = app.Table(
        "agent-memory-state",
        default=None,
        partitions=settings.partitions,
        use_partitioner=True,
        key_type=str,
    )
    states = TableStates(table)
    holder: dict[str, IngestPipeline] = {}
    type_of = topics.event_type_of

    async def ingest(stream: StreamT[bytes]) -> None:
        pipeline = holder["pipeline"]
        events: list[EventT[bytes]]
        async for events in stream.take_events(settings.batch_size, within=settings.batch_within):
            records = []
            for event in events:
                message = event.message
                records.append(
                    RawRecord(
                        topic=message.topic,
                        partition=message.partition,
                        offset=message.offset,
                        key=message.key,
                        value=message.value,
                        expected_type=type_of(message.topic),
                    )
                )
            await pipeline.handle(records)

    app.agent(source, name=f"{settings.topic_prefix}ingest")(ingest)

    def bind(make_pipeline: Any) -> IngestPipeline:
        async def send(topic: str, key: bytes | None, value: bytes) -> Any:
            return await app.producer.send(
                topic, key, value, partition=None, timestamp=None, headers=None
            )

        pipeline: IngestPipeline = make_pipeline(send=send, states=states,
                                                 should_stop=lambda: app.should_stop)
        holder["pipeline"] = pipeline
        return pipeline

    return ProcessorApp(app=app, topics=topics, bind=bind)
