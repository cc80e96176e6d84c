"""ENGRAM_INSTANCE_ID reaches the consumer as its static group membership id."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.settings import EngramSettings
from streams.worker.app import create_processor_app


@pytest.mark.parametrize("instance_id", ["engram-worker-0", None])
def test_the_instance_id_is_the_consumers_group_instance_id(
    instance_id: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAM_INSTANCE_ID", raising=False)
    if instance_id is not None:
        monkeypatch.setenv("ENGRAM_INSTANCE_ID", instance_id)
    settings = EngramSettings(data_dir=tmp_path)
    app = create_processor_app(settings, "localhost:9092").app
    assert app.conf.consumer_group_instance_id == instance_id
