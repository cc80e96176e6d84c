"""The garbage collector's thresholds for Engram's processes (streams/runtime/collector.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from streams.cli.console import run
from streams.runtime.collector import COLLECTOR_THRESHOLDS, tune_collector


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[None]:
    """The test process's own thresholds, whatever a test sets."""
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_tuning_makes_young_collections_rarer() -> None:
    tune_collector()

    assert gc.get_threshold() == COLLECTOR_THRESHOLDS
    assert COLLECTOR_THRESHOLDS[0] > 700


def test_every_command_runs_with_the_collector_tuned() -> None:
    seen: list[tuple[int, int, int]] = []

    async def command() -> None:
        seen.append(gc.get_threshold())

    run(command)

    assert seen == [COLLECTOR_THRESHOLDS]
