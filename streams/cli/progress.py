"""Progress of the commands that move many records (export, import, replay, reprocess), on
stderr so that what they print on stdout stays clean."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from streams.cli.console import console, err, unless_stopping

if TYPE_CHECKING:
    from streams.eventlog.archive_files import TopicSummary

Advance = Callable[[int], None]
"""Called with a count of records: how many more are done, or how many there are in all.
Advancing is also where a job still at work after Ctrl-C stops (:func:`unless_stopping`)."""


def record_progress(description: str, total: int | None) -> Progress:
    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn() if total else TextColumn("{task.completed:,} records"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=False,
    )


@contextlib.contextmanager
def counted(description: str, total: int | None) -> Iterator[Advance]:
    """A progress bar of records (records/s, ETA) and the callback that advances it."""
    with record_progress(description, total) as progress:
        task = progress.add_task(description, total=total, rate="")

        def advance(n: int) -> None:
            unless_stopping()
            progress.update(task, advance=n, rate=_rate(progress, task))

        yield advance


@contextlib.contextmanager
def sized_as_it_goes(description: str) -> Iterator[tuple[Advance, Advance]]:
    """A progress bar of records for a job that learns its total only once it has started:
    the callback that adds to the total (a job of several reads learns it a read at a time),
    and the one that advances the bar.

    The total is a floor, not a promise: a replay also reads what the live workers write while
    it runs, and a broker's offsets may under-count what a read then finds. Past it, the total
    grows with the count, so the bar never shows more done than there is in all."""
    with record_progress(description, 1) as progress:
        task = progress.add_task(description, total=None, rate="")
        expected: int | None = None

        def total(n: int) -> None:
            nonlocal expected
            expected = (expected or 0) + n
            done = progress.tasks[task].completed
            progress.update(task, total=max(expected, 1, int(done)))

        def advance(n: int) -> None:
            unless_stopping()
            done = progress.tasks[task].completed + n
            grown = None if expected is None else max(expected, 1, int(done))
            progress.update(task, advance=n, total=grown, rate=_rate(progress, task))

        yield total, advance


async def transfer(what: str, job: Awaitable[list[TopicSummary]]) -> list[TopicSummary]:
    """Run an export or import, then say how many records of how many topics it moved."""
    started = time.perf_counter()
    with console.status(f"{what}..."):
        summaries = await job
    records = sum(s.total for s in summaries)
    took = time.perf_counter() - started
    console.print(
        f"{what}: {records:,} records of {sum(1 for s in summaries if s.total)} topics "
        f"in {took:.1f}s"
    )
    return summaries


def _rate(progress: Progress, task: TaskID) -> str:
    speed = progress.tasks[task].speed
    return f"{speed:,.0f} records/s" if speed else ""
