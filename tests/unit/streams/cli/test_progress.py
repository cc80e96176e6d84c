"""The replay's and reprocess's bar: a total learnt at the start is a floor the count may pass."""

from __future__ import annotations

import pytest
from rich.progress import Progress, Task

from streams.cli import progress as progress_module
from streams.cli.progress import sized_as_it_goes


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[Progress]:
    """The bars the module makes, to read their task back."""
    made: list[Progress] = []
    original = progress_module.record_progress

    def recording(description: str, total: int | None) -> Progress:
        bar = original(description, total)
        made.append(bar)
        return bar

    monkeypatch.setattr(progress_module, "record_progress", recording)
    return made


def _task(bars: list[Progress]) -> Task:
    return bars[0].tasks[0]


def test_the_total_grows_when_the_job_finds_more_than_it_was_told(bars: list[Progress]) -> None:
    with sized_as_it_goes("replaying") as (total, advance):
        total(100)
        advance(60)
        advance(60)
        assert (_task(bars).completed, _task(bars).total) == (120, 120)


def test_a_total_within_the_count_stands(bars: list[Progress]) -> None:
    with sized_as_it_goes("replaying") as (total, advance):
        total(100)
        advance(40)
        assert (_task(bars).completed, _task(bars).total) == (40, 100)


def test_a_total_set_late_is_never_below_what_is_done(bars: list[Progress]) -> None:
    with sized_as_it_goes("replaying") as (total, advance):
        advance(30)
        total(10)
        assert (_task(bars).completed, _task(bars).total) == (30, 30)


def test_a_total_learnt_in_parts_adds_up(bars: list[Progress]) -> None:
    """`engram recall` reads the agent's partition of several topics, one total each."""
    with sized_as_it_goes("reading the log") as (total, advance):
        total(50)
        advance(20)
        total(30)
        assert (_task(bars).completed, _task(bars).total) == (20, 80)


def test_without_a_total_the_bar_only_counts(bars: list[Progress]) -> None:
    with sized_as_it_goes("reading the log") as (_, advance):
        advance(20)
        assert (_task(bars).completed, _task(bars).total) == (20, None)
