"""The README session's services and their ports (``tests/integration/docs/session.py``): the
free ports are chosen when the session begins, and another test may take one before the service
that needs it starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.integration.docs.blocks import Block
from tests.integration.docs.session import DocSession

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_a_service_whose_port_was_taken_starts_on_another(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    session = DocSession(tmp_path, other_broker=kafka_bootstrap)
    chosen = session.addresses["127.0.0.1:8765"]
    host, port = chosen.rsplit(":", 1)
    mcp = Block("README.md", 1, "bash", ".venv/bin/engram mcp --transport http --port 8765\n", None)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
            taken.bind((host, int(port)))
            taken.listen()

            session.run(mcp)

        moved = session.addresses["127.0.0.1:8765"]
        assert moved != chosen
        assert f"MCP server on http://{moved}/mcp" in session.services[-1].text()
        assert len(session.services) == 1  # the start that failed is not kept
        session.stop()
    finally:
        session.kill()
