"""Which processes may serve a reprocessed projection version: a worker derives into one derived
log with one configuration, a projector applies one log, a query service embeds with one
embedder. Serving a version with another of these would mix two configurations in one log or
two vector spaces in one search."""

from __future__ import annotations

import pytest

from projections.versions import DerivedLog, ProjectionVersion
from schemas.topics import Topics
from streams.rebuild.projection_switch import Serving

V2 = ProjectionVersion("v2", "engram.v2", "engram_episodic_v2")
LIVE = ProjectionVersion(None, "engram", "engram_episodic")
V2_LOG = DerivedLog("t.v2.", "t.engram.v2", "newconfig000", "hashing-64")
V3_LOG = DerivedLog("t.v3.", "t.engram.v3", "newconfig000", "hashing-64")


def worker(log: DerivedLog | None, config: str = "newconfig000") -> Serving:
    return Serving(log, config, "hashing-64", derives=True, applies_log=True)


def service(embedder: str) -> Serving:
    return Serving(None, "", embedder, derives=False, applies_log=False)


def test_a_worker_with_the_versions_configuration_continues_its_log() -> None:
    assert worker(V2_LOG).refusal(V2, V2_LOG) is None


def test_a_worker_with_another_configuration_is_told_which_one_to_restart_with() -> None:
    reason = worker(V2_LOG, config="oldconfig111").refusal(V2, V2_LOG)
    assert reason is not None
    assert "restart with configuration newconfig000 to serve version v2" in reason
    assert "oldconfig111" in reason


def test_a_worker_never_moves_to_another_derived_log_while_running() -> None:
    """Same configuration, other log: it would keep writing its own log, whose consumer group
    is not the one the new version continues."""
    reason = worker(V2_LOG).refusal(ProjectionVersion("v3", "e.v3", "c_v3"), V3_LOG)
    assert reason is not None
    assert "restart with configuration newconfig000 to serve version v3" in reason
    assert "t.v3.memory.items" in reason


def test_a_live_worker_leaves_for_a_reprocessed_version_and_its_worker_for_the_live_log() -> None:
    live_worker = worker(None)
    assert live_worker.refusal(V2, V2_LOG) is not None
    leaving = worker(V2_LOG).refusal(LIVE, None)
    assert leaving is not None
    assert "serve version (unversioned)" in leaving


def test_a_replayed_version_keeps_todays_behaviour() -> None:
    replayed = ProjectionVersion("v4", "engram.v4", "engram_episodic_v4")
    assert worker(None, config="anything0000").refusal(replayed, None) is None
    assert service("hashing").refusal(replayed, None) is None


@pytest.mark.parametrize(("embedder", "refused"), [("hashing-64", False), ("hashing", True)])
def test_a_query_service_follows_a_version_embedded_like_its_queries(
    embedder: str, refused: bool
) -> None:
    reason = service(embedder).refusal(V2, V2_LOG)
    assert (reason is not None) == refused
    if reason is not None:
        assert "embedder hashing-64" in reason
        assert "restart with configuration newconfig000 to serve version v2" in reason


def test_a_projector_applies_only_the_log_it_was_started_on() -> None:
    projector = Serving(V2_LOG, "", "hashing-64", derives=False, applies_log=True)
    assert projector.refusal(V2, V2_LOG) is None
    assert projector.refusal(ProjectionVersion("v3", "e.v3", "c_v3"), V3_LOG) is not None


def test_a_versions_derived_log_beside_the_live_raw_topics() -> None:
    topics = Topics("t.", "t.v2.")
    assert topics.agent_inputs == (
        "t.agent.observations",
        "t.agent.decisions",
        "t.agent.feedback",
    )
    assert (topics.schedule, topics.access) == ("t.memory.schedule", "t.memory.access")
    assert (topics.items, topics.lifecycle, topics.deadletter) == (
        "t.v2.memory.items",
        "t.v2.memory.lifecycle",
        "t.v2.memory.deadletter",
    )
    assert topics.event_type_of("t.agent.decisions") == "decision"
    assert Topics("t.").items == "t.memory.items"


def test_a_derived_log_round_trips_through_the_registrys_json() -> None:
    assert DerivedLog.from_json(V2_LOG.to_json()) == V2_LOG
