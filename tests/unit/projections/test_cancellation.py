import asyncio
import logging
import sys

import pytest

from projections.cancellation import cancel_and_wait


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="asyncio.wait_for keeps it from 3.12")
async def test_python_3_11_wait_for_loses_a_cancellation_that_arrives_with_its_result() -> None:
    """Why cancel_and_wait exists: a loop like the lease's renewal, cancelled as a command's
    send completes, goes on as if it had not been."""
    turns = 0
    loop_task: asyncio.Task[None] | None = None

    async def send() -> None:
        if turns == 1:
            assert loop_task is not None
            loop_task.cancel()  # the stop, in the very step that completes the send

    async def renew() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.wait_for(send(), 10)
            await asyncio.sleep(0.01)

    loop_task = asyncio.create_task(renew())
    await asyncio.sleep(0.1)
    assert not loop_task.done()
    assert turns > 2
    assert await cancel_and_wait(loop_task, within=5)


async def test_a_loop_that_loses_the_first_cancellation_is_ended_by_the_next() -> None:
    lost = 0

    async def renew() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost += 1

    task = asyncio.create_task(renew())
    await asyncio.sleep(0)
    assert await cancel_and_wait(task, within=5)
    assert task.cancelled()
    assert lost == 1


async def test_a_task_that_never_ends_is_left_with_a_warning_once_the_bound_passes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn(), name="stubborn-loop")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="engram.tasks"):
        assert not await cancel_and_wait(task, within=0.3)
    assert not task.done()
    assert caplog.messages == ["stubborn-loop did not end within 0.3 s of being cancelled"]
    release.set()
    task.cancel()
    await asyncio.wait({task}, timeout=1)
    assert task.done()


async def test_a_task_that_failed_before_is_ended_without_raising() -> None:
    async def fails() -> None:
        raise RuntimeError("Redis went away")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    assert await cancel_and_wait(task, within=1)
