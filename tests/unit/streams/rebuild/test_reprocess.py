"""Where a reprocess writes, and its one-line errors. The order and the batches it derives in
are :mod:`processors.batch_order`'s (``tests/unit/processors/test_batch_order.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schemas.topics import Topics
from streams.cli.console import UNREACHABLE
from streams.cli.main import app
from streams.rebuild.reprocess import derived_topics_of, group_of
from streams.runtime.devstack.ports import free_port


def test_the_derived_log_of_a_version_sits_beside_the_live_topics() -> None:
    derived = derived_topics_of(Topics("tenant."), "v3")
    assert derived.items == "tenant.v3.memory.items"
    assert derived.all() == (
        "tenant.v3.memory.items",
        "tenant.v3.memory.lifecycle",
        "tenant.v3.memory.deadletter",
    )
    # The raw topics stay the live ones: a tick's derived events are recognised as a tick's
    # when the state is folded back, and workers continuing the version read these.
    assert derived.schedule == "tenant.memory.schedule"
    assert derived.observations == "tenant.agent.observations"
    assert group_of(Topics("tenant."), "engram", "v3") == "tenant.engram.v3"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "ENGRAM_KAFKA_BOOTSTRAP and ENGRAM_REDIS_URL"),
        (
            {
                "ENGRAM_KAFKA_BOOTSTRAP": "x:1",
                "ENGRAM_REDIS_URL": "redis://x:1",
                "ENGRAM_EMBEDDER": "w2v",
            },
            "unknown embedder 'w2v'",
        ),
        (
            {
                "ENGRAM_KAFKA_BOOTSTRAP": "x:1",
                "ENGRAM_REDIS_URL": "redis://x:1",
                "ENGRAM_EPISODIC_THRESHOLD": "2",
            },
            "episodic_threshold",
        ),
        (
            {
                "ENGRAM_KAFKA_BOOTSTRAP": "x:1",
                "ENGRAM_REDIS_URL": "redis://x:1",
                "ENGRAM_AGENT_TYPES": "/nonexistent/profiles.yaml",
            },
            "profiles.yaml",
        ),
    ],
)
def test_a_bad_configuration_is_one_readable_error(
    env: dict[str, str], message: str, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        app, ["reprocess"], env={"ENGRAM_QDRANT_PATH": str(tmp_path), **env}
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_an_unreachable_broker_is_one_readable_error(tmp_path: Path) -> None:
    env = {
        "ENGRAM_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",
        "ENGRAM_REDIS_URL": f"redis://127.0.0.1:{free_port()}",
        "ENGRAM_QDRANT_PATH": str(tmp_path),
        # Otherwise the keyring's location is read from the (unreachable) Redis first.
        "ENGRAM_KEYRING": "off",
    }
    result = CliRunner().invoke(app, ["reprocess"], env=env)
    assert result.exit_code == UNREACHABLE, result.output  # worth another attempt
    assert "cannot reach the broker at 127.0.0.1:" in result.output
    assert "Traceback" not in result.output
