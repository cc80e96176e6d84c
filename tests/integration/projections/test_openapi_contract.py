"""The HTTP contract is the OpenAPI document: Schemathesis, run against a live query service,
finds no server error, no request the document calls valid refused, and no answer that breaks
the document's response schemas.

One node (processors + query service) runs for the module over the session's broker, Redis and
Qdrant Edge, with memories recorded for the agent of the document's examples, so retrievals
rank real memories rather than an empty store. Schemathesis runs as its command line does for
a user, in a process of its own (its requests block; the node serves them on this test's event
loop meanwhile), in its deterministic mode so a failure in CI reproduces.

What the document promises about read your writes on the real broker (a position the log does
not hold is refused at once) is tested with the rest of read your writes, in
``tests/integration/streams/rebuild/test_read_your_writes.py``.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from schemas.agent_events import Decision, Observation
from schemas.topics import Topics
from streams.eventlog.publisher import AsyncPublisher
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SCHEMATHESIS = [sys.executable, "-m", "schemathesis.cli", "run"]

CONFIG = """\
continue-on-failure = true
request-timeout = 40
workers = 1

[generation]
mode = "positive"
deterministic = true
max-examples = 20

[checks]
enabled = false
not_a_server_error.enabled = true
positive_data_acceptance.enabled = true
response_schema_conformance.enabled = true

[[operations]]
include-path = "/v1/agents/{agent_id}/retrieve"
generation.max-examples = 150
"""
"""No 5xx; a request the document calls valid is not refused (a 2xx, or a status that depends
on state, such as 404 or 409); every answer matches the schema the document gives it. The
retrieval, whose request has the most to get wrong, gets the most examples; a history read
takes ~0.2 s of the broker's time, so it gets fewer."""

RUN_TIMEOUT_S = 180.0

AGENT = "H001"
"""The agent of the document's examples, so the examples phase retrieves real memories."""


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"oapi{uuid.uuid4().hex[:8]}."


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


@pytest.fixture(scope="module")
async def remembered(node: Node, kafka_bootstrap: str, prefix: str) -> None:
    """An episodic and a working memory for :data:`AGENT`, applied by both stores."""
    assert node.pipeline is not None
    async with AsyncPublisher(kafka_bootstrap, topics=Topics(prefix)) as publisher:
        positions = await publisher.publish_many(
            [
                Observation(
                    agent_id=AGENT,
                    agent_type="household",
                    year=3,
                    kind="flood.major",
                    tags=("flood",),
                    content="Year 3: A major flood caused $60,000 in damages",
                ),
                Decision(
                    agent_id=AGENT,
                    agent_type="household",
                    year=4,
                    skill="do_nothing",
                    content="Year 4: I chose to wait and not take protective action",
                ),
            ]
        )
    await node.pipeline.stats.wait_for(positions)


async def test_the_live_service_keeps_its_openapi_document(
    node: Node, remembered: None, tmp_path: Path
) -> None:
    assert node.http_url is not None
    async with httpx.AsyncClient(base_url=node.http_url) as http:
        found = await http.post(f"/v1/agents/{AGENT}/retrieve", json={"current_year": 4})
    assert found.status_code == 200
    assert len(found.json()["results"]) == 2
    (tmp_path / "schemathesis.toml").write_text(CONFIG)

    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *SCHEMATHESIS,
        f"{node.http_url}/openapi.json",
        "--no-color",
        cwd=tmp_path,  # where it finds its configuration, and writes nothing into the repo
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            output, _ = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    took = time.monotonic() - started
    report = output.decode(errors="replace")
    assert process.returncode == 0, f"schemathesis failed after {took:.1f} s:\n{report}"
    assert "No issues found" in report, report
