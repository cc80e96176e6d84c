"""A stop of Faust that hangs is bounded: mode stops a service thread by cancelling every task
on its loop and waiting for all of them, so one task that does not end on cancellation kept a
worker from ever exiting. Run on a real mode ``ServiceThread`` with such a task."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from mode.threads import ServiceThread

from streams.worker.faust_stop import ForcedStop, stop_within

pytestmark = pytest.mark.timeout(60)


async def stubborn() -> None:
    """A driver's task that outlives every cancellation (a request a broker never answers)."""
    while True:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)


class StuckThread(ForcedStop, ServiceThread):
    async def on_thread_started(self) -> None:
        self.stuck = asyncio.get_running_loop().create_task(stubborn())


async def test_a_thread_whose_task_outlives_cancellation_still_stops() -> None:
    """mode's own stop would wait on a blocking, unbounded join here, the whole process with it."""
    service = StuckThread()
    await service.start()
    started = time.monotonic()

    await service.stop()

    assert time.monotonic() - started < 15
    assert service._thread is not None
    assert not service._thread.is_alive(), "the thread ended: the process can exit"


async def test_a_stop_that_hangs_is_cut_and_the_thread_ends() -> None:
    """Faust's own stop, waiting on the consumer thread, never returns: cut after the bound."""
    service = StuckThread()
    await service.start()
    never = asyncio.Event()
    started = time.monotonic()

    stopped_by_itself = await stop_within(never.wait, service, seconds=1.0)

    assert stopped_by_itself is False
    assert time.monotonic() - started < 15
    assert service._thread is not None
    assert not service._thread.is_alive()
