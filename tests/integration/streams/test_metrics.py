"""``/metrics`` after real traffic: a node (processors + query service) over the session's broker,
Redis and Qdrant Edge takes events (one of them not JSON) and answers retrievals; the scrape
shows the counters moved. The worker's own port (``engram worker``) serves the same registry.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from schemas.agent_events import Observation
from schemas.topics import Topics
from streams.eventlog.kafka_clients import record_producer
from streams.eventlog.publisher import AsyncPublisher
from streams.runtime.metrics_server import MetricsServer
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
async def node(
    kafka_bootstrap: str, redis_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Node]:
    prefix = f"metrics{uuid.uuid4().hex[:8]}."
    data_dir: Path = tmp_path_factory.mktemp("engram")
    settings = isolated_settings(prefix, data_dir)
    async with Node(settings, Endpoints(kafka_bootstrap, redis_server_url)) as node:
        yield node


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_the_counters_move_with_real_traffic(node: Node, kafka_bootstrap: str) -> None:
    assert node.http_url is not None
    assert node.pipeline is not None
    topics = Topics(node.settings.topic_prefix)
    producer = record_producer(kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topics.observations, b"not json", key=b"H001")
    finally:
        await producer.stop()
    async with AsyncPublisher(kafka_bootstrap, topics=topics) as publisher:
        positions = await publisher.publish_many(
            [
                Observation(
                    agent_id="H001",
                    agent_type="household",
                    year=year,
                    kind="flood.major",
                    content=f"Year {year}: the water reached the porch",
                    importance=0.9,
                )
                for year in (1, 2, 3)
            ]
        )
    after = [{"topic": p.topic, "partition": p.partition, "offset": p.offset} for p in positions]
    async with httpx.AsyncClient(base_url=node.http_url, timeout=60.0) as http:
        waited = await http.post(
            "/v1/agents/H001/retrieve",
            json={"after": after, "wait_timeout_ms": 30_000, "current_year": 3},
        )
        assert waited.status_code == 200, waited.text
        relevance = await http.post(
            "/v1/agents/H001/retrieve", json={"mode": "relevance", "query": "flood water"}
        )
        assert relevance.status_code == 200, relevance.text
        scraped = await http.get("/metrics")
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    found = samples(scraped.text)

    def value(name: str, **labels: str) -> float:
        return found[(name, tuple(sorted(labels.items())))]

    assert value("engram_worker_events_total") >= 4
    assert value("engram_worker_batches_total") >= 1
    assert value("engram_worker_derived_total", topic=topics.items) >= 3
    assert value("engram_worker_dead_letters_total", kind="not_json") == 1
    assert value("engram_worker_batch_seconds_count") >= 1
    assert value("engram_worker_takeovers_total") >= 1
    observed = [(n, dict(labels)) for n, labels in found if n == "engram_worker_consumer_lag"]
    assert observed, "no consumer lag reported"
    assert all(labels["topic"].startswith(topics.prefix) for _, labels in observed)
    assert (
        value(
            "engram_worker_input_offset",
            topic=topics.observations,
            partition=str(positions[0].partition),
        )
        >= positions[0].offset
    )
    assert value("engram_retrieval_seconds_count", mode="two_phase") == 1
    assert value("engram_retrieval_seconds_count", mode="relevance") == 1
    assert value("engram_read_your_writes_waits_total") == 1
    assert value("engram_read_your_writes_timeouts_total") == 0
    assert value("engram_projection_version_info", version="(unversioned)") == 1


async def test_a_worker_serves_the_same_registry_on_its_own_port(node: Node) -> None:
    server = await MetricsServer(node.metrics, host="127.0.0.1", port=0).start()
    try:
        async with httpx.AsyncClient() as http:
            scraped = await http.get(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        await server.stop()
    assert scraped.status_code == 200
    assert "engram_worker_batches_total" in scraped.text
