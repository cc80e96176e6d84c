"""The environment `engram up --workers N` gives its extra worker processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.runtime.devstack.stack import DevStack
from streams.runtime.node import Endpoints

ENDPOINTS = Endpoints(kafka_bootstrap="127.0.0.1:9", redis_url="redis://127.0.0.1:6")


def test_each_worker_gets_its_own_instance_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exported ENGRAM_INSTANCE_ID given to every worker made each a static member of one
    id, and on a broker that does not fence the older one each took every partition."""
    monkeypatch.setenv("ENGRAM_INSTANCE_ID", "pod-a")
    stack = DevStack(tmp_path)
    ids = {stack.worker_environment(n, ENDPOINTS)["ENGRAM_INSTANCE_ID"] for n in (1, 2, 3)}
    assert ids == {"pod-a-worker-1", "pod-a-worker-2", "pod-a-worker-3"}


def test_no_instance_id_is_made_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENGRAM_INSTANCE_ID", raising=False)
    env = DevStack(tmp_path).worker_environment(1, ENDPOINTS)
    assert "ENGRAM_INSTANCE_ID" not in env
    assert env["ENGRAM_KAFKA_BOOTSTRAP"] == "127.0.0.1:9"
    assert env["ENGRAM_DATA_DIR"].endswith("worker-1")
