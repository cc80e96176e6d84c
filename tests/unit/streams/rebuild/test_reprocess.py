"""The order a reprocess gives one partition number's raw records, and its one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from processors.batch import RawRecord
from schemas.topics import Topics
from streams.cli.main import app
from streams.rebuild.reprocess import TimedRecord, derived_topics_of, group_of, merge_in_time_order
from streams.runtime.devstack.ports import free_port


def timed(topic: str, offset: int, timestamp: int) -> TimedRecord:
    return timestamp, RawRecord(topic=topic, partition=0, offset=offset, key=None, value=b"{}")


def positions(records: list[RawRecord]) -> list[tuple[str, int]]:
    return [(r.topic, r.offset) for r in records]


def test_topics_interleave_by_timestamp_and_ties_follow_the_stream_order() -> None:
    observations = [timed("obs", 0, 10), timed("obs", 1, 30)]
    ticks = [timed("tick", 0, 20), timed("tick", 1, 30)]
    access = [timed("access", 0, 5)]
    merged = merge_in_time_order([observations, ticks, access])
    assert positions(merged) == [
        ("access", 0),
        ("obs", 0),
        ("tick", 0),
        ("obs", 1),  # same timestamp as tick 1: the earlier stream first
        ("tick", 1),
    ]


def test_a_topic_keeps_its_offset_order_when_its_timestamps_go_backwards() -> None:
    """Another producer's clock may stamp a later record earlier; sorting by timestamp would
    derive an agent's events out of log order."""
    skewed = [timed("obs", 0, 50), timed("obs", 1, 10), timed("obs", 2, 60)]
    other = [timed("dec", 0, 20)]
    merged = merge_in_time_order([skewed, other])
    assert [o for t, o in positions(merged) if t == "obs"] == [0, 1, 2]
    assert positions(merged)[0] == ("dec", 0) or positions(merged)[0] == ("obs", 0)


@given(
    st.lists(
        st.lists(st.integers(min_value=0, max_value=1_000), max_size=20), min_size=1, max_size=5
    )
)
def test_the_merge_keeps_every_record_once_and_every_stream_in_order(
    stamps: list[list[int]],
) -> None:
    streams = [
        [timed(f"t{i}", offset, ts) for offset, ts in enumerate(column)]
        for i, column in enumerate(stamps)
    ]
    merged = positions(merge_in_time_order(streams))
    assert sorted(merged) == sorted(positions([r for s in streams for _, r in s]))
    for i, column in enumerate(stamps):
        assert [o for t, o in merged if t == f"t{i}"] == list(range(len(column)))


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
    assert result.exit_code == 2, result.output
    assert "cannot reach the broker at 127.0.0.1:" in result.output
    assert "Traceback" not in result.output
