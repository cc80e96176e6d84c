"""`engram feedback` publishes what it is given, a negative signal too, to the real broker."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import ConsumerRecord, TopicPartition
from typer.testing import CliRunner

from schemas.codec import decode_agent_event
from schemas.topics import Topics
from streams.cli.main import app as cli
from streams.eventlog.derived_log import read_to_end
from streams.eventlog.topic_admin import ensure_topics
from streams.privacy.keyring import FileKeyring
from streams.privacy.sealing import RecordSealer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_a_negative_signal_is_an_argument_not_an_option(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """`engram feedback H001 ID -1` read -1 as an unknown option ("No such option: -1"), so
    the commonest downvote needed `--` before its arguments."""
    prefix = f"feedback{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    asyncio.run(ensure_topics(kafka_bootstrap, topics, 1))
    env = {
        "ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ENGRAM_TOPIC_PREFIX": prefix,
        "ENGRAM_DATA_DIR": str(tmp_path),
    }
    args = ["feedback", "H001", "decision-7", "-1", "--content", "the levee broke anyway"]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["topic"] == topics.feedback

    found: list[bytes | None] = []

    def keep(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        found.append(record.value)

    asyncio.run(
        read_to_end(kafka_bootstrap, [TopicPartition(topics.feedback, 0)], keep, timeout=30)
    )
    # Sealed with the agent's key from the file keyring under the data directory.
    sealer = RecordSealer(FileKeyring(tmp_path / "keyring"))
    (opened,) = asyncio.run(sealer.open_all(found))
    assert isinstance(opened, bytes), opened
    event = decode_agent_event(opened, expected_type="feedback")
    assert event.model_dump(include={"agent_id", "target_event_id", "signal", "content"}) == {
        "agent_id": "H001",
        "target_event_id": "decision-7",
        "signal": -1.0,
        "content": "the levee broke anyway",
    }
