"""ENGRAM_DELIVERY_TIMEOUT is how long the worker's producer waits for the broker: Faust's own
default (20 minutes) left a worker whose broker was lost hanging mid-batch that long."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.settings import EngramSettings
from streams.worker.app import create_processor_app


@pytest.mark.parametrize(("value", "expected_ms"), [(None, 60_000), ("7.5", 7_500)])
def test_the_delivery_timeout_is_the_producers_request_timeout(
    value: str | None, expected_ms: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAM_DELIVERY_TIMEOUT", raising=False)
    if value is not None:
        monkeypatch.setenv("ENGRAM_DELIVERY_TIMEOUT", value)
    app = create_processor_app(EngramSettings(data_dir=tmp_path), "localhost:9092").app
    producer_settings = app.producer._settings_default()  # what aiokafka's producer gets
    assert producer_settings["request_timeout_ms"] == expected_ms


def test_a_delivery_timeout_of_zero_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_DELIVERY_TIMEOUT", "0")
    with pytest.raises(ValueError, match="delivery_timeout"):
        EngramSettings(data_dir=tmp_path)
