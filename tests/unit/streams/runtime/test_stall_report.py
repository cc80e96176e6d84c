import asyncio
import logging
import threading
import time

import pytest

from streams.runtime.stall_report import reported_if_slow, stall_report, unfinished_tasks_report


def _loop_waiting_in_another_thread() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    loop = asyncio.new_event_loop()
    started = threading.Event()

    async def waits_for_a_shutdown_nobody_sets(never: asyncio.Event) -> None:
        started.set()
        await never.wait()

    async def main() -> None:
        task = asyncio.ensure_future(waits_for_a_shutdown_nobody_sets(asyncio.Event()))
        await asyncio.sleep(0.5)
        task.cancel()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), name="stuck")
    thread.start()
    assert started.wait(5)
    return loop, thread


def test_the_report_follows_a_task_down_its_awaits_in_a_loop_of_another_thread() -> None:
    loop, thread = _loop_waiting_in_another_thread()
    try:
        report = unfinished_tasks_report()
    finally:
        thread.join(5)
        loop.close()
    assert "in waits_for_a_shutdown_nobody_sets" in report
    assert "locks.py" in report  # down the chain: asyncio.Event.wait


def test_a_closed_loop_is_left_out() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    assert f"{id(loop):#x}" not in unfinished_tasks_report()


def test_the_report_names_every_thread_with_its_stack() -> None:
    loop, thread = _loop_waiting_in_another_thread()
    try:
        report = stall_report()
    finally:
        thread.join(5)
        loop.close()
    assert "thread stuck:" in report
    assert "thread MainThread:" in report
    assert "in test_the_report_names_every_thread_with_its_stack" in report


def test_a_slow_block_is_reported_once_and_a_quick_one_never(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("test.stall")
    with caplog.at_level(logging.WARNING, logger="test.stall"):
        with reported_if_slow("quick", 0.3, logger):
            pass
        time.sleep(0.5)
        with reported_if_slow("stopping", 0.1, logger):
            time.sleep(0.6)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert messages[0].startswith("stopping is taking over 0 s; waiting in:\nthread ")
    assert "in test_a_slow_block_is_reported_once_and_a_quick_one_never" in messages[0]
