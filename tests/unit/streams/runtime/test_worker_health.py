"""When a worker counts as caught up with its assignment, and what its probes answer."""

from __future__ import annotations

from starlette.testclient import TestClient

from streams.runtime.worker_health import behind, probe_app

A, B = ("agent.observations", 0), ("agent.decisions", 1)


def test_a_partition_is_behind_until_committed_or_applied_reaches_its_end() -> None:
    targets = {A: 10, B: 5}
    assert behind(targets, {}, {}) == [B, A]
    assert behind(targets, {A: 10}, {}) == [B]
    assert behind(targets, {A: 9}, {A: 8}) == [B, A]
    assert behind(targets, {A: 3}, {A: 9, B: 4}) == []


def test_a_partition_never_committed_nor_applied_is_behind_from_offset_zero() -> None:
    assert behind({A: 1}, {}, {}) == [A]
    assert behind({A: 1}, {}, {A: 0}) == []


def test_no_targets_is_caught_up() -> None:
    assert behind({}, {A: 3}, {B: 7}) == []


def test_probes_answer_503_with_the_checks_until_all_are_ok() -> None:
    state = {"partitions": "processing the backlog of 1 of 2 partitions"}

    async def live() -> dict[str, str]:
        return {"processors": "ok"}

    async def ready() -> dict[str, str]:
        return {"processors": "ok", **state}

    async def broken() -> dict[str, str]:
        raise RuntimeError("broker unreachable")

    client = TestClient(probe_app(live, ready))
    assert client.get("/healthz").status_code == 200
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["checks"]["partitions"].startswith("processing the backlog")
    state["partitions"] = "ok"
    assert client.get("/readyz").json() == {
        "status": "ok",
        "checks": {"processors": "ok", "partitions": "ok"},
    }
    failing = TestClient(probe_app(live, broken)).get("/readyz")
    assert failing.status_code == 503
    assert failing.json()["checks"] == {"probe": "broker unreachable"}
