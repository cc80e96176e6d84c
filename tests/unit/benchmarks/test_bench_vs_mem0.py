"""What the mem0 comparison gives mem0, how it reads the child's report, and its network guard."""

from __future__ import annotations

import json
import socket

import pytest

from schemas.agent_events import Decision, Observation
from tests.benchmarks.bench_vs_mem0 import (
    BenchmarkError,
    mem0_record,
    parse_child_report,
    requirement_version,
)
from tests.benchmarks.mem0_child import NETWORK_ATTEMPTS, refuse_network


def test_an_observation_reaches_mem0_as_its_text_scoped_to_its_agent() -> None:
    event = Observation(agent_id="H00042", year=3, kind="flood.major", content="Water everywhere")
    record = mem0_record(event)
    assert record["text"] == "Water everywhere"
    assert record["agent_id"] == "H00042"
    assert record["metadata"] == {
        "event_id": str(event.event_id),
        "event_type": "observation",
        "agent_type": "default",
        "year": 3,
        "kind": "flood.major",
    }
    assert json.loads(json.dumps(record)) == record


def test_a_decision_carries_its_skill_and_no_absent_kind() -> None:
    event = Decision(agent_id="H00007", skill="elevate_house", content="I will elevate")
    metadata = mem0_record(event)["metadata"]
    assert metadata["skill"] == "elevate_house"
    assert metadata["year"] is None
    assert "kind" not in metadata


@pytest.mark.parametrize(
    ("requirement", "pinned"),
    [("mem0ai==2.2.1", "2.2.1"), ("mem0ai", None), ("mem0ai>=2", None), ("mem0ai==", None)],
)
def test_only_an_exact_pin_names_the_version_to_reuse(requirement: str, pinned: str | None) -> None:
    assert requirement_version(requirement) == pinned


def report(**changes: object) -> str:
    fields = {
        "adds": 10,
        "seconds": 2.0,
        "splits": [[5, 1.0], [10, 2.0]],
        "stored": 20,
        "version": "2.2.1",
        "network": [],
    }
    return "a warning line\n" + json.dumps({**fields, **changes}) + "\n"


def test_the_report_is_the_childs_last_line() -> None:
    result = parse_child_report(report())
    assert result.rate == 5.0
    assert result.splits == [(5, 1.0), (10, 2.0)]


def test_a_run_that_tried_the_network_is_no_measurement() -> None:
    with pytest.raises(BenchmarkError, match="network"):
        parse_child_report(report(network=["getaddrinfo 'example.org'"]))
    with pytest.raises(BenchmarkError, match="no report"):
        parse_child_report("")


def test_the_child_refuses_and_records_network_connections_but_not_local_sockets() -> None:
    NETWORK_ATTEMPTS.clear()
    with socket.socket(socket.AF_INET) as inet, socket.socket(socket.AF_UNIX) as local:
        with pytest.raises(ConnectionRefusedError):
            refuse_network("socket.connect", (inet, ("192.0.2.1", 443)))
        with pytest.raises(ConnectionRefusedError):
            refuse_network("socket.getaddrinfo", ("example.org", 443, 0, 0, 0, 0))
        refuse_network("socket.connect", (local, "/tmp/some.sock"))
        refuse_network("open", ("/etc/hosts", "r", 0))
    assert NETWORK_ATTEMPTS == ["connect ('192.0.2.1', 443)", "getaddrinfo 'example.org'"]
    NETWORK_ATTEMPTS.clear()
